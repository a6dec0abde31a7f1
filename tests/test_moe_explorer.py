"""The explorer's analyses, views and CLI on mixture-of-experts models: a random Mixtral-like model
and a random Qwen2-MoE-like one (a gated shared expert, a dense block between two sparse ones),
and the bundled micro-moe in the app. References: each expert computed here by hand from the
weights (router softmax, top-k, SwiGLU, W_out), a model copy with a weight zeroed, an edit written
out by hand, and torch autograd; float64 random models: 1e-10. The curated OLMoE's count against
its published figures."""

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassbox.app.explore import VIEWS
from glassbox.model.analysis import architecture, backward_steps, parts, recomputed_weight_gradient
from glassbox.model.analysis.ablation import ablate
from glassbox.model.analysis.dla import direct_logit_attribution
from glassbox.model.analysis.experts import SHARED, active_parameters, routing, unit
from glassbox.model.analysis.neurons import dead_neurons, top_neurons
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, editing, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import backward_sent, build_random_model, charts, cli, start, values, z

SMALL = dict(
    vocab_size=30,
    n_ctx=16,
    d_model=16,
    n_heads=2,
    n_kv_heads=1,
    d_ff=16,
    norm="rmsnorm",
    activation="silu",
    gated_mlp=True,
    positional="rope",
    mlp_bias=False,
    attn_bias=False,
    tie_embeddings=False,
    n_experts=4,
    experts_top_k=2,
    d_ff_expert=8,
)
CONFIGS = {
    "Mixtral-like": ModelConfig(**SMALL, n_layers=2),
    "Qwen2-MoE-like": ModelConfig(
        **SMALL, n_layers=3, norm_top_k=False, d_ff_shared=12, shared_expert_gate=True, moe_layers=(0, 2)
    ),
}
TOKENS = [3, 7, 1, 7, 9, 2, 11, 4]
PROMPT = "the cat sat on the mat and the dog ran"


@pytest.fixture(scope="module", params=list(CONFIGS))
def model_and_trace(request):
    model = build_random_model(CONFIGS[request.param])
    return model, run_trace(model, TOKENS, backward=True)


def by_hand(model, trace, layer: int) -> dict:
    """Block ``layer``'s experts from its weights and its input: probabilities, weights, the
    chosen experts, each expert's neurons and output (expert, position, …), the shared expert's."""
    cfg, mlp = model.cfg, model.blocks[layer].mlp
    x = trace[f"blocks.{layer}.ln2.hook_out"]
    probs = (x @ mlp.W_router).softmax(-1)
    top, chosen = probs.topk(cfg.experts_top_k, dim=-1)
    top = top / top.sum(-1, keepdim=True) if cfg.norm_top_k else top
    weights = torch.zeros_like(probs).scatter(-1, chosen, top)
    W = mlp.experts
    pre = torch.stack([x @ W.W_gate[e] for e in range(cfg.n_experts)]).detach()
    post = torch.stack([F.silu(pre[e]) * (x @ W.W_in[e]) for e in range(cfg.n_experts)]).detach()
    out = torch.stack([post[e] @ W.W_out[e] for e in range(cfg.n_experts)]).detach()
    shared = None
    if cfg.d_ff_shared is not None:
        s = mlp.shared
        shared = (torch.sigmoid(x @ mlp.W_shared_gate)[:, None] * ((F.silu(x @ s.W_gate) * (x @ s.W_in)) @ s.W_out)).detach()
    return dict(probs=probs.detach(), weights=weights.detach(), chosen=chosen, pre=pre, post=post, out=out, shared=shared)


def moe_layers(cfg):
    return [i for i in range(cfg.n_layers) if cfg.is_moe(i)]


def test_routing_and_the_blocks_output_are_the_experts_written_out(model_and_trace):
    model, trace = model_and_trace
    for i in moe_layers(model.cfg):
        hand, routed = by_hand(model, trace, i), routing(trace, model.cfg, i)
        assert np.allclose(routed.weights, hand["weights"].numpy(), atol=1e-10)
        assert np.allclose(routed.probs, hand["probs"].numpy(), atol=1e-10)
        counts = np.bincount(hand["chosen"].numpy().ravel(), minlength=model.cfg.n_experts)
        assert (routed.load == counts).all() and routed.load.sum() == len(TOKENS) * model.cfg.experts_top_k
        assert np.isclose(routed.share.sum(), 1) and np.allclose(routed.mean_prob, hand["probs"].mean(0).numpy())
        mlp_out = torch.einsum("te,etd->td", hand["weights"], hand["out"]) + (0 if hand["shared"] is None else hand["shared"])
        assert torch.allclose(trace[f"blocks.{i}.hook_mlp_out"], mlp_out, atol=1e-10)
    if model.cfg.moe_layers:
        with pytest.raises(GlassboxError, match="dense MLP"):
            routing(trace, model.cfg, 1)


