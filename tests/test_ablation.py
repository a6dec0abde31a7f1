"""Ablation (model/analysis/ablation.py). Reference: a copy of the model whose weights are edited
to the same effect, run plainly (float64, ≤1e-12): zeroing head h is W_O[h] = 0; zeroing neuron n
is W_out[n] = 0; mean-ablating neuron n is W_out[n] = 0 with b_out += mean(post[:, n]) · W_out[n],
the mean taken from run_trace."""

import copy

import numpy as np
import pytest
import torch

from glassbox.model.analysis.ablation import ablate
from glassbox.model.engine import GlassboxError, ModelConfig, run_trace
from tests.helpers import build_random_model

CFG = ModelConfig(vocab_size=24, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32)
TOKENS = [3, 1, 4, 1, 5, 9]


@pytest.fixture(scope="module")
def model():
    return build_random_model(CFG)


def probs(model):
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0, -1].softmax(-1).numpy()


def edited(model, change):
    copied = copy.deepcopy(model)
    with torch.no_grad():
        change(copied)
    return probs(copied)


def test_zeroing_a_head_is_zeroing_its_part_of_W_O(model):
    result = ablate(model, TOKENS, 1, head=1)
    np.testing.assert_allclose(result.after, edited(model, lambda m: m.blocks[1].attn.W_O[1].zero_()), atol=1e-12)
    np.testing.assert_allclose(result.before, probs(model), atol=1e-12)
    assert result.kl > 0 and result.name == "blocks.1.attn.hook_z[1]"


def test_zeroing_a_neuron_is_zeroing_its_row_of_W_out(model):
    result = ablate(model, TOKENS, 0, neuron=7)
    np.testing.assert_allclose(result.after, edited(model, lambda m: m.blocks[0].mlp.W_out[7].zero_()), atol=1e-12)


def test_mean_ablating_a_neuron_moves_its_mean_into_the_bias(model):
    mean = run_trace(model, TOKENS, names=["blocks.0.mlp.hook_post"])["blocks.0.mlp.hook_post"][:, 7].mean()

    def change(m):
        m.blocks[0].mlp.b_out += mean * m.blocks[0].mlp.W_out[7]
        m.blocks[0].mlp.W_out[7].zero_()

    result = ablate(model, TOKENS, 0, neuron=7, mode="mean")
    np.testing.assert_allclose(result.after, edited(model, change), atol=1e-12)


def test_mean_ablating_a_head_keeps_its_average_output(model):
    """Mean ablation of head h: z[:, h] replaced by its mean over positions, so the head's output
    (z · W_O[h]) becomes its mean over positions, checked by recomputing the output by hand."""
    trace = run_trace(model, TOKENS, names=["blocks.1.attn.hook_z"])
    mean_z = trace["blocks.1.attn.hook_z"][0].mean(0)

    def change(m):  # the head's constant output moves into b_O; its own weights to 0
        m.blocks[1].attn.b_O += mean_z @ m.blocks[1].attn.W_O[0]
        m.blocks[1].attn.W_O[0].zero_()

    np.testing.assert_allclose(ablate(model, TOKENS, 1, head=0, mode="mean").after, edited(model, change), atol=1e-12)


def test_the_shared_model_is_untouched_and_bad_input_says_why(model):
    before = {n: p.clone() for n, p in model.state_dict().items()}
    ablate(model, TOKENS, 1, head=0, mode="mean")
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())
    for kwargs, message in [
        ({"layer": 5, "head": 0}, "does not exist"),
        ({"layer": 0}, "one head or one neuron"),
        ({"layer": 0, "head": 0, "mode": "half"}, "Unknown ablation"),
    ]:
        with pytest.raises(GlassboxError, match=message):
            ablate(model, TOKENS, **kwargs)


def test_mean_over_a_reference_prompt(model):
    """The neuron's mean over another prompt's positions, moved into b_out (reference: run_trace
    of that prompt)."""
    reference = [2, 2, 8, 0]
    mean = run_trace(model, reference, names=["blocks.1.mlp.hook_post"])["blocks.1.mlp.hook_post"][:, 3].mean()

    def change(m):
        m.blocks[1].mlp.b_out += mean * m.blocks[1].mlp.W_out[3]
        m.blocks[1].mlp.W_out[3].zero_()

    result = ablate(model, TOKENS, 1, neuron=3, mode="mean", reference=reference)
    np.testing.assert_allclose(result.after, edited(model, change), atol=1e-12)
    assert result.mode == "reference mean"
