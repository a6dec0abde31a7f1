"""A tensor of a trace as one 2-D grid with labelled rows and columns, and the one rule for
which slice of it a head or an expert is: ``Trace.figure`` and the explorer's views both draw
by it, so a head shows the same numbers in a notebook and on a page.

Grouped-query attention: a model with fewer key/value heads than query heads (``n_kv_heads``)
shares each key/value head among ``n_heads / n_kv_heads`` consecutive query heads, so query
head ``h``'s keys and values are ``hook_k[cfg.kv_head(h)]``, not ``hook_k[h]``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Protocol

import numpy as np
import torch

from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.device import to_numpy
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.names import GRAD, axes
from glassbox.model.plot.labels import position_labels, token_text

UNIT_AXES = ("head", "kv_head", "expert")  # a leading axis of one of these: a grid is one unit's slice


def unit_axis(name: str) -> str | None:
    """ "head", "kv_head" or "expert" where a tensor (or its gradient) holds every head, key/value
    head or expert of a block, that axis first (hook_q, hook_k, experts.hook_pre, W_in …); else None."""
    first = axes(name)[:1]
    return first[0] if first and first[0] in UNIT_AXES else None


def unit_index(cfg: ModelConfig, name: str, head: int = 0, expert: int = 0) -> tuple[int, ...]:
    """Where query head ``head``'s (or ``expert``'s) slice of ``name``'s tensor is: (head,) on a
    per-head axis, (the key/value head that query head reads,) on a key/value one, (expert,) on
    an expert axis, () for a tensor without such an axis. Heads and experts count from 0."""
    axis = unit_axis(name)
    if axis is None:
        return ()
    if axis == "expert":
        n_experts = cfg.n_experts or 0
        if not 0 <= expert < n_experts:
            raise GlassboxError(f"expert must be 0 … {n_experts - 1}: this model has {n_experts} experts")
        return (expert,)
    if not 0 <= head < cfg.n_heads:
        raise GlassboxError(f"head must be 0 … {cfg.n_heads - 1}: this model has {cfg.n_heads} heads")
    return (head if axis == "head" else cfg.kv_head(head),)


def sequential(name: str) -> bool:
    """Whether a tensor is drawn on a scale from 0 up (probabilities), not one centred at 0: a
    gradient, even of probabilities, has both signs."""
    return not name.startswith(GRAD) and name.endswith(("hook_pattern", "hook_probs"))


class Prompt(Protocol):
    """What labels a grid's axes (the explorer's ``Explorer`` is one; ``PromptLabels`` another)."""

    cfg: ModelConfig
    tokens: list[int]
    labels: list[str]  # each position's "position:token"
    source_labels: list[str]  # an encoder-decoder's source positions, labelled as ``labels``
    vocab_pieces: Sequence[str]  # every token id as drawn


@dataclass
class PromptLabels:
    """A prompt's labels from the tokenizer's pieces (every id's text), drawn when first read."""

    cfg: ModelConfig
    tokens: list[int]
    pieces: list[str]
    source: list[int] | None = None

    @cached_property
    def labels(self) -> list[str]:
        return position_labels(self.pieces, self.tokens)

    @cached_property
    def source_labels(self) -> list[str]:
        return position_labels(self.pieces, self.source or [])

    @cached_property
    def vocab_pieces(self) -> list[str]:
        """Every id as drawn; a model may have more rows than its tokenizer has tokens (#id)."""
        return [token_text(p) for p in self.pieces] + [f"#{i}" for i in range(len(self.pieces), self.cfg.vocab_size)]


def axis_labels(prompt: Prompt, axis: str) -> list[str] | None:
    """The labels of a registered axis of positions (model/engine/names.py): the tokens' for
    "position", "query" and "key", an encoder-decoder's source's for "source"; None for any other."""
    if axis in ("position", "query", "key"):
        return prompt.labels
    return prompt.source_labels if axis == "source" else None


class TensorGrid(NamedTuple):
    """One tensor drawn as a grid: its values (float32), each row's and column's label, the axes'
    names, and what was taken from the tensor ("[2]": head 2's slice; "[prompt tokens]")."""

    values: np.ndarray
    rows: list[str]
    cols: list[str]
    row_title: str
    col_title: str
    note: str


def tensor_grid(prompt: Prompt, name: str, tensor: torch.Tensor, head: int = 0, expert: int = 0) -> TensorGrid:
    """Any named tensor or gradient as a 2-D grid. A per-head tensor gives query head ``head``'s
    slice (the key/value head it reads, where they are shared: ``unit_index``), a per-expert one
    ``expert``'s, a 1-D one a single row; the embedding and unembedding give the prompt's tokens'
    rows or columns. Positions are labelled with their tokens (an encoder-decoder's source
    positions with the source's), a vocabulary axis with every token."""
    names = axes(name)
    index = unit_index(prompt.cfg, name, head, expert)
    values, note = (tensor[index], f"[{index[0]}]") if index else (tensor, "")
    names = names[len(index) :]
    if values.dim() == 1:
        values, names = values[None], ("", *names)
    rows = axis_labels(prompt, names[0]) or [str(i) for i in range(values.shape[0])]
    cols = axis_labels(prompt, names[1]) or [str(i) for i in range(values.shape[1])]
    if names[1] == "vocab" and names[0] != "d_model":  # W_U's columns are the prompt's tokens' (below)
        cols = [f"{i}:{p}" for i, p in enumerate(prompt.vocab_pieces)]
    if names == ("vocab", "d_model"):  # W_E: the prompt's tokens' rows (the tied head adds to all rows)
        values, rows, note = values[prompt.tokens], prompt.labels, "[prompt tokens]"
        names = ("token (its row)", names[1])
    if names == ("context", "d_model"):  # W_pos: the rows used
        values, rows, note = values[: len(prompt.tokens)], prompt.labels, "[0:T]"
        names = ("position", names[1])
    if names == ("d_model", "vocab"):  # W_U: the prompt tokens' columns
        values, cols, note = values[:, prompt.tokens], prompt.labels, "[:, prompt tokens]"
    return TensorGrid(to_numpy(values.float()), rows, cols, names[0], names[1], note)


def tensor_figure(prompt: Prompt, name: str, tensor: torch.Tensor, head: int = 0, expert: int = 0):
    """``tensor_grid`` drawn (``heatmap_figure``: a plotly figure), titled with the tensor's name
    and the slice taken."""
    from glassbox.model.plot.heatmap import heatmap_figure

    grid = tensor_grid(prompt, name, tensor, head, expert)
    return heatmap_figure(
        grid.values,
        grid.rows,
        grid.cols,
        name + grid.note,
        row_title=grid.row_title,
        col_title=grid.col_title,
        colour="sequential" if sequential(name) else "diverging",
    )
