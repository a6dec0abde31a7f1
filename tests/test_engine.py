"""The engine against torch autograd and against the algebra it claims to compute.

Reference: an uncaptured forward pass of the same model followed by torch.autograd.grad,
float64, tolerance 1e-12 (both sides do the same arithmetic up to summation order).
"""

import math

import pytest
import torch

from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, Target, Transformer, next_token_targets, run_trace
from glassbox.model.engine.capture import Recorder, capture
from glassbox.model.io.checkpoint import load

TOKENS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]

CONFIGS = {
    "gpt2-like": ModelConfig(vocab_size=20, n_ctx=16, d_model=12, n_layers=2, n_heads=3, d_ff=24),
    "llama-like (RMSNorm, SwiGLU, RoPE, GQA, untied)": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=16,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=24,
        norm="rmsnorm",
        activation="silu",
        gated_mlp=True,
        positional="rope",
        attn_bias=False,
        mlp_bias=False,
        tie_embeddings=False,
    ),
    "multi-query, relu, no final norm": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=8,
        n_layers=3,
        n_heads=4,
        n_kv_heads=1,
        d_ff=16,
        activation="relu",
        final_norm=False,
    ),
    "mixture of experts (gated shared expert, a dense block, full-width QK-norm, clipped q/k/v)": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=16,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=24,
        norm="rmsnorm",
        activation="silu",
        gated_mlp=True,
        positional="rope",
        mlp_bias=False,
        qk_norm=True,
        qk_norm_width="full",
        clip_qkv=0.8,
        n_experts=4,
        norm_top_k=False,
        d_ff_expert=12,
        d_ff_shared=10,
        shared_expert_gate=True,
        moe_layers=[1],
    ),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request, random_model):
    return random_model(CONFIGS[request.param])


def reference_grads(model, tokens, targets, tensors):
    """dL/d(parameters) from a plain, uncaptured forward pass."""
    ids = torch.tensor([tokens])
    out = model(ids, targets)
    return out.loss, dict(zip([n for n, _ in tensors], torch.autograd.grad(out.loss, [p for _, p in tensors])))


@pytest.mark.parametrize("target", [None, Target(7, 4), Target(2, -1)])
def test_parameter_gradients_equal_autograd(model, target):
    trace = run_trace(model, TOKENS, backward=True, target=target)
    ids = torch.tensor([TOKENS])
    if target is None:
        targets = next_token_targets(ids)
    else:
        targets = torch.full_like(ids, -1)
        targets[0, target.position] = target.token_id
    params = list(model.named_parameters())
    loss, expected = reference_grads(model, TOKENS, targets, params)
    assert trace.loss == pytest.approx(loss.item(), abs=1e-12)
    for name, grad in expected.items():
        assert torch.allclose(trace[GRAD + name], grad, rtol=0, atol=1e-12), name


def test_activation_gradients_equal_autograd(model):
    """Perturbation reference: the gradient w.r.t. a residual equals the derivative of the
    loss when that residual is shifted, d/dε L(resid + ε·u) = <grad, u> (central
    difference in float64, tolerance 1e-7)."""
    trace = run_trace(model, TOKENS, backward=True)
    name = "blocks.1.hook_resid_pre"
    grad = trace[GRAD + name]
    u = torch.randn(grad.shape, generator=torch.Generator().manual_seed(3), dtype=grad.dtype)
    ids = torch.tensor([TOKENS])

    def loss_with_shift(eps):
        # re-run block 1 onwards on the captured block-0 output, shifted along u
        x = trace[name][None] + eps * u
        for b in model.blocks[1:]:
            x = b(x)
        if model.cfg.final_norm:
            x = model.ln_final(x)
        logits = x @ model.W_U
        return torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).item()

    with torch.no_grad():
        h = 1e-5
        numeric = (loss_with_shift(h) - loss_with_shift(-h)) / (2 * h)
    assert numeric == pytest.approx((grad * u).sum().item(), abs=1e-7)


class Perturb(Recorder):
    """Records everything, and adds ``eps * direction`` to one named tensor on its way."""

    def __init__(self, name: str, direction: torch.Tensor, eps: float):
        super().__init__()
        self.name, self.direction, self.eps = name, direction, eps

    def record(self, name, tensor):
        if name == self.name:
            tensor = tensor + self.eps * self.direction
        return super().record(name, tensor)


