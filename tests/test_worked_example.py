"""The worked-example model against the article's printed figures.

Reference: the article's figures (assets/worked-example/published.json, a copy of
shared/worked_example/published.json). The article rounded intermediates to 3 decimals by
hand, so: every figure within 0.01, and at least 90% of the values within 0.002.
The figures are read here from the engine's ordinary trace (run_trace), not from the
solver's own objective."""

import math

import pytest
import torch

from model.checkpoint import load
from model.trace import GRAD, Target, run_trace
from model.worked_example import published

# article figure -> (trace name, head index or None)
ARTICLE_TO_TRACE = {
    "h(1)": ("blocks.0.mlp.hook_pre", None),
    "ffn_out(1)": ("blocks.0.hook_mlp_out", None),
    "X(1)": ("blocks.0.hook_resid_post", None),
    "X(2)": ("blocks.1.hook_resid_post", None),
    "h(2)": ("blocks.1.mlp.hook_pre", None),
    "X_final": ("ln_final.hook_out", None),
    "dL/dX(2)": (GRAD + "blocks.1.hook_resid_post", None),
    "dL/dh_act(2)": (GRAD + "blocks.1.mlp.hook_post", None),
    "dL/dh(2)": (GRAD + "blocks.1.mlp.hook_pre", None),
    "dL/dW_Q(2,1)": (GRAD + "blocks.1.attn.W_Q", 0),
    "dL/dW_K(2,1)": (GRAD + "blocks.1.attn.W_K", 0),
    "dL/dW_V(2,1)": (GRAD + "blocks.1.attn.W_V", 0),
    "dL/dX(1)": (GRAD + "blocks.0.hook_resid_post", None),
    "dL/dX(0)": (GRAD + "blocks.0.hook_resid_pre", None),
}


@pytest.fixture(scope="module")
def article_trace():
    loaded = load("worked-example")
    article = published()
    tokens = loaded.encode("the cat sat on the")
    assert tokens == article["config"]["input_ids"]
    target = Target(loaded.tokenizer.token_id("mat"))
    assert target.token_id == article["config"]["target_id"]
    return loaded, article, run_trace(loaded.model, tokens, backward=True, target=target)


def test_every_printed_figure_is_reproduced(article_trace):
    _, article, trace = article_trace
    assert set(article["published_figures"]) == set(ARTICLE_TO_TRACE)
    differences = []
    for figure, printed in article["published_figures"].items():
        name, head = ARTICLE_TO_TRACE[figure]
        computed = trace[name] if head is None else trace[name][head]
        if isinstance(printed, dict):
            computed, printed = computed[printed["row"]], printed["value"]
        diff = (computed - torch.tensor(printed, dtype=torch.float64)).abs()
        assert diff.max() <= 0.01, (figure, diff.max().item())
        differences.append(diff.reshape(-1))
    differences = torch.cat(differences)
    assert (differences <= 0.002).double().mean() >= 0.90, (differences <= 0.002).double().mean()


def test_loss_is_minus_log_p_mat(article_trace):
    _, _, trace = article_trace
    p_mat = trace["hook_probs"][4, 5].item()
    assert trace.loss == pytest.approx(-math.log(p_mat), abs=1e-12)
    # the gradient at the logits is p - y (softmax cross-entropy)
    expected = trace["hook_probs"][4].clone()
    expected[5] -= 1
    assert torch.allclose(trace[GRAD + "hook_logits"][4], expected, atol=1e-12)


def test_gradients_equal_autograd(article_trace):
    """Reference: torch.autograd.grad on an uncaptured forward pass, float64, 1e-12."""
    loaded, article, trace = article_trace
    model = loaded.model
    ids = torch.tensor([article["config"]["input_ids"]])
    targets = torch.full_like(ids, -1)
    targets[0, -1] = article["config"]["target_id"]
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(model(ids, targets).loss, list(params.values()))
    for name, grad in zip(params, grads):
        assert torch.allclose(trace[GRAD + name], grad, rtol=0, atol=1e-12), name
