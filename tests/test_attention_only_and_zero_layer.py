"""The explorer's analyses (model/analysis) on the micro-models' architectures: attention-only
blocks (no MLP, no ln2, no hook_resid_mid) and zero-layer models (the logits are W_E · W_U).
References: the forward pass's own tensors and torch autograd, and what is computed here by hand
from the weights (a bigram's logits, a block's output with one head or one sublayer swapped).
float64 random models: 1e-10."""

import numpy as np
import pytest
import torch

from glassbox.model.analysis import (
    architecture,
    backward_steps,
    contribution_norms,
    gradient_norms,
    logit_lens,
    norm_prefixes,
    norm_summary,
    parts,
    positional_table,
    recomputed_weight_gradient,
    saliency,
    weight_gradient_product,
)
from glassbox.model.analysis.ablation import ablate
from glassbox.model.analysis.architecture import NO_BLOCKS, NO_MLP, NO_POSITIONS, missing
from glassbox.model.analysis.attribution import attribute
from glassbox.model.analysis.circuits import bigram, head_scores, qk_circuit
from glassbox.model.analysis.dla import direct_logit_attribution, parts_written
from glassbox.model.analysis.neurons import active, top_neurons
from glassbox.model.analysis.patching import activation_patching, sites
from glassbox.model.analysis.residual import stream_start
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, run_trace
from tests.helpers import build_random_model

SMALL = dict(vocab_size=30, n_ctx=16, d_model=16, n_heads=2, d_ff=16, tie_embeddings=False)
CONFIGS = {
    "attention-only": ModelConfig(**SMALL, n_layers=2, attn_only=True),
    "attention-only, one block, RMSNorm, post norms": ModelConfig(
        **SMALL, n_layers=1, attn_only=True, norm="rmsnorm", post_norms=True
    ),
    "zero layers (the bigram)": ModelConfig(**SMALL, n_layers=0, positional="none", final_norm=False),
    "zero layers with a final norm, tied": ModelConfig(**{**SMALL, "tie_embeddings": True}, n_layers=0, positional="none"),
}
TOKENS = [3, 7, 1, 7, 9, 2, 11, 4]
CLEAN, CORRUPT = TOKENS, [3, 7, 1, 5, 9, 2, 11, 4]


@pytest.fixture(scope="module", params=list(CONFIGS))
def model_and_trace(request):
    model = build_random_model(CONFIGS[request.param])
    return model, run_trace(model, TOKENS, backward=True)


def test_parts_add_up_and_name_no_mlp_or_positions_the_model_lacks(model_and_trace):
    model, _ = model_and_trace
    cfg, keys = model.cfg, [p.key for p in parts(model)]
    assert sorted(n for p in parts(model) for n, _ in p.params) == sorted(n for n, _ in model.named_parameters())
    assert not any(k.endswith(".mlp") for k in keys) and ("pos" in keys) == (cfg.positional != "none")
    assert len([k for k in keys if k.endswith(".attn")]) == cfg.n_layers
    notes = " ".join(architecture(cfg))
    assert ("attention only" in notes) == bool(cfg.n_layers) and "MLP reads" not in notes
    assert ("no blocks" in notes) == (cfg.n_layers == 0) == ("no positions" in notes)


def test_what_a_model_lacks_is_said_in_one_sentence():
    assert missing(CONFIGS["attention-only"]) is None and missing(CONFIGS["attention-only"], mlp=True) == NO_MLP
    assert missing(CONFIGS["zero layers (the bigram)"], mlp=True) == NO_BLOCKS
    with pytest.raises(GlassboxError, match="learned positions"):  # no one traced tensor is that stream
        stream_start(ModelConfig(**SMALL, n_layers=0))


def test_norms_are_the_ones_the_model_has_and_read_their_own_input(model_and_trace):
    """Reference: each norm recomputed by hand from the input the analysis names for it."""
    model, trace = model_and_trace
    cfg = model.cfg
    expected = cfg.n_layers * (2 if cfg.post_norms else 1) + cfg.final_norm
    assert len(norm_prefixes(cfg)) == expected and not any("ln2" in p for p, _ in norm_prefixes(cfg))
    for prefix, source in norm_prefixes(cfg):
        x = trace[source].cpu().numpy()
        if cfg.norm == "layernorm":
            by_hand = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + cfg.norm_eps)
        else:
            by_hand = x / np.sqrt((x**2).mean(-1, keepdims=True) + cfg.norm_eps)
        assert np.allclose(trace[prefix + "hook_normalized"].cpu().numpy(), by_hand, atol=1e-10), prefix
        summary = norm_summary(trace, cfg, prefix, source)
        assert np.allclose(
            summary["scale (recorded)"] ** 2,
            (x**2 if cfg.norm == "rmsnorm" else (x - x.mean(-1, keepdims=True)) ** 2).mean(-1) + cfg.norm_eps,
            atol=1e-10,
        )