def test_every_activation_gradient_is_the_derivative_of_the_loss(model):
    """Reference: central finite differences, not autograd. For every captured tensor x,
    d/dε L(x + ε·u) at ε = 0 must equal <grad:x, u> for a random direction u; the perturbed
    forward passes add ε·u where the forward pass names x and run nothing of run_trace's
    (float64, h = 1e-6, tolerance 1e-6 relative to the gradient's size)."""
    trace = run_trace(model, TOKENS, backward=True)
    ids = torch.tensor([TOKENS])
    targets = next_token_targets(ids)
    gen = torch.Generator().manual_seed(3)
    checked = 0
    for name in trace.activations:
        u = torch.randn((1, *trace[name].shape), generator=gen, dtype=torch.float64)

        def loss(eps):
            with torch.no_grad(), capture(recorder=Perturb(name, u, eps)):  # noqa: B023 (called within this iteration)
                return model(ids, targets).loss.item()

        h = 1e-6
        numeric = (loss(h) - loss(-h)) / (2 * h)
        if GRAD + name not in trace.grads:  # off the loss's path: the loss must not move
            assert name == "hook_probs" and numeric == 0.0
            continue
        grad = trace[GRAD + name]
        analytic = (torch.nan_to_num(grad, nan=0.0) * u[0]).sum().item()
        assert numeric == pytest.approx(analytic, abs=1e-6 * (1 + abs(analytic))), name
        checked += 1
    assert checked >= 25  # every hooked tensor of a 2- or 3-block model
    assert GRAD + "hook_probs" not in trace.grads  # a side branch: the loss is computed from log-probs


def test_capture_does_not_change_the_result(model):
    ids = torch.tensor([TOKENS])
    with torch.no_grad():
        plain = model(ids).logits[0]
    trace = run_trace(model, TOKENS)
    assert torch.allclose(trace["hook_logits"], plain, rtol=0, atol=1e-12)


def test_attention_invariants(model):
    trace = run_trace(model, TOKENS, backward=True)
    T = len(TOKENS)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(model.cfg.n_layers):
        p = f"blocks.{i}."
        pattern = trace[p + "attn.hook_pattern"]
        assert torch.allclose(pattern.sum(-1), torch.ones_like(pattern.sum(-1)), atol=1e-12)
        assert (pattern[:, future] == 0).all()  # exactly 0, not merely small
        assert torch.isneginf(trace[p + "attn.hook_scores_masked"][:, future]).all()
        # the mask stops gradient: scores above the diagonal get exactly 0
        assert (trace[GRAD + p + "attn.hook_scores"][:, future] == 0).all()
        resid_pre, attn_out = trace[p + "hook_resid_pre"], trace[p + "hook_attn_out"]
        assert torch.allclose(trace[p + "hook_resid_mid"], resid_pre + attn_out, atol=1e-12)
        bias = model.blocks[i].attn.b_O if model.cfg.attn_bias else 0
        assert torch.allclose(attn_out, trace[p + "attn.hook_result"].sum(0) + bias, atol=1e-12)
        assert torch.allclose(trace[p + "hook_resid_post"], trace[p + "hook_resid_mid"] + trace[p + "hook_mlp_out"], atol=1e-12)
        # each head's z is its pattern times its values
        v = trace[p + ("attn.hook_v_clipped" if model.cfg.clip_qkv else "attn.hook_v")]
        v = v.repeat_interleave(model.cfg.n_heads // model.cfg.n_kv_heads, dim=0)
        assert torch.allclose(trace[p + "attn.hook_z"], pattern @ v, atol=1e-12)


def test_norm_and_loss_tensors(model):
    trace = run_trace(model, TOKENS, backward=True)
    x = trace["blocks.0.hook_resid_pre"]
    if model.cfg.norm == "layernorm":
        assert torch.allclose(trace["blocks.0.ln1.hook_mean"], x.mean(-1), atol=1e-12)
        expected_scale = (x.var(-1, unbiased=False) + model.cfg.norm_eps).sqrt()  # biased variance
        assert torch.allclose(
            trace["blocks.0.ln1.hook_out"],
            torch.nn.functional.layer_norm(x, (x.shape[-1],), model.blocks[0].ln1.w, model.blocks[0].ln1.b, model.cfg.norm_eps),
            atol=1e-12,
        )
    else:
        expected_scale = (x.pow(2).mean(-1) + model.cfg.norm_eps).sqrt()
    assert torch.allclose(trace["blocks.0.ln1.hook_scale"], expected_scale, atol=1e-12)
    per_position = trace["hook_loss"]
    assert per_position[-1].isnan()  # the last position has no next token
    assert per_position[:-1].mean().item() == pytest.approx(trace.loss, abs=1e-12)
    log_probs = trace["hook_log_probs"]
    expected = -log_probs[torch.arange(len(TOKENS) - 1), torch.tensor(TOKENS[1:])]
    assert torch.allclose(per_position[:-1], expected, atol=1e-12)
    assert torch.allclose(trace["hook_probs"].sum(-1), torch.ones(len(TOKENS), dtype=torch.float64), atol=1e-12)


def test_name_patterns_limit_capture(model):
    trace = run_trace(model, TOKENS, names=["blocks.0.attn.*", "hook_logits"], backward=True)
    assert set(trace.activations) == {
        n for n in run_trace(model, TOKENS).activations if n.startswith("blocks.0.attn.") or n == "hook_logits"
    }
    assert all(n.startswith(GRAD + "blocks.0.attn.") or n == GRAD + "hook_logits" for n in trace.grads)
    assert GRAD + "blocks.0.attn.W_Q" in trace.grads  # parameters match the same patterns
    nothing = run_trace(model, TOKENS, names=[])
    assert nothing.activations == {} and nothing.loss is not None


def test_no_state_left_on_the_model(model):
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    run_trace(model, TOKENS, backward=True)
    assert all(p.grad is None for p in model.parameters())
    assert not any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in model.modules())
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    with capture() as rec:
        pass
    assert rec.tensors == {}


