"""The worked example as steps a reader can follow: one forward pass in the article's order,
the backward pass in reverse, and the weight update.

Every grid is a tensor of one engine trace (``run_trace`` with the gradient of -log p(target)),
under the article's name. Each output grid can explain any of its cells: the arithmetic that
produces it, written out with the actual operands, and recomputed from them in plain Python,
so a test can check every explanation against the engine's value.
"""

from __future__ import annotations

from collections.abc import Callable

from glassbox.model.engine import Transformer
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.worked_example.steps.backward import backward_steps
from glassbox.model.worked_example.steps.builder import Builder
from glassbox.model.worked_example.steps.explain import one_row_subscripts, with_subscripts
from glassbox.model.worked_example.steps.forward import forward_steps
from glassbox.model.worked_example.steps.grids import Arithmetic, Grid, Panel, Step, stages
from glassbox.model.worked_example.steps.update import update_step
from glassbox.model.worked_example.training import after_one_update

__all__ = ["Arithmetic", "Grid", "Panel", "Step", "stages", "worked_example_steps"]


def worked_example_steps(model: Transformer, tokenizer: Tokenizer, article: dict, provenance: Callable[[str], str]) -> list[Step]:
    """Every step of the article's forward pass, backward pass and update, for ``model``'s
    weights. ``provenance(weight label)`` says where a weight comes from ("printed by the
    article", "reconstructed", "trained"); with "trained" weights the article's figures are
    not shown beside the computed ones."""
    s = Builder(model, tokenizer, article, provenance)
    after = after_one_update(model, tokenizer, s.tokens, s.target, s.lr)
    steps = forward_steps(s) + backward_steps(s) + [update_step(s, after)]
    for step in steps:
        for panel in step.panels:
            written = one_row_subscripts(panel.inputs + panel.outputs)
            for grid in panel.outputs:
                if written and grid.explain is not None:
                    grid.explain = with_subscripts(grid.explain, written)
    return steps