def test_contributions_add_up_to_the_stream_the_head_reads(model_and_trace):
    model, trace = model_and_trace
    cfg = model.cfg
    labels, norms = contribution_norms(trace, cfg)
    assert len(labels) == norms.shape[0] == 1 + cfg.n_layers and not any("MLP" in label for label in labels)
    if cfg.post_norms:
        return  # the post norm's output, not attention's own, joins the stream: checked by the norm test
    start = trace[stream_start(cfg)]
    total = start + sum(trace[f"blocks.{i}.hook_attn_out"] for i in range(cfg.n_layers))
    end = trace[f"blocks.{cfg.n_layers - 1}.hook_resid_post"] if cfg.n_layers else trace["hook_embed"]
    assert torch.allclose(total, end, atol=1e-10)
    assert np.allclose(norms[0], start.norm(dim=-1).cpu().numpy(), atol=1e-12)


def test_the_logit_lens_ends_in_the_models_output_and_a_bigram_is_its_table(model_and_trace):
    model, trace = model_and_trace
    cfg = model.cfg
    lens = logit_lens(model, trace, TOKENS[2], k=3)
    assert len(lens.labels) == cfg.n_layers + 1
    probs = trace["hook_probs"].cpu().numpy()
    assert np.allclose(lens.top_probs[-1], np.sort(probs, -1)[:, ::-1][:, :3], atol=1e-6)
    if cfg.n_layers == 0 and not cfg.final_norm:  # by hand: softmax(W_E[tokens] · W_U)
        logits = model.embed.W_E.detach()[TOKENS] @ model.unembed.W_U.detach()
        assert np.allclose(lens.chosen[0], logits.softmax(-1)[:, TOKENS[2]].numpy(), atol=1e-6)


def test_backward_steps_name_gradients_the_trace_has_and_every_weight(model_and_trace):
    model, trace = model_and_trace
    cfg = model.cfg
    steps = backward_steps(model)
    assert len({s.key for s in steps}) == len(steps) == 2 + 4 * cfg.n_layers + cfg.final_norm
    part_keys = {p.key for p in parts(model)}
    for step in steps:
        assert step.part in part_keys, step.key
        assert all(name in trace.grads for name in step.names), step.key
        assert "resid_mid" not in step.sentence and "MLP" not in step.title
    assert {w for s in steps for w in s.weights} == {n for n, _ in model.named_parameters()}


def test_weight_gradients_rebuilt_as_products_are_autograds(model_and_trace):
    """Reference: autograd's gradients in the trace; for the bigram's W_U also by hand,
    Σ_t e_tᵀ (p_t − y_t) / (T − 1) under the mean next-token loss."""
    model, trace = model_and_trace
    cfg = model.cfg
    checked = 0
    for name, _ in model.named_parameters():
        rebuilt = recomputed_weight_gradient(trace, cfg, name)
        if rebuilt is None:
            assert weight_gradient_product(cfg, name) is None
            continue
        assert torch.allclose(rebuilt, trace[GRAD + name], atol=1e-10), name
        checked += 1
    assert checked == 4 * cfg.n_layers + (not cfg.tie_embeddings)
    if cfg.n_layers == 0 and not cfg.final_norm:
        e, p = model.embed.W_E.detach()[TOKENS], trace["hook_probs"]
        y = torch.nn.functional.one_hot(torch.tensor(TOKENS[1:] + [0]), cfg.vocab_size).double()
        y[-1], p = 0, torch.cat([p[:-1], torch.zeros_like(p[-1:])])  # the last position predicts nothing
        assert torch.allclose(trace[GRAD + "unembed.W_U"], e.T @ (p - y) / (len(TOKENS) - 1), atol=1e-10)
    labels, norms = gradient_norms(trace, cfg)
    assert len(labels) == cfg.n_layers + 1 and np.allclose(norms[0], saliency(trace)[1], atol=1e-12)