def test_direct_logit_attribution_splits_an_moe_block_per_chosen_expert(model_and_trace):
    model, trace = model_and_trace
    cfg, position, token = model.cfg, 5, 4
    result = direct_logit_attribution(model, TOKENS, token, position)
    assert np.isclose(result.values.sum(), result.logit, atol=1e-9)
    shares = dict(zip(result.names, result.values))
    scale = trace["ln_final.hook_scale"][position]
    through = lambda v: float((v / scale * model.ln_final.w.detach()) @ model.W_U.detach()[:, token])  # noqa: E731
    for i in moe_layers(cfg):
        hand = by_hand(model, trace, i)
        chosen = sorted(hand["chosen"][position].tolist())
        named = sorted(int(n.split("[")[1][:-1]) for n in shares if n.startswith(f"blocks.{i}.mlp.experts."))
        assert named == chosen  # the experts not chosen wrote nothing and are left out
        for e in chosen:
            expected = through(hand["weights"][position, e] * hand["out"][e, position])
            assert np.isclose(shares[f"blocks.{i}.mlp.experts.hook_out[{e}]"], expected, atol=1e-10)
        if cfg.d_ff_shared is not None:
            assert np.isclose(shares[f"blocks.{i}.mlp.shared.hook_out"], through(hand["shared"][position]), atol=1e-10)
    dense = [i for i in range(cfg.n_layers) if not cfg.is_moe(i)]
    assert all(f"blocks.{i}.hook_mlp_out" in shares for i in dense)


def test_neuron_tools_act_on_a_chosen_experts_neurons(model_and_trace):
    model, trace = model_and_trace
    cfg, layer, position = model.cfg, 0, 6
    hand = by_hand(model, trace, layer)
    e = int(hand["chosen"][position, 0])
    write = (hand["post"][e, position] * hand["weights"][position, e]).abs() * model.blocks[0].mlp.experts.W_out[e].detach().norm(
        dim=1
    )
    top = top_neurons(model, trace, layer, position, 3, expert=e)
    assert [n.index for n in top] == write.argsort(descending=True)[:3].tolist()
    assert np.allclose([n.write for n in top], write.sort(descending=True).values[:3].numpy(), atol=1e-10)
    ran = hand["weights"][:, e] > 0
    off = (hand["pre"][e][ran] <= 0).all(0).nonzero()[:, 0].tolist()
    dead = dead_neurons(trace, cfg, layer, e)
    assert dead.neurons.tolist() == off and dead.positions == int(ran.sum())
    assert dead.off_fraction == pytest.approx(float((hand["pre"][e][ran] <= 0).double().mean()))
    with pytest.raises(GlassboxError, match="choose an expert"):
        top_neurons(model, trace, layer, position)
    if cfg.d_ff_shared is not None:  # the shared expert, and a dense block among the sparse ones
        assert len(top_neurons(model, trace, layer, position, 50, expert=SHARED)) == cfg.d_ff_shared
        assert len(top_neurons(model, trace, 1, position, 50)) == cfg.d_ff
        with pytest.raises(GlassboxError, match="dense MLP"):
            unit(cfg, 1, 0)


def test_ablating_an_experts_neuron_is_zeroing_its_row_or_setting_its_mean_where_it_ran(model_and_trace):
    """Zero: a model copy with the neuron's row of W_out[e] zeroed. Mean (over the positions routed
    to the expert): the block's output changed by hand, (mean − post) · W_out[e][n] · weight."""
    model, trace = model_and_trace
    layer, n = 0, 2
    hand = by_hand(model, trace, layer)
    e = int(hand["chosen"][-1, 0])
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        zeroed.blocks[layer].mlp.experts.W_out[e][n] = 0
        expected = zeroed(torch.tensor([TOKENS])).logits[0, -1].double().softmax(-1).numpy()
    result = ablate(model, TOKENS, layer, neuron=n, expert=e)
    assert np.allclose(result.after, expected, atol=1e-10) and "experts.hook_post" in result.name
    ran = hand["weights"][:, e] > 0
    post = hand["post"][e, :, n]
    change = ((post[ran].mean() - post) * hand["weights"][:, e])[:, None] * model.blocks[layer].mlp.experts.W_out[e][n].detach()
    with torch.no_grad(), editing({f"blocks.{layer}.hook_mlp_out": lambda t: t + change}):
        expected = model(torch.tensor([TOKENS])).logits[0, -1].double().softmax(-1).numpy()
    assert np.allclose(ablate(model, TOKENS, layer, neuron=n, expert=e, mode="mean").after, expected, atol=1e-10)
    with pytest.raises(GlassboxError, match="does not exist"):
        ablate(model, TOKENS, layer, neuron=model.cfg.d_ff_expert, expert=e)


