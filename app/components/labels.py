"""How numbers and names are written on screen (a chart's tokens and colours: model/plot/labels.py)."""

from __future__ import annotations

import html
import math
import re

from glassbox.model.plot.labels import WORD_JOINER, token_text


def bar_label(p: float) -> str:
    """A probability bar's value, left off below 0.001 where it would only clutter."""
    return f"{float(p):.3f}" if float(p) >= 0.001 else ""


NEGLIGIBLE = 1e-12  # relative to a grid's largest value: rounding noise, written as 0 (exact on hover)


def power_of_ten(value: float) -> int:
    """The power of ten of a positive number's leading digit (0.000278: −4); 0 for 0."""
    return math.floor(math.log10(value)) if value > 0 else 0


def cell_text(value: float, largest: float, digits: str = ".3g") -> str:
    """A value as written in a cell: −∞ as such, rounding noise (5.55e-17 beside 1.2) as 0, NaN
    (nothing there: an expert that did not run) left blank."""
    if value == -float("inf"):
        return "−∞"
    if value != value:
        return ""
    if abs(value) < NEGLIGIBLE * largest:
        return "0"
    written = f"{value:{digits}}"
    # a small negative value rounded to nothing is written without its sign ("0.000", not "-0.000")
    return written[1:] if written.startswith("-") and float(written) == 0 else written


def number(value: float, digits: int = 4) -> str:
    """A number as a reader expects it, with ``digits`` decimals: 0 (and −0.0, and a value that
    only rounding made negative) as "0", never "-0.0000"; a nonzero value too small to show in
    that many decimals in scientific notation (1.1e-10, not "0.000000"); ±∞ and NaN by name."""
    value = float(value)
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if value == 0:
        return "0"
    written = f"{value:.{digits}f}"
    if float(written) == 0:
        return f"{value:.2g}"
    return written


def token_labels(pieces: list[str], ids: list[int]) -> list[str]:
    """Axis labels for tokens (``token_text``), with the id where two still look alike, so that no
    two bars of a chart share a category and stack."""
    shown = [token_text(p) for p in pieces]
    repeated = {s for s in shown if shown.count(s) > 1}
    return [f"{s} #{i}" if s in repeated else s for s, i in zip(shown, ids)]


def pretty(label: str) -> str:
    """Article names for people: dL/dX(2) -> ∂L/∂X(2)."""
    return label.replace("dL/d", "∂L/∂")


_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character
# Where the renderer turns bare text into a link (http://…, www.…, a@b.c) or an image (Streamlit's
# :streamlit: emoji): it does so after backslash escapes are undone, so those cannot stop it; an
# invisible word joiner after every colon, around every @ and inside "www." does.
_TEXT_PATTERNS = re.compile(r"(?<=:)|(?<=www)(?=\.)|(?=@)|(?<=@)", re.IGNORECASE)


def plain(text: object) -> str:
    """User text (a prompt, a token, a path, a URL value, an error message that quotes them) for
    st.error, st.markdown and the like, shown as typed: every ASCII punctuation character is
    backslash-escaped (CommonMark undoes any such escape), so no Markdown, link, image, LaTeX,
    colour directive, emoji code or HTML can come of it, and a word joiner (U+2060, invisible)
    breaks the patterns GFM would turn into links. The one helper for it, used everywhere."""
    return _PUNCTUATION.sub(r"\\\1", _TEXT_PATTERNS.sub(WORD_JOINER, str(text)))


def plain_html(text: object) -> str:
    """User text for st.html (which renders HTML, not Markdown): shown as typed."""
    return html.escape(str(text))
