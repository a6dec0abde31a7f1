"""A model without norms (norm "none", the grokking paper's one-layer model): no ln1, ln2 or
ln_final, no norm parameters or hooks; each sublayer reads the residual stream itself.

References: a plain torch forward pass written here from the math (float64, tolerance 1e-10),
its gradients by torch.autograd.grad against the trace's (float64, 1e-10), the registry's names
against what the trace and the model hold, and every explorer view opening on such a model."""

import math

import pytest
import torch
import torch.nn.functional as F

from glassbox.model.analysis.architecture import NO_NORMS
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, Transformer, names, run_trace
from glassbox.model.io.checkpoint import save
from glassbox.model.io.tokenizer import Tokenizer
from tests.helpers import charts, shown, start

TOKENS = [3, 1, 4, 1, 5, 9, 2]
CONFIGS = {
    # the paper's shape, smaller: one block, ReLU, no attention biases, untied head
    "grokking-like": ModelConfig(
        vocab_size=12,
        n_ctx=8,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
        norm="none",
        final_norm=False,
        activation="relu",
        attn_bias=False,
        tie_embeddings=False,
    ),
    # two blocks, biases, tied head, tanh-GELU
    "two blocks with biases": ModelConfig(
        vocab_size=12, n_ctx=8, d_model=12, n_layers=2, n_heads=3, d_ff=24, norm="none", final_norm=False
    ),
}


def model_of(cfg: ModelConfig) -> Transformer:
    model = Transformer(cfg).init_weights(seed=1, std=0.3).in_precision(torch.float64)
    with torch.no_grad():  # biases set too (init_weights zeroes them), so that they are tested
        gen = torch.Generator().manual_seed(2)
        for name, param in model.named_parameters():
            if name.split(".")[-1].startswith("b"):
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64) * 0.1)
    return model


def plain_forward(p: dict, cfg: ModelConfig, tokens: torch.Tensor) -> torch.Tensor:
    """The logits (positions, vocab) from the parameters ``p``, written from the math:
    x = W_E[t] + W_pos; per block mid = x + attn(x), out = mid + mlp(mid); logits = x W_U."""
    T = len(tokens)
    x = p["embed.W_E"][tokens] + p["pos_embed.W_pos"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    act = {"relu": F.relu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}[cfg.activation]
    for i in range(cfg.n_layers):
        b = f"blocks.{i}."
        out = torch.zeros_like(x)
        for h in range(cfg.n_heads):
            q, k, v = (x @ p[b + f"attn.W_{m}"][h] for m in "QKV")
            if cfg.attn_bias:
                q, k, v = q + p[b + "attn.b_Q"][h], k + p[b + "attn.b_K"][h], v + p[b + "attn.b_V"][h]
            scores = (q @ k.T / math.sqrt(cfg.d_head)).masked_fill(~mask, float("-inf"))
            out = out + scores.softmax(-1) @ v @ p[b + "attn.W_O"][h]
        x = x + out + (p[b + "attn.b_O"] if cfg.attn_out_bias else 0)
        pre = x @ p[b + "mlp.W_in"] + p[b + "mlp.b_in"]
        x = x + act(pre) @ p[b + "mlp.W_out"] + p[b + "mlp.b_out"]
    W_U = p["embed.W_E"].T if cfg.tie_embeddings else p["unembed.W_U"]
    return x @ W_U


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_forward_equals_the_plain_torch_computation(cfg):
    model = model_of(cfg)
    params = dict(model.named_parameters())
    tokens = torch.tensor(TOKENS)
    with torch.no_grad():
        ours = model(tokens[None]).logits[0]
        expected = plain_forward(params, cfg, tokens)
    assert torch.allclose(ours, expected, rtol=0, atol=1e-10)  # float64: the same arithmetic, summed in another order


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_trace_holds_every_registered_name_and_no_norm(cfg):
    model = model_of(cfg)
    trace = run_trace(model, TOKENS, backward=True)
    listed = names.activation_names(cfg)
    assert [n for n in trace if not n.startswith(GRAD)] == listed  # exactly the registry's names, in its order
    assert not [n for n in listed if ".ln" in n or n.startswith("ln_")]
    assert [n for n, _ in model.named_parameters()] == names.parameter_names(cfg)
    assert not [n for n, _ in model.named_parameters() if names.is_norm_parameter(n)]
    assert not [n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1].startswith("ln")]
    for name in listed:  # the registry's shapes
        assert tuple(trace[name].shape) == names.shape(name, cfg, len(TOKENS)), name


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_gradients_equal_autograd_of_the_plain_computation(cfg):
    """Reference: torch.autograd.grad of plain_forward's mean next-token cross-entropy, on copies of
    the weights (float64, tolerance 1e-10)."""
    model = model_of(cfg)
    trace = run_trace(model, TOKENS, backward=True)
    copies = {n: p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()}
    tokens = torch.tensor(TOKENS)
    loss = F.cross_entropy(plain_forward(copies, cfg, tokens)[:-1], tokens[1:])
    grads = torch.autograd.grad(loss, list(copies.values()))
    assert trace.loss == pytest.approx(loss.item(), abs=1e-10)
    for name, grad in zip(copies, grads):
        assert torch.allclose(trace[GRAD + name], grad, rtol=0, atol=1e-10), name


def test_config_refuses_other_norms_without_norms():
    base = dict(vocab_size=12, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_ff=16, norm="none")
    with pytest.raises(GlassboxError, match="final_norm"):
        ModelConfig(**base)  # final_norm defaults to true
    with pytest.raises(GlassboxError, match="qk_norm"):
        ModelConfig(**base, final_norm=False, qk_norm=True)
    with pytest.raises(GlassboxError, match="pre-norm"):
        ModelConfig(**base, final_norm=False, norm_position="post")


def test_every_explorer_view_opens_on_a_model_without_norms(tmp_path):
    from glassbox.app.explore import VIEWS

    words = ["="] + [str(i) for i in range(11)]
    model = model_of(CONFIGS["grokking-like"]).in_precision(torch.float32)
    save(tmp_path / "no-norm", model, Tokenizer.from_words(words), "float32", {"source": "a test"})
    for view in VIEWS:
        at = start("screens/explore.py", model=str(tmp_path / "no-norm"), prompt="3 4 =", view=view)
        assert not at.exception and not at.error, (view, at.exception, at.error)
        assert all(chart["data"] for chart in charts(at)), view  # no empty chart
        if view == "LayerNorm":  # nothing to show but the sentence saying so
            assert [shown(i.value) for i in at.info] == [NO_NORMS]


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS)
def test_the_backward_steps_and_parts_name_no_norm(cfg):
    """The Backward view's steps and the parts list speak of no norm where there is none, and the
    parts still count every parameter (their sum against the model's own count)."""
    from glassbox.model.analysis.backward import backward_steps
    from glassbox.model.analysis.parts import parts

    model = model_of(cfg)
    titles = [step.title for step in backward_steps(model)]
    assert not [t for t in titles if "none" in t or "norm" in t], titles
    assert sum("residual split" in t for t in titles) == cfg.n_layers * 2
    listed = parts(model)
    assert not [p.label for p in listed if "norm" in p.label or "none" in p.label]
    assert sum(p.count for p in listed) == sum(p.numel() for p in model.parameters())
