"""Attribution per input token (model/analysis/attribution.py), f = the target's logit at the
last position. References: central finite differences of f along each token's embedding
(float64, ≤1e-7), computed here through an edit of hook_embed; the completeness of integrated
gradients, f(e) − f(baseline) from two plain forward passes, met within an error that falls
as the steps grow; attention rollout recomputed here from run_trace's patterns with numpy."""

import numpy as np
import pytest
import torch

from glassbox.model.analysis.attribution import METHODS, attribute
from glassbox.model.engine import GlassboxError, ModelConfig, editing, run_trace
from tests.helpers import build_random_model

CFG = ModelConfig(vocab_size=24, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32)
TOKENS, TARGET = [3, 1, 4, 1, 5, 9], 7


@pytest.fixture(scope="module")
def model():
    return build_random_model(CFG)


def f_at(model, embeddings):
    with torch.no_grad(), editing({"hook_embed": lambda _: embeddings[None]}):
        return float(model(torch.tensor([TOKENS])).logits[0, -1, TARGET])


def embedded(model):
    return run_trace(model, TOKENS, names=["hook_embed"])["hook_embed"]


def test_input_x_gradient_and_saliency_against_finite_differences(model):
    e, h = embedded(model), 1e-6
    ixg = attribute(model, TOKENS, TARGET, "input_x_gradient").scores
    sal = attribute(model, TOKENS, TARGET, "saliency").scores
    for i in range(len(TOKENS)):
        along = torch.zeros_like(e)
        along[i] = e[i]
        assert ixg[i] == pytest.approx((f_at(model, e + h * along) - f_at(model, e - h * along)) / (2 * h), abs=1e-7)
        gradient = []
        for d in range(CFG.d_model):
            step = torch.zeros_like(e)
            step[i, d] = h
            gradient.append((f_at(model, e + step) - f_at(model, e - step)) / (2 * h))
        assert sal[i] == pytest.approx(np.linalg.norm(gradient), abs=1e-7)


@pytest.mark.parametrize("baseline_token", [None, 0])
def test_integrated_gradients_meet_completeness_ever_closer(model, baseline_token):
    e = embedded(model)
    baseline = torch.zeros_like(e) if baseline_token is None else model.embed.W_E.detach()[[baseline_token] * len(TOKENS)]
    difference = f_at(model, e) - f_at(model, baseline)
    errors = []
    for steps in (2, 8, 32, 128):
        result = attribute(model, TOKENS, TARGET, "integrated_gradients", steps=steps, baseline_token=baseline_token)
        assert result.target_logit - result.baseline_logit == pytest.approx(difference, abs=1e-10)
        assert result.completeness_error == pytest.approx(abs(result.scores.sum() - difference), abs=1e-12)
        errors.append(result.completeness_error)
    assert errors[-1] < errors[0] and errors[-1] <= 1e-3 * abs(difference)
    assert all(later <= earlier * 1.01 for earlier, later in zip(errors[1:], errors[2:]))


def test_attention_rollout_by_hand(model):
    trace = run_trace(model, TOKENS, names=["blocks.*.attn.hook_pattern"])
    rollout = np.eye(len(TOKENS))
    for i in range(CFG.n_layers):
        a = 0.5 * trace[f"blocks.{i}.attn.hook_pattern"].numpy().mean(0) + 0.5 * np.eye(len(TOKENS))
        rollout = (a / a.sum(1, keepdims=True)) @ rollout
    scores = attribute(model, TOKENS, TARGET, "attention_rollout").scores
    np.testing.assert_allclose(scores, rollout[-1], atol=1e-12)
    assert scores.sum() == pytest.approx(1.0)


def test_no_parameter_gets_a_gradient(model):
    for method in METHODS:
        attribute(model, TOKENS, TARGET, method, steps=4)
    assert all(p.grad is None for p in model.parameters())


def test_bad_input_says_why(model):
    with pytest.raises(GlassboxError, match="Unknown method"):
        attribute(model, TOKENS, TARGET, "guess")
    with pytest.raises(GlassboxError, match="outside the vocabulary"):
        attribute(model, TOKENS, 99)
    with pytest.raises(GlassboxError, match="at least 1 step"):
        attribute(model, TOKENS, TARGET, "integrated_gradients", steps=0)


def test_integrated_gradients_token_by_token_against_a_riemann_sum_of_finite_differences(model):
    """Each token's score, not only their total: (e_i − 0) · the mean over the 4 midpoints of the
    gradient with respect to e_i, the gradient taken by central finite differences (≤1e-6)."""
    e, h, steps = embedded(model), 1e-6, 4
    expected = np.zeros(len(TOKENS))
    for k in range(steps):
        point = e * (k + 0.5) / steps
        for i in range(len(TOKENS)):
            for d in range(CFG.d_model):
                step = torch.zeros_like(e)
                step[i, d] = h
                slope = (f_at(model, point + step) - f_at(model, point - step)) / (2 * h)
                expected[i] += float(e[i, d]) * slope / steps
    result = attribute(model, TOKENS, TARGET, "integrated_gradients", steps=steps)
    np.testing.assert_allclose(result.scores, expected, atol=1e-6)
