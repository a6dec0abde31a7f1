"""The explorer's per-cell backward arithmetic (model/analysis/gradient_cells.py) on every kind of
model the engine runs: every cell of every gradient tensor of the backward steps, recomputed
from the operands it writes out, must equal autograd's value. Reference: torch.autograd via
run_trace on float64 models; tolerance 1e-10 relative to the tensor's largest entry."""

import math

import numpy as np
import pytest
import torch

from glassbox.model.analysis import backward_steps
from glassbox.model.analysis.gradient_cells import GradientCells
from glassbox.model.engine import GRAD, ModelConfig, Target, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import build_random_model
from tests.test_analysis import CONFIGS

NEOX_LIKE = ModelConfig(
    vocab_size=30,
    n_ctx=16,
    d_model=16,
    n_layers=2,
    n_heads=2,
    d_ff=32,
    activation="gelu",
    positional="rope",
    rotary_dim=4,
    parallel_block=True,
    tie_embeddings=False,
)
MODELS = {**CONFIGS, "neox-like": NEOX_LIKE}


def traced(name: str):
    if name == "worked-example":
        model, tokens = load("worked-example").model, [0, 1, 2, 3, 0]
        return model, run_trace(model, tokens, backward=True, target=Target(5))
    model = build_random_model(MODELS[name])
    tokens = torch.randint(0, model.cfg.vocab_size, (7,), generator=torch.Generator().manual_seed(3)).tolist()
    return model, run_trace(model, tokens, backward=True)


@pytest.mark.parametrize("name", ["worked-example", *MODELS])
def test_every_cell_of_every_backward_step_is_written_out_and_recomputes_autograds_value(name):
    model, trace = traced(name)
    cells = GradientCells(model, trace)
    shown = {n for step in backward_steps(model) for n in step.names if n in trace.grads}
    # and every other activation's gradient, but the norms' statistics (their share is in the
    # closed form through the norm) and the loss's own tensors
    inside = ("hook_mean", "hook_scale", "hook_log_probs", "hook_loss")
    parameters = {GRAD + n for n, _ in model.named_parameters()}
    everything = {n for n in trace.grads if n not in parameters and not n.endswith(inside)}
    assert shown <= everything
    shown = everything
    checked = 0
    for grad_name in sorted(shown):
        expected = trace[grad_name].to(torch.float64).cpu().numpy()
        largest = float(np.abs(expected).max()) or 1.0
        for index in np.ndindex(expected.shape):
            arithmetic = cells.explain(grad_name, index)
            assert arithmetic is not None, (grad_name, index)  # every tensor the steps show has its arithmetic
            assert arithmetic.lines and all(isinstance(line, str) for line in arithmetic.lines)
            assert math.isclose(arithmetic.value, expected[index], rel_tol=0, abs_tol=1e-10 * largest), (
                grad_name,
                index,
                arithmetic.value,
                expected[index],
            )
            checked += 1
    assert checked > 500


def test_a_long_sum_shows_its_largest_terms_and_the_rest_as_one_number():
    """The head's input gradient sums over the whole vocabulary: six products are written, the
    others as one number, and the value is still the whole sum."""
    model, trace = traced("relu-untied")
    arithmetic = GradientCells(model, trace).explain(GRAD + "ln_final.hook_out", (2, 3))
    text = " ".join(arithmetic.lines)
    assert text.count(r"\times") == 6 and "the other 24 terms" in text
