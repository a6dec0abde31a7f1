"""The registry of tensor names: one entry per name pattern, with its axes, what it holds and
which architectures produce it.

Everything that names a tensor reads it from here: axis labels and CSV headers
(``axes``), ``python -m model hooks`` and docs/engine.md's table (``markdown_table``), the
list of what a full trace holds (``activation_names``). The forward pass calls
``hook(name, x)`` with literal names, so that it reads like the math; tests check that a
trace of every kind of model holds exactly the names and shapes listed here, in order.

A trace holds one sequence, so there is no batch axis. Per-head tensors put the head first.
"""

from __future__ import annotations

import re

from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.name_table import (  # the table: re-exported, names.X is how the code reads it
    ACTIVATIONS,
    AXES,
    HEAD,
    PARAMETERS,
    SEQ2SEQ,
    SHARED,
    STACKS,
    Name,
)

GRAD = "grad:"  # prefix of every gradient's name: "grad:blocks.0.hook_resid_pre", "grad:embed.W_E"


# How every page, the CLI and the URL number blocks and heads: from 1, as people count (and as the
# article does: Q(1,1)), with the engine's index beside it, so "block 1" and blocks.0 never look
# like two different things.
def block_label(index: int) -> str:
    """ "block 1 (blocks.0)" for the engine's block 0."""
    return f"block {index + 1} (blocks.{index})"


def block_runs(indices: list[int]) -> str:
    """The engine's block indices counted from 1, as runs: [0, 1, 2, 4] → "1–3, 5" (the pages'
    "block 1 (blocks.0)")."""
    runs, start = [], None
    for i, block in enumerate(indices):
        start = block if start is None else start
        if i + 1 == len(indices) or indices[i + 1] != block + 1:
            runs.append(f"{start + 1}–{block + 1}" if block > start else str(block + 1))
            start = None
    return ", ".join(runs)


def head_label(index: int) -> str:
    """ "head 1 ([0])" for the engine's head 0: [0] is its index in a per-head tensor (hook_q[0])."""
    return f"head {index + 1} ([{index}])"


def _regex(pattern: str) -> re.Pattern:
    return re.compile(re.escape(pattern).replace(r"\{i\}", r"\d+").replace(r"\{ln\}", "ln[12]") + "$")


_ENTRIES = [(_regex(n.pattern), n) for n in SEQ2SEQ + ACTIVATIONS + PARAMETERS]


def _in_stack(pattern: str) -> bool:
    return not pattern.startswith(HEAD) and pattern not in SHARED


def lookup(name: str) -> Name:
    """The registry entry of a tensor, parameter or gradient name ("grad:" is dropped). A name
    under an encoder-decoder's "encoder." or "decoder." is its stack's name (the encoder's
    positions on the "source" axis)."""
    name = name.removeprefix(GRAD)
    for regex, entry in _ENTRIES:
        if regex.match(name):
            return entry
    stack = next((s for s in STACKS if name.startswith(s)), None)
    if stack is not None:
        entry = lookup(name.removeprefix(stack))
        if _in_stack(entry.pattern) and entry not in SEQ2SEQ:
            encoder = stack == "encoder."
            axes = tuple("source" if encoder and a in ("position", "query", "key") else a for a in entry.axes)
            return Name(stack + entry.pattern, axes, entry.what, entry.produced_by)
    raise KeyError(f"{name!r} is not a Glassbox tensor name")


def registered(name: str) -> bool:
    """Whether ``name`` is a registered tensor, parameter or gradient name (``lookup`` finds it)."""
    try:
        lookup(name)
        return True
    except KeyError:
        return False


def axes(name: str) -> tuple[str, ...]:
    """The axis names of a trace tensor, gradient or parameter: for labels and CSV headers."""
    return lookup(name).axes


def shape(name: str, cfg: ModelConfig, n_tokens: int, n_source: int | None = None) -> tuple[int, ...]:
    """The shape of a tensor of a pass over ``n_tokens`` (an encoder-decoder's: target tokens,
    with ``n_source`` source tokens)."""
    return tuple(_length(axis, cfg, n_tokens, n_source) for axis in axes(name))


