"""How tokens are written on a chart's axes, and the colours every chart uses."""

from __future__ import annotations

import re

DIVERGING = "RdBu_r"  # blue below 0, white at 0, red above
HIGHLIGHT = "#f2a900"

_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})
WORD_JOINER = "\u2060"
_CHART_MARKUP = re.compile(r"(?<=[<&])(?!\u2060)")  # where plotly's tags and entities begin (once: a label drawn twice)


def token_text(piece: str) -> str:
    """A token as drawn: a space as ␣ (" went" is "␣went": the space belongs to the token), a
    newline ↵, a tab ⇥, any other invisible character escaped (\\x00); the empty piece ∅. Byte
    fragments come from the tokenizer already written as bytes (``Tokenizer.readable``: <0xE4>).
    Charts draw it, and plotly reads tags and entities in its text (a vocabulary's ``<b>x</b>``
    would be drawn bold, ``&lt;`` as <): an invisible word joiner after each < and & keeps it text."""
    shown = piece.translate(_VISIBLE)
    # the word joiner is left as it is, so that a label drawn twice (vocab_pieces, then token_labels) stays one label
    shown = "".join(c if c.isprintable() or c == WORD_JOINER else repr(c)[1:-1] for c in shown) or "∅"
    return _CHART_MARKUP.sub(WORD_JOINER, shown)


def position_labels(pieces: list[str], tokens: list[int], first: int = 0) -> list[str]:
    """A prompt's positions as axis labels, "position:token" ("3:␣on"), counting from ``first``."""
    return [f"{i}:{token_text(pieces[t])}" for i, t in enumerate(tokens, first)]
