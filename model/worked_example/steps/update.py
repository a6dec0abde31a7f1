"""The last step: every weight moves against its gradient (one step of gradient descent)."""

from __future__ import annotations

from glassbox.model.worked_example.steps.builder import Builder
from glassbox.model.worked_example.steps.explain import update_explainer
from glassbox.model.worked_example.steps.grids import Grid, Panel, Step
from glassbox.model.worked_example.training import AfterUpdate


def update_step(s: Builder, after: AfterUpdate) -> Step:
    return Step(
        "update",
        "update",
        "update",
        f"Update: one gradient-descent step, η = {s.lr:g}",
        f"Every weight moves against its gradient, scaled by the learning rate η = {s.lr:g}: a small step "
        "downhill on the loss. Only entries with a gradient of exactly 0 stay put. Choose a weight to see it "
        "before, its gradient, and after. LayerNorm's γ and β stay 1 and 0, as in the article.",
        r"W_{\text{new}} = W - \eta\,\partial L/\partial W",
        [_weight_panel(s, label) for label in s.weight_labels],
        after,
    )


def _weight_panel(s: Builder, label: str) -> Panel:
    """The weight, its gradient, and the weight after the step."""
    base = s.tensor(label)
    w, grad = base.values, s.value(f"dL/d{label}")
    new = w - s.lr * grad
    axes = (base.rows, base.cols, base.row_title, base.col_title)
    gradient = Grid(f"dL/d{label}", "grad:" + base.name, grad, *axes)
    explain = update_explainer(f"{label}_new", w, label, grad, f"dL/d{label}", s.lr)
    after = Grid(f"{label}_new", base.name + " after the step", new, *axes, explain=explain, changed=new != w)
    return Panel(label, [base, gradient], [after])