def _length(axis: str, cfg: ModelConfig, n_tokens: int, n_source: int | None) -> int:
    length = n_source if axis == "source" else AXES[axis][1](cfg, n_tokens)
    if length is None:
        raise ValueError(f"No length for the {axis!r} axis: " + ("give n_source" if axis == "source" else "this model has none"))
    return length


def _stack_names(entries: list[Name], cfg: ModelConfig) -> list[str]:
    """One stack's names in forward (or registration) order: those before the blocks, each
    block's, those after."""
    inside = [n for n in entries if _in_stack(n.pattern)]
    per_block = [n for n in inside if n.pattern.startswith("blocks.")]
    first, last = inside.index(per_block[0]), inside.index(per_block[-1])
    names = [x for n in inside[:first] for x in n.expand(cfg)]
    for i in range(cfg.n_layers):
        names += [n.pattern.format(i=i) for n in per_block if n.produced(cfg, i)]
    return names + [x for n in inside[last + 1 :] for x in n.expand(cfg)]


def _model_names(entries: list[Name], cfg: ModelConfig, between: list[str]) -> list[str]:
    """The shared names, the stack's (an encoder-decoder's two, with ``between`` them), the head's."""
    shared = [x for n in entries if n.pattern in SHARED for x in n.expand(cfg)]
    head = [x for n in entries if n.pattern.startswith(HEAD) for x in n.expand(cfg)]
    if not cfg.encoder_decoder:
        return shared + _stack_names(entries, cfg) + head
    encoder, decoder = cfg.stacks()
    return [
        *shared,
        *("encoder." + n for n in _stack_names(entries, encoder)),
        *between,
        *("decoder." + n for n in _stack_names(entries, decoder)),
        *head,
    ]


def activation_names(cfg: ModelConfig) -> list[str]:
    """Every activation a full trace of this model holds, in forward order."""
    return _model_names(ACTIVATIONS, cfg, [x for n in SEQ2SEQ for x in n.expand(cfg)])


def parameter_names(cfg: ModelConfig) -> list[str]:
    """Every parameter of this model, in the order it registers them."""
    return _model_names(PARAMETERS, cfg, [])


def is_norm_parameter(name: str) -> bool:
    """A norm's scale γ or shift β (LayerNorm's or RMSNorm's), under any block, the final or the
    embedding norm, or BERT's MLM transform; in either stack of an encoder-decoder."""
    return (
        re.fullmatch(
            r"((encoder|decoder)\.)?(blocks\.\d+\.(ln[12](_post)?|ln_cross|attn\.[qk]_norm(_full)?)"
            r"|ln_final|ln_embed)\.[wb]|mlm\.ln\.[wb]",
            name,
        )
        is not None
    )


def registered_hooks() -> set[str]:
    """The last part of every activation name ("hook_q", "hook_resid_pre", …)."""
    return {n.pattern.rsplit(".", 1)[-1] for n in ACTIVATIONS + SEQ2SEQ}


def markdown_table() -> str:
    """docs/engine.md's table of names (a test checks it holds exactly this)."""
    rows = ["| name | shape | what | produced by |", "|---|---|---|---|"]
    for entry in ACTIVATIONS + SEQ2SEQ + PARAMETERS:
        symbols = "×".join(AXES[a][0] for a in entry.axes)
        rows.append(f"| `{entry.pattern}` | {symbols} | {entry.what} | {entry.produced_by} |")
    rows.append(
        "| `encoder.<name>`, `decoder.<name>` | as `<name>`; the encoder's positions S for T | an "
        "encoder-decoder's two stacks: each holds the names above from `hook_embed` to `ln_final.*` (the "
        "decoder's blocks with cross-attention); `embed.W_E` and the head's names stay unprefixed | "
        "encoder-decoder |"
    )
    rows.append(f"| `{GRAD}<any name above>` | same | ∂L/∂(that tensor) | where the tensor is on the loss's path |")
    return "\n".join(rows)
