"""The modern variants (RMSNorm, SwiGLU, RoPE, grouped-query attention, untied head) against
an independent implementation: transformers' LlamaForCausalLM with random weights, eager
attention, float32 (transformers computes RMSNorm and the RoPE angles in float32 even for a
float64 model, so float64 would not buy tighter agreement). Tolerances as for GPT-2: loss,
patterns and gradients 1e-5, logits and residuals 1e-4."""

import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

from glassbox.model.engine import GRAD, ModelConfig, Transformer, run_trace  # noqa: E402

D, H, K, F, L, V = 32, 4, 2, 48, 2, 97


def llama_to_engine(hf_tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a Llama state dict (or its gradients) to the engine's names.
    nn.Linear stores (out, in); the engine stores (in, out), split per head."""
    s = {k.removeprefix("model."): v for k, v in hf_tensors.items()}
    dh = D // H
    state = {"embed.W_E": s["embed_tokens.weight"], "ln_final.w": s["norm.weight"], "unembed.W_U": s["lm_head.weight"].T}
    for i in range(L):
        src, dst = f"layers.{i}.", f"blocks.{i}."
        state[dst + "ln1.w"] = s[src + "input_layernorm.weight"]
        state[dst + "ln2.w"] = s[src + "post_attention_layernorm.weight"]
        for name, proj, heads in (("W_Q", "q_proj", H), ("W_K", "k_proj", K), ("W_V", "v_proj", K)):
            state[dst + "attn." + name] = s[f"{src}self_attn.{proj}.weight"].T.reshape(D, heads, dh).permute(1, 0, 2)
        state[dst + "attn.W_O"] = s[src + "self_attn.o_proj.weight"].T.reshape(H, dh, D)
        state[dst + "mlp.W_gate"] = s[src + "mlp.gate_proj.weight"].T
        state[dst + "mlp.W_in"] = s[src + "mlp.up_proj.weight"].T
        state[dst + "mlp.W_out"] = s[src + "mlp.down_proj.weight"].T
    return state


def test_llama_variants_match_transformers():
    torch.manual_seed(0)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=V,
        hidden_size=D,
        intermediate_size=F,
        num_hidden_layers=L,
        num_attention_heads=H,
        num_key_value_heads=K,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        initializer_range=0.2,
    )
    hf = transformers.LlamaForCausalLM._from_config(hf_cfg, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    rope = getattr(hf_cfg, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(hf_cfg, "rope_theta", 10000.0))

    cfg = ModelConfig(
        vocab_size=V,
        n_ctx=64,
        d_model=D,
        n_layers=L,
        n_heads=H,
        n_kv_heads=K,
        d_ff=F,
        norm="rmsnorm",
        norm_eps=1e-6,
        activation="silu",
        gated_mlp=True,
        positional="rope",
        rope_base=theta,
        attn_bias=False,
        mlp_bias=False,
        tie_embeddings=False,
    )
    engine = Transformer(cfg)
    engine.load_state_dict(llama_to_engine(hf.state_dict()))

    tokens = torch.randint(0, V, (1, 23), generator=torch.Generator().manual_seed(1))
    out = hf(tokens, output_hidden_states=True, output_attentions=True)
    for h in out.hidden_states:
        h.retain_grad()
    # the engine's default loss: the mean next-token cross-entropy
    loss = torch.nn.functional.cross_entropy(out.logits[0, :-1], tokens[0, 1:])
    loss.backward()
    trace = run_trace(engine, tokens[0].tolist(), backward=True)

    assert trace.loss == pytest.approx(loss.item(), abs=1e-5)
    assert torch.allclose(trace["hook_logits"], out.logits[0], atol=1e-4)
    for i in range(L):
        assert torch.allclose(trace[f"blocks.{i}.hook_resid_pre"], out.hidden_states[i][0], atol=1e-4), i
        assert torch.allclose(trace[f"blocks.{i}.attn.hook_pattern"], out.attentions[i][0], atol=1e-5), i
        assert torch.allclose(trace[GRAD + f"blocks.{i}.hook_resid_pre"], out.hidden_states[i].grad[0], atol=1e-5), i
    reference_grads = llama_to_engine({n: p.grad for n, p in hf.named_parameters()})
    assert len(reference_grads) == len(list(engine.parameters()))
    for name, grad in reference_grads.items():
        assert torch.allclose(trace[GRAD + name], grad, atol=1e-5), name
