"""What a step is made of: steps of panels of grids, and how one cell is computed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from glassbox.model.analysis.arithmetic import Arithmetic  # one cell written out (any model's backward pass too)

if TYPE_CHECKING:
    from glassbox.model.worked_example.training import AfterUpdate


@dataclass
class Grid:
    label: str  # the article's name: "Q(1,1)", "dL/dX(2)"
    name: str  # the engine's: "blocks.0.attn.hook_q[0]", "grad:embed.W_E"
    values: np.ndarray  # 2-D, float64; -inf where the causal mask put it
    rows: list[str]
    cols: list[str]
    row_title: str
    col_title: str
    explain: Callable[[int, int], Arithmetic] | None = None
    printed: np.ndarray | None = None  # the article's figure, NaN where it prints nothing
    provenance: str | None = None  # for weights: printed by the article, reconstructed, trained
    changed: np.ndarray | None = None  # True where this step changed the value it started from
    quantity: bool = True  # False for labels such as token ids: drawn without a colour scale
    probability: bool = False  # attention weights and next-word probabilities: drawn on 0..1

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape


@dataclass
class Panel:
    label: str  # "" for a step with one panel; "head 1", "W_E" where a step has several
    inputs: list[Grid]
    outputs: list[Grid]


@dataclass
class Step:
    key: str  # in the URL: ?step=<key>
    phase: str  # "forward", "backward" or "update"
    stage: str  # the pipeline box it belongs to (see stages)
    title: str
    sentence: str
    formula: str  # LaTeX
    panels: list[Panel]
    after: AfterUpdate | None = None  # the update step: the forward pass again with the new weights


def stages(n_layers: int) -> list[tuple[str, str]]:
    """(stage id, label) of the pipeline diagram, in forward order."""
    out = [("tokens", "tokens"), ("embed", "embedding"), ("pos", "+ positions")]
    for b in range(1, n_layers + 1):
        out += [
            (f"b{b}.ln1", "LayerNorm"),
            (f"b{b}.attn", "attention"),
            (f"b{b}.res1", "+ residual"),
            (f"b{b}.ln2", "LayerNorm"),
            (f"b{b}.ffn", "MLP"),
            (f"b{b}.res2", "+ residual"),
        ]
    return out + [
        ("ln_f", "final LayerNorm"),
        ("logits", "logits"),
        ("softmax", "softmax"),
        ("loss", "loss"),
        ("update", "update"),
    ]
