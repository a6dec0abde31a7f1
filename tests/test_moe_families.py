"""The mixture-of-experts families Glassbox opens (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE), against
transformers' own model class for each.

Reference: as in tests/test_families.py, whose checks run here on these families too (imported
below, so pytest collects them in this module, with its ``family`` fixture): a tiny model built
with transformers' config and model classes (3 or 4 blocks, 4 to 8 experts, top-2, every switch
the family has turned on: a shared expert and its gate, dense blocks among the sparse ones,
renormalised and raw top-k weights, full-width QK-norm, q/k/v clipping that bites, windows),
norms and biases perturbed, saved with ``save_pretrained`` (the experts one nn.Linear each, the
hub's layout) and opened by Glassbox from that directory. transformers' parameter gradients are
mapped through the converter from its in-memory layout (the experts fused, ``gate_up_proj``), so
both layouts are read. Tolerances (float32 on both sides): logits and residuals <= 1e-4;
attention patterns, the loss and every gradient <= 1e-5; router logits <= 1e-5; each KV-cache
step equals recomputing the prefix (<= 1e-4); greedy generation equals ``generate`` exactly.
Beyond those: the router logits and the load-balancing loss against transformers', and the
uncaptured pass (each expert on its routed positions) against the captured one (every expert on
every position).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func  # noqa: E402

from glassbox.model.engine import load_balancing_loss, run_trace  # noqa: E402
from glassbox.model.io.checkpoint import model_bytes  # noqa: E402
from tests.test_families import (  # noqa: E402, F401  (the shared checks, collected here too)
    PROMPT,
    SIZES,
    saved_family,
    test_forward_and_backward_match_transformers,
    test_greedy_generation_is_transformers_generate,
    test_kv_cache_steps_equal_recomputing_the_prefix,
)

ROUTER_TOL = 1e-5  # router logits, as the gradients
SAME_TOL = 1e-5  # the fast and the captured pass: the same sums in another order
AUX_TOL = 1e-6  # the load-balancing loss: a few sums of probabilities

MOE = dict(SIZES, num_attention_heads=4, num_key_value_heads=2, num_experts_per_tok=2)

# family -> (config, whether its tokenizer puts a BOS token first)
FAMILIES = {
    "mixtral (8 experts, renormalised top-2, sliding window, head_dim 12)": (
        lambda: transformers.MixtralConfig(**MOE, intermediate_size=24, num_local_experts=8, sliding_window=5, head_dim=12),
        True,
    ),
    "qwen2_moe (shared expert with its sigmoid gate, raw top-2 weights, a dense block, q/k/v biases, a window)": (
        lambda: transformers.Qwen2MoeConfig(
            **MOE,
            intermediate_size=48,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=40,
            num_experts=6,
            norm_topk_prob=False,
            mlp_only_layers=[1],
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=2,
        ),
        False,
    ),
    "qwen3_moe (renormalised top-2, every other block sparse, QK-norm, biases, tied, a window)": (
        lambda: transformers.Qwen3MoeConfig(
            **{**MOE, "num_hidden_layers": 4},
            intermediate_size=48,
            moe_intermediate_size=16,
            num_experts=4,
            norm_topk_prob=True,
            decoder_sparse_step=2,
            head_dim=12,
            attention_bias=True,
            use_sliding_window=True,
            sliding_window=4,
            tie_word_embeddings=True,
        ),
        False,
    ),
    "olmoe (full-width QK-norm, q/k/v clipped, biases, 8 experts)": (
        lambda: transformers.OlmoeConfig(**MOE, intermediate_size=16, num_experts=8, clip_qkv=1.0, attention_bias=True),
        True,
    ),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    make_config, bos = FAMILIES[request.param]
    return saved_family(make_config(), bos, tmp_path_factory.mktemp(request.param.split()[0]))


def sparse_blocks(cfg) -> list[int]:
    return [i for i in range(cfg.n_layers) if cfg.is_moe(i)]


def test_router_logits_and_load_balancing_loss_match_transformers(family):
    """Reference: transformers' router logits (``output_router_logits=True``: one (positions,
    experts) tensor per block with experts) <= 1e-5, and its load-balancing loss
    (``load_balancing_loss_func`` of modeling_mixtral.py, which the model's own ``aux_loss`` is)
    on those logits against ``load_balancing_loss`` of Glassbox's router probabilities, <= 1e-6.
    Also that the switches bite: dense blocks where the config keeps them, positions routed to
    different experts, the weights renormalised exactly where the family does so."""
    hf, tokenizer, loaded = family
    cfg, tokens = loaded.cfg, loaded.encode(PROMPT)
    with torch.no_grad():
        out = hf(torch.tensor([tokens]), output_router_logits=True)
    trace = run_trace(loaded.model, tokens, names=["*.mlp.hook_router_*", "*.mlp.hook_expert_weights"])
    sparse = sparse_blocks(cfg)
    assert len(out.router_logits) == len(sparse) and 0 < len(sparse)
    for i, reference in zip(sparse, out.router_logits):
        assert torch.allclose(trace[f"blocks.{i}.mlp.hook_router_logits"], reference, atol=ROUTER_TOL), i
        weights = trace[f"blocks.{i}.mlp.hook_expert_weights"]
        assert ((weights > 0).sum(-1) == cfg.experts_top_k).all()
        assert len({tuple(row.nonzero()[:, 0].tolist()) for row in weights}) > 1  # not one route for all
        assert torch.allclose(weights.sum(-1), torch.ones(len(tokens)), atol=1e-6) == cfg.norm_top_k

    expected = load_balancing_loss_func(out.router_logits, cfg.n_experts, cfg.experts_top_k)
    assert out.aux_loss.item() == pytest.approx(expected.item(), abs=AUX_TOL)
    probs = torch.stack([trace[f"blocks.{i}.mlp.hook_router_probs"] for i in sparse])
    assert load_balancing_loss(probs, cfg.experts_top_k).item() == pytest.approx(expected.item(), abs=AUX_TOL)


def test_each_expert_on_its_positions_equals_every_expert_everywhere(family):
    """Reference: the captured pass, which runs every expert on every position (weight 0 where it
    was not chosen), against the plain forward, which runs each expert on the positions routed to
    it alone: logits <= 1e-5 (the same sums in another order). In the captured pass, each block's
    MLP output is Σ_e weight_e · experts.hook_out[e] (+ gate · shared.hook_out) <= 1e-6, and the
    gradients w.r.t. the experts' weights are those of a trace of the weights alone <= 1e-6."""
    hf, tokenizer, loaded = family
    cfg, tokens = loaded.cfg, loaded.encode(PROMPT)
    with torch.no_grad():
        fast = loaded.model(torch.tensor([tokens])).logits[0]
    trace = run_trace(loaded.model, tokens, backward=True)
    assert torch.allclose(trace["hook_logits"], fast, atol=SAME_TOL)
    # the experts' weights alone captured: every expert still runs everywhere, so that the weight of
    # one that was not chosen has its gradient, as in the full trace
    weights_only = run_trace(loaded.model, tokens, names=["*.mlp.hook_expert_weights"], backward=True)
    for name, grad in weights_only.grads.items():
        assert torch.allclose(grad, trace[name], atol=1e-6), name
    for i in sparse_blocks(cfg):
        p = f"blocks.{i}.mlp."
        total = torch.einsum("te,etd->td", trace[p + "hook_expert_weights"], trace[p + "experts.hook_out"])
        if cfg.d_ff_shared is not None:
            gate = trace[p + "hook_shared_gate"][:, None] if cfg.shared_expert_gate else 1
            total = total + gate * trace[p + "shared.hook_out"]
        assert torch.allclose(trace[f"blocks.{i}.hook_mlp_out"], total, atol=1e-6), i
    if cfg.clip_qkv is not None:  # the clipping bites
        assert trace["blocks.0.attn.q_norm_full.hook_out"].abs().max() > 1.5 * cfg.clip_qkv


def test_the_size_counted_before_loading_is_the_loaded_size(family):
    """Reference: the bytes of the loaded model's parameters and buffers, summed by torch; the
    count made before loading (from meta models, each kind of block apart where dense blocks sit
    among sparse ones) equals it exactly."""
    hf, tokenizer, loaded = family
    assert model_bytes(loaded.cfg, torch.float32) == loaded.weight_bytes