def test_float32_and_float64_agree(random_model):
    m64 = random_model(CONFIGS["gpt2-like"])
    m32 = Transformer(m64.cfg)
    m32.load_state_dict(m64.state_dict())
    t32, t64 = run_trace(m32.float(), TOKENS, backward=True), run_trace(m64, TOKENS, backward=True)
    assert t32["hook_logits"].dtype == torch.float32 and t64["hook_logits"].dtype == torch.float64
    assert torch.allclose(t32["hook_logits"].double(), t64["hook_logits"], atol=1e-4)
    assert torch.allclose(t32[GRAD + "embed.W_E"].double(), t64[GRAD + "embed.W_E"], atol=1e-5)


def test_rope_rotates_by_position(random_model):
    cfg = CONFIGS["llama-like (RMSNorm, SwiGLU, RoPE, GQA, untied)"]
    trace = run_trace(random_model(cfg), TOKENS)
    q, rot = trace["blocks.0.attn.hook_q"], trace["blocks.0.attn.hook_rot_q"]
    # rotation preserves each head vector's norm; position 0 is not rotated
    assert torch.allclose(q.norm(dim=-1), rot.norm(dim=-1), atol=1e-12)
    assert torch.allclose(q[:, 0], rot[:, 0], atol=1e-12)
    # first pair of dimensions at position t is rotated by angle t (frequency base^0 = 1)
    half = cfg.d_head // 2
    t = 3
    c, s = math.cos(t), math.sin(t)
    a, b = q[0, t, 0], q[0, t, half]
    assert rot[0, t, 0].item() == pytest.approx((a * c - b * s).item(), abs=1e-12)
    assert rot[0, t, half].item() == pytest.approx((b * c + a * s).item(), abs=1e-12)


