"""The article's names for the worked example's weights and tensors, and where each one
lives in the engine: the one table that the article's figures, the JSON contract and the
steps read.

A gradient is named "dL/d" + the name of what it is the gradient of ("dL/dX(2)",
"dL/dW_Q(2,1)"); it lives at "grad:" + that engine name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache

from glassbox.model.engine import GRAD

GRADIENT = "dL/d"  # the article's prefix of a gradient's name


@dataclass(frozen=True)
class Slot:
    """Where an article name lives: an engine tensor or parameter, one head of it (None: no
    head dimension is picked), only the last position's row or not, and the kinds of the
    article's row and column axes. ``join`` lays all heads out as one matrix: "rows" stacks
    them (W_O), "cols" puts them side by side (concat)."""

    engine: str
    head: int | None = None
    last: bool = False
    rows: str = "pos"
    cols: str = "model"
    join: str | None = None

    def grid_name(self, last: int) -> str:
        """The engine name as the step-through shows it: "blocks.0.attn.hook_q[0]"."""
        if self.head is not None:
            return f"{self.engine}[{self.head}]"
        if self.last:
            return f"{self.engine}[{last}]"
        return f"{self.engine} (heads side by side)" if self.join == "cols" else self.engine

    def pick(self, tensor, last: int):
        """This slot's part of the engine tensor (torch or numpy; no batch dimension)."""
        if self.head is not None:
            tensor = tensor[self.head]
        if self.last:
            tensor = tensor[last]
        if self.join == "rows":
            return tensor.reshape(-1, tensor.shape[-1])
        if self.join == "cols":
            return tensor.swapaxes(0, 1).reshape(tensor.shape[1], -1)
        return tensor


# Article name pattern -> slot. In a pattern {b} is a block and {h} a head, counted from 1;
# {i} a block counted from 0 (X_LN(b-1)). In an engine name {i} is the block's index; a
# pattern with {h} picks head h-1. Axis kinds: see steps/builder.py.
_TABLE: dict[str, Slot] = {
    # weights
    "W_E": Slot("embed.W_E", rows="vocab"),
    "W_P": Slot("pos_embed.W_pos", rows="table"),
    **{f"W_{kind}({{b}},{{h}})": Slot(f"blocks.{{i}}.attn.W_{kind}", rows="model", cols="head") for kind in "QKV"},
    "W_O({b})": Slot("blocks.{i}.attn.W_O", rows="concat", join="rows"),
    "W_1({b})": Slot("blocks.{i}.mlp.W_in", rows="model", cols="ffn"),
    "b_1({b})": Slot("blocks.{i}.mlp.b_in", rows="one", cols="ffn"),
    "W_2({b})": Slot("blocks.{i}.mlp.W_out", rows="ffn"),
    "b_2({b})": Slot("blocks.{i}.mlp.b_out", rows="one"),
    # the forward pass
    "E": Slot("hook_embed"),
    "X(0)": Slot("blocks.0.hook_resid_pre"),
    "X_LN({i})": Slot("blocks.{i}.ln1.hook_out"),
    **{f"{kind}({{b}},{{h}})": Slot(f"blocks.{{i}}.attn.hook_{kind.lower()}", cols="head") for kind in "QKV"},
    "scores({b},{h})": Slot("blocks.{i}.attn.hook_scores", cols="key"),
    "masked({b},{h})": Slot("blocks.{i}.attn.hook_scores_masked", cols="key"),
    "A({b},{h})": Slot("blocks.{i}.attn.hook_pattern", cols="key"),
    "out({b},{h})": Slot("blocks.{i}.attn.hook_z", cols="head"),
    "concat({b})": Slot("blocks.{i}.attn.hook_z", cols="concat", join="cols"),
    "attn_out({b})": Slot("blocks.{i}.hook_attn_out"),
    "X_mid({b})": Slot("blocks.{i}.hook_resid_mid"),
    "X_mid_LN({b})": Slot("blocks.{i}.ln2.hook_out"),
    "h({b})": Slot("blocks.{i}.mlp.hook_pre", cols="ffn"),
    "h_act({b})": Slot("blocks.{i}.mlp.hook_post", cols="ffn"),
    "ffn_out({b})": Slot("blocks.{i}.hook_mlp_out"),
    "X({b})": Slot("blocks.{i}.hook_resid_post"),
    "X_final": Slot("ln_final.hook_out"),
    "h_final": Slot("ln_final.hook_out", last=True, rows="last"),
    "logits": Slot("hook_logits", last=True, rows="last", cols="vocab"),
    "probs": Slot("hook_probs", last=True, rows="last", cols="vocab"),
    "loss": Slot("hook_loss", last=True, rows="stat", cols="one"),
    # inside each LayerNorm: x̂ = (x - mean)/σ (shown under the LayerNorm's output name), and σ
    "x̂ X_LN({i})": Slot("blocks.{i}.ln1.hook_normalized"),
    "x̂ X_mid_LN({b})": Slot("blocks.{i}.ln2.hook_normalized"),
    "x̂ X_final": Slot("ln_final.hook_normalized"),
    "σ X_LN({i})": Slot("blocks.{i}.ln1.hook_scale", cols="one"),
    "σ X_mid_LN({b})": Slot("blocks.{i}.ln2.hook_scale", cols="one"),
    "σ_final": Slot("ln_final.hook_scale", cols="one"),
}

_FIELD = {"{b}": r"(?P<b>[1-9]\d*)", "{h}": r"(?P<h>[1-9]\d*)", "{i}": r"(?P<i>\d+)"}


def _regex(pattern: str) -> re.Pattern:
    parts = re.split(r"(\{[bhi]\})", pattern)
    return re.compile("".join(_FIELD.get(part, re.escape(part)) for part in parts))


_PATTERNS = [(_regex(pattern), where) for pattern, where in _TABLE.items()]


@cache
def slot(article_name: str) -> Slot:
    """Where ``article_name`` lives in the engine; KeyError for a name the table lacks."""
    gradient = article_name.startswith(GRADIENT)
    name = article_name[len(GRADIENT) :] if gradient else article_name
    for pattern, where in _PATTERNS:
        match = pattern.fullmatch(name)
        if match:
            fields = match.groupdict()
            block = int(fields["b"]) - 1 if "b" in fields else int(fields.get("i") or 0)
            head = int(fields["h"]) - 1 if "h" in fields else None
            engine = (GRAD if gradient else "") + where.engine.format(i=block)
            return replace(where, engine=engine, head=head)
    raise KeyError(article_name)


def block_input(b: int, gradient: bool = False) -> tuple[str, Slot]:
    """X(b-1) (or its gradient) as block b reads it: (article name, the block's hook_resid_pre)."""
    prefix = (GRADIENT, GRAD) if gradient else ("", "")
    return f"{prefix[0]}X({b - 1})", Slot(f"{prefix[1]}blocks.{b - 1}.hook_resid_pre")


def weight_names(n_layers: int, n_heads: int) -> list[str]:
    """Every weight's article name, in the article's order."""
    names = ["W_E", "W_P"]
    for b in range(1, n_layers + 1):
        names += [f"W_{kind}({b},{h})" for h in range(1, n_heads + 1) for kind in "QKV"]
        names += [f"{kind}({b})" for kind in ("W_O", "W_1", "b_1", "W_2", "b_2")]
    return names


def article_tensor(article_name: str, tensors: Mapping, last: int):
    """The tensor named ``article_name``, taken from ``tensors`` (a trace, or parameters by
    engine name); ``last`` is the last position's index."""
    where = slot(article_name)
    return where.pick(tensors[where.engine], last)
