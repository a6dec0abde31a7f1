"""The worked-example model against the article's printed figures.

Reference: the article's figures (assets/worked-example/published.json, a copy of
shared/worked_example/published.json). The article rounded intermediates to 3 decimals by
hand, so: every figure within 0.01, and at least 90% of the values within 0.002.
The figures are read here from the engine's ordinary trace (run_trace), not from the
solver's own objective."""

import math

import pytest
import torch

from glassbox.model.engine import GRAD, Target, run_trace
from glassbox.model.io.checkpoint import load
from glassbox.model.worked_example.article import published

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
        diff = (computed.cpu() - torch.tensor(printed, dtype=torch.float64)).abs()
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
    ids = torch.tensor([article["config"]["input_ids"]], device=model.device)
    targets = torch.full_like(ids, -1)
    targets[0, -1] = article["config"]["target_id"]
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(model(ids, targets).loss, list(params.values()))
    for name, grad in zip(params, grads):
        assert torch.allclose(trace[GRAD + name], grad, rtol=0, atol=1e-12), name


def test_json_contract(tmp_path):
    """`python -m model worked-example --json`: every key of the contract in
    shared/worked_example/README.md; the article prints the loss as 1.768."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run(
        [sys.executable, "-m", "glassbox", "worked-example", "--json"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    weights = (
        ["W_E", "W_P"]
        + [f"W_{k}({b},{h})" for b in (1, 2) for h in (1, 2) for k in "QKV"]
        + [f"{k}({b})" for b in (1, 2) for k in ("W_O", "W_1", "b_1", "W_2", "b_2")]
    )
    forward = (
        ["X(0)", "X_LN(0)", "X_LN(1)", "X_final", "logits", "probs", "loss"]
        + [f"{k}({b},{h})" for b in (1, 2) for h in (1, 2) for k in ("Q", "K", "V", "scores", "A", "out")]
        + [f"{k}({b})" for b in (1, 2) for k in ("concat", "attn_out", "X_mid", "X_mid_LN", "h", "h_act", "ffn_out", "X")]
    )
    backward = (
        ["dL/dlogits", "dL/dh_final", "dL/dX(0)", "dL/dX(1)", "dL/dX(2)", "dL/dW_E_input", "dL/dW_E_output"]
        + [f"dL/d{k}({b})" for b in (1, 2) for k in ("h", "h_act")]
        + [f"dL/d{w}" for w in weights]
    )
    update = [f"{w}_new" for w in weights]
    missing = [k for k in weights + forward + backward + update if k not in data]
    assert not missing, missing
    assert round(data["loss"], 3) == 1.768
    for w in weights:
        assert torch.allclose(
            torch.tensor(data[f"{w}_new"]), torch.tensor(data[w]) - 0.5 * torch.tensor(data[f"dL/d{w}"]), atol=1e-12
        ), w
    given = published()["given_weights"]
    for w, value in given.items():
        assert torch.equal(torch.tensor(data[w], dtype=torch.float64), torch.tensor(value, dtype=torch.float64)), w
    assert torch.tensor(data["concat(1)"]).shape == (5, 4) and torch.tensor(data["probs"]).shape == (8,)


def test_tied_embedding_gradient_parts(article_trace):
    """Reference: autograd with W_E detached in one of its two uses (float64, 1e-12)."""
    from glassbox.model.worked_example.contract import article_json

    loaded, article, _ = article_trace
    data = article_json(loaded)
    model = loaded.model
    ids = torch.tensor([article["config"]["input_ids"]], device=model.device)
    W_E = model.embed.W_E

    def loss_with(embed_in, embed_out):
        x = embed_in[ids] + model.pos_embed.W_pos[:5]
        for block in model.blocks:
            x = block(x)
        logits = model.ln_final(x)[0, -1] @ embed_out.T
        return -logits.log_softmax(-1)[article["config"]["target_id"]]

    (input_part,) = torch.autograd.grad(loss_with(W_E, W_E.detach()), W_E)
    (output_part,) = torch.autograd.grad(loss_with(W_E.detach(), W_E), W_E)
    assert torch.allclose(torch.tensor(data["dL/dW_E_input"], dtype=torch.float64), input_part.cpu(), atol=1e-12)
    assert torch.allclose(torch.tensor(data["dL/dW_E_output"], dtype=torch.float64), output_part.cpu(), atol=1e-12)
    # "the" appears twice: its input gradient is the sum over both positions
    assert input_part[0].abs().sum() > 0 and input_part[5].abs().sum() == 0