def test_worked_example_uses_the_printed_weights():
    """Reference: the article's printed weights (assets/worked-example/published.json) and
    its stated exact value of X_mid_LN(1) row 4, [0.302, 1.230, -1.547, 0.015] (±0.0005)."""
    from glassbox.model.worked_example.article import engine_slot, published

    loaded = load("worked-example")
    params = dict(loaded.model.named_parameters())
    cfg = loaded.cfg
    assert loaded.model.embed.W_E.dtype == torch.float64
    for article_name, value in published()["given_weights"].items():
        name, head = engine_slot(article_name, cfg)
        engine = params[name] if head is None else params[name][head]
        assert torch.equal(engine.cpu().reshape(-1), torch.tensor(value, dtype=torch.float64).reshape(-1)), article_name
    trace = run_trace(
        loaded.model, loaded.encode("the cat sat on the"), backward=True, target=Target(loaded.tokenizer.token_id("mat"))
    )
    got = trace["blocks.0.ln2.hook_out"][4].cpu()
    assert torch.allclose(got, torch.tensor([0.302, 1.230, -1.547, 0.015], dtype=torch.float64), atol=5e-4)
    assert trace.loss == pytest.approx(-math.log(trace["hook_probs"][4, 5].item()), abs=1e-12)


def test_trace_tensors_do_not_alias_the_weights(model):
    """Editing a trace (e.g. in a UI) must never edit the shared model."""
    trace = run_trace(model, TOKENS, backward=True)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    for name in trace.names():
        assert trace[name].untyped_storage().data_ptr() not in weights, name


def test_last_only_gives_the_last_rows_logits(random_model):
    """Reference: the full forward's last row (float64; the head's product of one row may round
    differently from the product of many: 1e-12)."""
    cfg = ModelConfig(vocab_size=40, n_ctx=16, d_model=16, n_layers=2, n_heads=4, d_ff=32)
    model = random_model(cfg)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    with torch.no_grad():
        last = model(ids, last_only=True).logits
        full = model(ids).logits
    assert last.shape == (1, 1, 40) and torch.allclose(last[0, 0], full[0, -1], atol=1e-12)
    with pytest.raises(GlassboxError, match="no loss"):
        model(ids, torch.zeros_like(ids), last_only=True)


def test_probabilities_are_derived_when_read_and_not_held(model):
    """hook_probs is exp(hook_log_probs) computed on reading, not kept. Reference: torch.softmax
    of the captured logits (float64, 1e-12); the bytes kept, summed by the test itself."""
    from glassbox.model.serving import trace_bytes

    trace = run_trace(model, TOKENS, backward=True)
    assert torch.allclose(trace["hook_probs"], torch.softmax(trace["hook_logits"], dim=-1), rtol=0, atol=1e-12)
    names = list(trace.activations)
    assert names.index("hook_probs") == names.index("hook_log_probs") + 1  # where the pass computes it
    every = sum(trace[n].nbytes for n in trace.names())
    assert trace_bytes(trace) == every - trace["hook_probs"].nbytes
    # asked for alone: its source is kept to derive it, but neither listed nor differentiated
    alone = run_trace(model, TOKENS, names=["hook_probs", "blocks.0.hook_resid_post"], backward=True)
    assert list(alone.activations) == ["blocks.0.hook_resid_post", "hook_probs"]
    assert set(alone.grads) == {GRAD + "blocks.0.hook_resid_post"}
    # (equal up to rounding: the partial trace's norms run torch's fused kernel)
    assert torch.allclose(alone["hook_probs"], trace["hook_probs"], rtol=0, atol=1e-12)
    with pytest.raises(KeyError):
        alone["hook_log_probs"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 1, 4, 2, 2), (12, 16, 64, 12, 8), (3, 5, 48, 4, 12)])
def test_a_batchs_projections_without_gradients_are_the_broadcast_products_bit_for_bit(shape, dtype):
    """On a CPU without gradients a batch's query, key and value projections multiply each sequence alone
    (app speed: the broadcast copied each weight per sequence). Reference: the broadcast product
    (b, 1, t, d) @ (h, d, e) the projections computed before, exactly (torch.equal)."""
    from glassbox.model.engine import ModelConfig, Transformer

    b, t, d, h, e = shape
    cfg = ModelConfig(vocab_size=11, n_ctx=32, d_model=d, n_layers=1, n_heads=h, d_head=e, d_ff=8)
    attn = Transformer(cfg).init_weights(0).to(dtype).blocks[0].attn
    x = torch.randn(b, t, d, dtype=dtype, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for W, bias in ((attn.W_Q, "b_Q"), (attn.W_K, "b_K"), (attn.W_V, "b_V")):
            expected = torch.matmul(x[:, None], W) + (getattr(attn, bias)[:, None, :] if cfg.attn_bias else 0)
            assert torch.equal(attn._project(x, W, bias), expected)