def test_weight_gradients_and_backward_steps_on_experts(model_and_trace):
    """Reference: autograd's gradients in the trace (the experts' W_in, W_gate, W_out rebuilt per
    expert, the router's, the shared expert's)."""
    model, trace = model_and_trace
    cfg = model.cfg
    rebuilt = {name: recomputed_weight_gradient(trace, cfg, name) for name, _ in model.named_parameters()}
    for name, value in rebuilt.items():
        if value is not None:
            assert torch.allclose(value, trace[GRAD + name], atol=1e-10), name
    for i in moe_layers(cfg):
        assert all(rebuilt[f"blocks.{i}.mlp.{w}"] is not None for w in ("W_router", "experts.W_in", "experts.W_out"))
    steps = backward_steps(model)
    assert {w for s in steps for w in s.weights} == {n for n, _ in model.named_parameters()}
    for step in steps:
        assert all(name in trace.grads for name in step.names), step.key
    assert [s.title for s in steps if s.key.endswith("-mlp")] == [
        f"block {i + 1} (blocks.{i}) {'experts' if cfg.is_moe(i) else 'MLP'}" for i in reversed(range(cfg.n_layers))
    ]


def test_parts_and_architecture_say_what_the_experts_are(model_and_trace):
    model, _ = model_and_trace
    cfg = model.cfg
    assert sum(p.count for p in parts(model)) == sum(p.numel() for p in model.parameters())
    labels = [p.label for p in parts(model) if p.key.endswith(".mlp")]
    assert labels == [f"block {i + 1} (blocks.{i}) {'experts' if cfg.is_moe(i) else 'MLP'}" for i in range(cfg.n_layers)]
    notes = " ".join(architecture(cfg))
    assert "mixture of experts: 4 experts of 8 neurons" in notes
    assert (
        ("shared expert of 12 neurons" in notes)
        == ("a dense MLP of 16 neurons in the others" in notes)
        == (cfg.d_ff_shared is not None)
    )
    # the active count by hand: each MoE block runs 2 of its 4 experts of 3 · 16 · 8 weights
    idle = len(moe_layers(cfg)) * 2 * 3 * 16 * 8
    assert active_parameters(cfg, sum(p.numel() for p in model.parameters())) == sum(p.numel() for p in model.parameters()) - idle


def test_the_curated_olmoe_is_counted_as_published():
    """Reference: OLMoE-1B-7B's published 6.92B parameters in all and 1.28B active (the paper and
    model card, to 0.01B); `python -m model models` lists it."""
    from glassbox.model.io.catalog import entry

    olmoe = entry("allenai/OLMoE-1B-7B-0924")
    assert olmoe.family == "OLMoE" and olmoe.parameters == pytest.approx(6.92e9, abs=0.005e9)
    assert active_parameters(olmoe.model_config, olmoe.parameters) == pytest.approx(1.28e9, abs=0.005e9)
    listed = cli("models")
    assert listed.returncode == 0
    assert ["allenai/OLMoE-1B-7B-0924", "OLMoE", "6,919M"] in [line.split()[:3] for line in listed.stdout.splitlines()]


def test_the_family_bench_scales_a_model_too_large_for_this_machine_down_to_blocks_that_fit():
    from glassbox.model.io.catalog import entry
    from glassbox.model.tools.family_bench import BYTES_PER_PARAMETER, MEMORY_SHARE, fitted, parameters

    config = entry("allenai/OLMoE-1B-7B-0924").config
    smaller, why = fitted(config, 24 * 10**9)
    assert "benched with 2 of its 16 blocks" in why and smaller["num_hidden_layers"] == 2
    assert parameters(smaller) * BYTES_PER_PARAMETER <= 24e9 * MEMORY_SHARE
    assert fitted(config, 200 * 10**9) == (config, None)


def test_every_view_opens_on_micro_moe():
    for view in VIEWS:
        at = start("screens/explore.py", model="micro-moe", prompt=PROMPT, view=view)
        assert not at.exception and not at.error, view
        assert all(chart["data"] for chart in charts(at)), view


