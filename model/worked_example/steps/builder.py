"""One trace of the worked example as grids under the article's names (names.py says where
each name lives in the engine, and its axes)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from glassbox.model.engine import Target, Transformer, head_label, run_trace
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.worked_example.article import printed_figure
from glassbox.model.worked_example.names import Slot, block_input, slot, weight_names
from glassbox.model.worked_example.steps.explain import (
    Explainer,
    add_explainer,
    layernorm_backward_explainer,
    layernorm_explainer,
    matmul_explainer,
    softmax_explainer,
)
from glassbox.model.worked_example.steps.grids import Grid, Panel


def to_numpy(t) -> np.ndarray:
    return t.detach().cpu().double().numpy()


PROBABILITIES = ("A(", "probs")  # article names of probability grids (not their gradients: "dL/dA(…")


class Builder:
    """Grids of one traced forward and backward pass (the gradient of -log p(target))."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, article: dict, provenance: Callable[[str], str]):
        c = article["config"]
        self.cfg = model.cfg
        self.tokens, self.target, self.lr = c["input_ids"], c["target_id"], c["learning_rate"]
        self.trace = run_trace(model, self.tokens, backward=True, target=Target(self.target))
        self.article, self.provenance = article, provenance
        self.compare = provenance("W_E") != "trained"
        self.vocab = tokenizer.pieces
        self.positions = [f"{i} {self.vocab[t]}" for i, t in enumerate(self.tokens)]
        self.last = len(self.tokens) - 1
        self.params = dict(model.named_parameters())
        self.weight_labels = weight_names(self.cfg.n_layers, self.cfg.n_heads)
        self._values: dict[Slot, np.ndarray] = {}

    def axes(self, kind: str) -> tuple[list[str], str]:
        cfg = self.cfg
        return {
            "pos": (self.positions, "position and token"),
            "key": (self.positions, "key position (attended to)"),
            "model": ([f"d{i}" for i in range(cfg.d_model)], "model dimension"),
            "head": ([f"d{i}" for i in range(cfg.d_head)], "head dimension"),
            "concat": ([f"h{h + 1}·d{i}" for h in range(cfg.n_heads) for i in range(cfg.d_head)], "head · head dimension"),
            "ffn": ([f"n{i}" for i in range(cfg.d_ff)], "MLP neuron"),
            "vocab": (self.vocab, "vocabulary token"),
            "table": ([f"p{i}" for i in range(cfg.n_ctx)], "position"),
            "one": (["—"], ""),
            "last": ([self.positions[self.last]], "last position"),
            "stat": (["value"], ""),
        }[kind]

    # ---- values under article names --------------------------------------------------------

    def value(self, label: str) -> np.ndarray:
        """The 2-D values of an article name; a label ending in ᵀ gives the transpose."""
        if label.endswith("ᵀ"):
            return self.value(label[:-1]).T
        return self._slot_values(slot(label))

    def _slot_values(self, where: Slot) -> np.ndarray:
        if where not in self._values:
            engine = self.params[where.engine] if where.engine in self.params else self.trace[where.engine]
            values = to_numpy(where.pick(engine, self.last))
            if values.ndim < 2:  # a bias, a last row, σ per position or the loss
                values = values.reshape(len(self.axes(where.rows)[0]), len(self.axes(where.cols)[0]))
            self._values[where] = values
        return self._values[where]

    # ---- grids -------------------------------------------------------------------------------

    def grid(
        self,
        label: str,
        name: str,
        values,
        rows: str,
        cols: str,
        explain: Explainer | None = None,
        before: str | np.ndarray | None = None,
        quantity: bool = True,
    ) -> Grid:
        """A grid of any values; ``before`` (values or an article name) marks what changed."""
        values = np.atleast_2d(np.asarray(values, dtype=np.float64))
        row_labels, row_title = self.axes(rows)
        col_labels, col_title = self.axes(cols)
        assert values.shape == (len(row_labels), len(col_labels)), (label, values.shape)
        grid = Grid(
            label,
            name,
            values,
            row_labels,
            col_labels,
            row_title,
            col_title,
            explain,
            quantity=quantity,
            probability=label.startswith(PROBABILITIES),
        )
        if label in self.weight_labels:
            grid.provenance = self.provenance(label)
        if self.compare:
            grid.printed = self._printed(label, values.shape)
        if before is not None:
            before = self.value(before) if isinstance(before, str) else before
            grid.changed = values != np.atleast_2d(before)
        return grid

    def tensor(self, label: str, explain: Explainer | None = None, before: str | None = None) -> Grid:
        """The grid of an article name: engine name, values and axes from names.py."""
        return self._slot_grid(label, slot(label), explain, before)

    def block_input(self, b: int, gradient: bool = False) -> Grid:
        """X(b-1) (or its gradient) as block b reads it, named by the block's hook_resid_pre."""
        return self._slot_grid(*block_input(b, gradient))

    def normalized(self, label: str) -> Grid:
        """x̂, inside the LayerNorm whose output is ``label``, shown under that label."""
        return self._slot_grid(label, slot("x̂ " + label))

    def _slot_grid(self, label: str, where: Slot, explain: Explainer | None = None, before: str | None = None) -> Grid:
        return self.grid(label, where.grid_name(self.last), self._slot_values(where), where.rows, where.cols, explain, before)

    def per_head(self, b: int, make: Callable[[str], tuple[list[Grid], list[Grid]]]) -> list[Panel]:
        """One panel per head of block b; ``make("(b,h)")`` gives its inputs and outputs."""
        return [Panel(head_label(h - 1), *make(f"({b},{h})")) for h in range(1, self.cfg.n_heads + 1)]

    def _printed(self, label: str, shape) -> np.ndarray | None:
        value = self.article["given_weights"].get(label, self.article["published_figures"].get(label))
        if value is None:
            return None
        row, printed = printed_figure(value)
        grid = np.full(shape, np.nan)
        if row is None:
            grid[:] = printed.numpy().reshape(shape)
        else:
            grid[row] = printed.numpy()
        return grid

    # ---- explained grids and explainers, over article names --------------------------------

    def product(self, out: str, a: str, b: str, bias: str | None = None, scale: float | None = None) -> Grid:
        """The grid of out = (a @ b + bias) / scale, explained cell by cell."""
        bias_values = None if bias is None else self.value(bias)[0]
        return self.tensor(out, matmul_explainer(out, self.value(a), a, self.value(b), b, bias_values, bias, scale))

    def product_panel(self, out: str, a: str, b: str, bias: str | None = None) -> list[Panel]:
        """A step's one panel: a, b (and bias) in, out = a @ b (+ bias)."""
        inputs = [self.tensor(label.removesuffix("ᵀ")) for label in (a, b, bias) if label is not None]
        return [Panel("", inputs, [self.product(out, a, b, bias)])]

    def add(self, out: str, a: str, b: str) -> Explainer:
        return add_explainer(out, self.value(a), a, self.value(b), b)

    def layernorm(self, out: str, x: str) -> Explainer:
        return layernorm_explainer(out, self.value(x), x, self.cfg.norm_eps)

    def layernorm_backward(self, out: str, g: str, normed: str, scale: str) -> Explainer:
        """Back through the LayerNorm whose output is ``normed``; ``scale`` names its σ."""
        xhat = self._slot_values(slot("x̂ " + normed))
        return layernorm_backward_explainer(out, self.value(g), g, xhat, normed, self.value(scale)[:, 0])

    def softmax(self, out: str, x: str) -> Explainer:
        return softmax_explainer(out, self.value(x), x)