def test_direct_logit_attribution_adds_up_without_mlps(model_and_trace):
    model, trace = model_and_trace
    cfg = model.cfg
    result = direct_logit_attribution(model, TOKENS, 5, -1, 6)
    logits = trace["hook_logits"][-1]
    assert result.logit == pytest.approx(float(logits[5] - logits[6]), abs=1e-10)
    assert abs(result.values.sum() - result.logit) <= 1e-10 * (1 + abs(result.logit))
    assert not any("mlp" in name for name in parts_written(model))
    if cfg.n_layers == 0 and not cfg.final_norm:  # one part, the embedding: W_E[t] · (W_U[:, 5] − W_U[:, 6])
        W_E, W_U = model.embed.W_E.detach(), model.unembed.W_U.detach()
        assert result.names == ["hook_embed"]
        assert result.values[0] == pytest.approx(float(W_E[TOKENS[-1]] @ (W_U[:, 5] - W_U[:, 6])), abs=1e-10)


def attention_only():
    return build_random_model(ModelConfig(**SMALL, n_layers=1, attn_only=True))


def test_patching_offers_the_sites_a_model_has():
    assert sites(CONFIGS["attention-only"]) == ("resid_pre", "attn_out", "head")
    assert sites(CONFIGS["zero layers (the bigram)"]) == ()
    with pytest.raises(GlassboxError, match=NO_MLP):
        activation_patching(attention_only(), CLEAN, CORRUPT, 5, 6, "mlp_out")
    with pytest.raises(GlassboxError, match=NO_BLOCKS):
        activation_patching(build_random_model(CONFIGS["zero layers (the bigram)"]), CLEAN, CORRUPT, 5, 6, "resid_pre")


def test_patching_attention_output_is_the_head_applied_to_the_swapped_stream():
    """Reference, by hand: in a one-block attention-only model, patching attn_out gives
    head(corrupt resid_pre + clean attn_out)."""
    model = attention_only()
    clean, corrupt = run_trace(model, CLEAN), run_trace(model, CORRUPT)
    result = activation_patching(model, CLEAN, CORRUPT, 5, 6, "attn_out")
    with torch.no_grad():
        logits = model.head(corrupt["blocks.0.hook_resid_pre"][-1] + clean["blocks.0.hook_attn_out"][-1])
    assert result.metric[0, 0] == pytest.approx(float(logits[5] - logits[6]), abs=1e-10)
    assert result.metric[0, 0] == pytest.approx(result.metric_clean, abs=1e-10)  # the block is all that differs


def test_ablating_a_head_removes_its_result_and_neurons_are_refused():
    """Reference, by hand: zeroing head 1's z takes its hook_result out of attn_out."""
    model = attention_only()
    trace = run_trace(model, TOKENS)
    result = ablate(model, TOKENS, 0, head=1)
    with torch.no_grad():
        stream = trace["blocks.0.hook_resid_post"][-1] - trace["blocks.0.attn.hook_result"][1, -1]
        expected = model.head(stream).softmax(-1).numpy()
    assert np.allclose(result.after, expected, atol=1e-10)
    with pytest.raises(GlassboxError, match=NO_MLP):
        ablate(model, TOKENS, 0, neuron=0)
    with pytest.raises(GlassboxError, match=NO_BLOCKS):
        ablate(build_random_model(CONFIGS["zero layers (the bigram)"]), TOKENS, 0, head=0)


def test_a_bigram_model_is_its_direct_path_and_has_no_heads_neurons_or_positions():
    """Reference: the forward pass's logits, which a zero-layer model without norm computes as
    the bigram table's rows; only the last token matters to the last logit."""
    model = build_random_model(CONFIGS["zero layers (the bigram)"])
    trace = run_trace(model, TOKENS)
    table = bigram(model, TOKENS, list(range(model.cfg.vocab_size)))
    assert np.allclose(table.matrix, trace["hook_logits"].cpu().numpy(), atol=1e-10)
    for call in (lambda: qk_circuit(model, 0, 0, TOKENS, TOKENS), lambda: head_scores(model, TOKENS)):
        with pytest.raises(GlassboxError, match=NO_BLOCKS):
            call()
    with pytest.raises(GlassboxError, match=NO_POSITIONS):
        positional_table(model)
    scores = attribute(model, TOKENS, 5, "input_x_gradient").scores
    assert np.all(scores[:-1] == 0) and scores[-1] == pytest.approx(float(trace["hook_logits"][-1, 5]), abs=1e-10)
    assert np.array_equal(attribute(model, TOKENS, 5, "attention_rollout").scores, np.eye(len(TOKENS))[-1])


def test_the_neuron_analyses_say_an_attention_only_model_has_no_mlp():
    model = attention_only()
    trace = run_trace(model, TOKENS)
    for call in (lambda: active(trace, model.cfg, 0), lambda: top_neurons(model, trace, 0, 0)):
        with pytest.raises(GlassboxError, match=NO_MLP):
            call()