def test_the_ffn_view_shows_the_routing_and_a_chosen_experts_neurons():
    """Reference: run_trace's hook_expert_weights and experts.hook_pre, and the load counted here."""
    at = start("screens/explore.py", model="micro-moe", prompt=PROMPT, view="MLP", block="2")
    loaded = load("micro-moe")
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    weights = trace["blocks.1.mlp.hook_expert_weights"].numpy()
    drawn = charts(at)
    (routing_map,) = [c for c in drawn if "Which experts each token chose" in c["layout"]["title"]["text"]]
    assert np.allclose(z(routing_map), weights, atol=1e-6)
    assert routing_map["layout"]["yaxis"]["ticktext"] == [
        f"{i}:{p}" for i, p in enumerate(loaded.tokenizer.readable(t).replace(" ", "␣") for t in loaded.encode(PROMPT))
    ]
    (load_chart,) = [c for c in drawn if "Load per expert" in c["layout"]["title"]["text"]]
    slots = (weights > 0).sum(0)
    assert np.allclose(values(load_chart["data"][0]["x"]), slots / slots.sum())
    expert = int(np.argmin(slots) if (slots > 0).all() else np.flatnonzero(slots)[0])
    at.selectbox(key="explore_expert").set_value(expert).run()
    assert not at.exception and not at.error
    (pre,) = [c for c in charts(at) if c["layout"]["title"]["text"].startswith("<b>Pre-activation")]
    shown, ran = z(pre), weights[:, expert] > 0
    assert np.isnan(shown[~ran]).all() and ran.any()
    assert np.allclose(shown[ran], trace["blocks.1.mlp.experts.hook_pre"][expert].numpy()[ran], atol=1e-5)


def test_backward_and_ablation_on_micro_moe_reach_the_experts():
    at = start("screens/explore.py", model="micro-moe", prompt=PROMPT, view="Backward", bstep="b1-mlp")
    assert not at.exception and not at.error
    assert any(".experts." in grid["label"] for grid in backward_sent(at)["step"]["grids"])  # drawn in the page
    at = start("screens/explore.py", model="micro-moe", prompt=PROMPT, view="Ask why")
    at.radio(key="explore_why_unit").set_value("MLP neuron").run()
    assert not at.exception and not at.error
    assert any("experts.hook_post[" in c["layout"]["title"]["text"] for c in charts(at))


def test_the_dla_command_splits_micro_moes_blocks_per_expert():
    loaded = load("micro-moe")
    token = loaded.tokenizer.pieces[loaded.encode(PROMPT)[1]]
    done = cli("dla", "--model", "micro-moe", "--prompt", PROMPT, "--token", token, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    experts = [c["name"] for c in out["components"] if ".mlp.experts." in c["name"]]
    assert len(experts) == 2 * 2  # two blocks, two chosen experts each
    assert sum(c["value"] for c in out["components"]) == pytest.approx(out["logit"], abs=1e-4)


def test_expert_capacity_drops_the_late_routings_first_come_first_served(random_model):
    """GShard's capacity factor, against the rule written out here in plain Python: each expert
    takes at most ceil(C · positions · top_k / experts) positions, in position order; a dropped
    routing's weight is 0 and is not renormalised. The block's output against the sum of the kept
    experts' outputs (float64, 1e-10). A capacity no expert reaches changes nothing (exact)."""
    import math

    from glassbox.model.engine import ModelConfig, run_trace, variant

    cfg = ModelConfig(
        vocab_size=30,
        n_ctx=16,
        d_model=12,
        n_layers=1,
        n_heads=2,
        d_ff=8,
        norm="rmsnorm",
        activation="silu",
        gated_mlp=True,
        positional="rope",
        attn_bias=False,
        mlp_bias=False,
        n_experts=4,
        experts_top_k=2,
    )
    model = random_model(cfg)
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    names = ["blocks.0.mlp.*", "blocks.0.hook_mlp_out"]
    free = run_trace(model, tokens, names=names)
    capped = run_trace(variant(model, expert_capacity=0.5), tokens, names=names)
    capacity = math.ceil(0.5 * len(tokens) * 2 / 4)  # 3
    expected = free["blocks.0.mlp.hook_expert_weights"].clone()
    taken = [0] * 4
    for t in range(len(tokens)):
        for e in range(4):
            if expected[t, e] > 0:
                taken[e] += 1
                if taken[e] > capacity:
                    expected[t, e] = 0.0
    weights = capped["blocks.0.mlp.hook_expert_weights"]
    assert torch.equal(weights, expected) and (weights != free["blocks.0.mlp.hook_expert_weights"]).any()
    out = torch.einsum("te,etd->td", weights, capped["blocks.0.mlp.experts.hook_out"])
    assert torch.allclose(capped["blocks.0.hook_mlp_out"], out, atol=1e-10)
    roomy = run_trace(variant(model, expert_capacity=4.0), tokens, names=names)
    assert torch.equal(roomy["blocks.0.hook_mlp_out"], free["blocks.0.hook_mlp_out"])
    with torch.no_grad():  # the routed path (nothing captured) drops the same routings
        plain = variant(model, expert_capacity=0.5)(torch.tensor([tokens])).logits[0]
    assert torch.allclose(plain, run_trace(variant(model, expert_capacity=0.5), tokens)["hook_logits"], atol=1e-10)
