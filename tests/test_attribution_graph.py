"""The attribution graph (model/analysis/attribution_graph.py), on random float64 models with random
transcoders (the graph's arithmetic does not depend on how well they reconstruct). References: the
real model's own pass (the replacement model with its errors reproduces it, 1e-10); completeness,
which holds only if the frozen model is affine in its sources (1e-10); and central finite
differences of the frozen replacement model, source by source, for every edge (1e-7 relative)."""

import pytest
import torch

from glassbox.model.analysis.attribution_graph import ReplacementModel, attribution_graph
from glassbox.model.engine import GlassboxError, ModelConfig, run_trace
from glassbox.model.engine.sae import SparseAutoencoder
from tests.helpers import build_random_model

GPT2_LIKE = ModelConfig(vocab_size=40, n_ctx=16, d_model=16, n_layers=2, n_heads=4, d_ff=32, attn_bias=True, mlp_bias=True)
LLAMA_LIKE = ModelConfig(vocab_size=40, n_ctx=16, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=32, norm="rmsnorm",
                         activation="silu", gated_mlp=True, positional="rope", tie_embeddings=False)  # fmt: skip
TOKENS, TARGET = [3, 7, 1, 9, 4, 11], 5


def transcoders(cfg: ModelConfig, d_sae: int = 10, reads: str = "ln2.hook_out", kind: str = "transcoder"):
    g = torch.Generator().manual_seed(1)
    made = []
    for i in range(cfg.n_layers):
        weights = [torch.randn(cfg.d_model, d_sae, generator=g, dtype=torch.float64) * 0.5, torch.randn(d_sae, generator=g, dtype=torch.float64) * 0.2 - 0.1,
                   torch.randn(d_sae, cfg.d_model, generator=g, dtype=torch.float64) * 0.3, torch.randn(cfg.d_model, generator=g, dtype=torch.float64) * 0.1]  # fmt: skip
        threshold = torch.full((d_sae,), 0.05, dtype=torch.float64) if kind.startswith("jumprelu") else None
        skip = torch.randn(cfg.d_model, cfg.d_model, generator=g, dtype=torch.float64) * 0.1 if "skip" in kind else None
        made.append(
            SparseAutoencoder(kind, f"blocks.{i}.{reads}", f"blocks.{i}.hook_mlp_out", *weights, threshold=threshold, W_skip=skip)
        )
    return made


@pytest.fixture(params=["gpt2-like", "llama-like", "skip transcoders"])
def setup(request):
    cfg = LLAMA_LIKE if request.param == "llama-like" else GPT2_LIKE
    return build_random_model(cfg, seed=2), transcoders(cfg, kind="skip_transcoder" if "skip" in request.param else "transcoder")


def test_the_graph_is_complete_and_reproduces_the_model(setup):
    model, tcs = setup
    graph = attribution_graph(model, TOKENS, tcs, TARGET)
    real_logit = float(run_trace(model, TOKENS, names=["hook_logits"])["hook_logits"][-1, TARGET])
    assert graph.target_value == pytest.approx(real_logit, abs=1e-12)
    assert graph.completeness() < 1e-10
    features = [k for k, n in enumerate(graph.nodes) if n.kind == "feature"]
    assert features, "random transcoders with these biases have active features"
    for k in features:  # the edges into a feature and its bias are its pre-activation: its activation (ReLU)
        assert float(graph.edges[k].sum() + graph.bias[k]) == pytest.approx(graph.nodes[k].value, abs=1e-10)
    # no edge runs backwards: into a feature only from earlier blocks' features and errors, earlier positions
    for k in features:
        target = graph.nodes[k]
        for j, source in enumerate(graph.nodes[:-1]):
            if source.kind in ("feature", "error") and (source.block >= target.block or source.position > target.position):
                assert graph.edges[k, j] == 0


def test_every_edge_is_a_finite_difference_of_the_frozen_replacement_model(setup):
    model, tcs = setup
    replacement = ReplacementModel(model, TOKENS, tcs, TARGET)
    graph = attribution_graph(model, TOKENS, tcs, TARGET)
    rows = [k for k, n in enumerate(graph.nodes) if n.kind == "feature"] + [len(graph.nodes) - 1]
    eps = 1e-5

    def scaled(node, factor: float) -> torch.Tensor:
        """The frozen replacement model's targets with one source node scaled by ``factor``."""
        values = {name: v.clone() for name, v in replacement.sources.items()}
        if node.kind == "embedding":
            values["hook_embed"][node.position] *= factor
        elif node.kind == "feature":
            values[f"acts.{node.block}"][node.position, node.feature] *= factor
        else:
            values[f"errors.{node.block}"][node.position] *= factor
        with torch.no_grad():
            return replacement.targets(values)

    for j, node in enumerate(graph.nodes[:-1]):
        difference = (scaled(node, 1 + eps) - scaled(node, 1 - eps)) / (2 * eps)  # d target / d(scale of the source) = its edge
        assert torch.allclose(difference, graph.edges[rows, j], rtol=1e-7, atol=1e-9), node.label


def test_pruning_keeps_the_most_influential_nodes_and_the_logit():
    model = build_random_model(GPT2_LIKE, seed=2)
    graph = attribution_graph(model, TOKENS, transcoders(GPT2_LIKE, kind="jumprelu_transcoder"), TARGET)
    assert graph.completeness() < 1e-10
    influence = graph.influence()
    assert torch.all(influence[:-1] >= -1e-12)
    kept = graph.pruned(0.5)
    assert kept[-1] == len(graph.nodes) - 1 and len(kept) < len(graph.nodes)
    dropped = [i for i in range(len(graph.nodes) - 1) if i not in kept]
    assert min(float(influence[i]) for i in kept[:-1]) >= max(float(influence[i]) for i in dropped) - 1e-12
    assert graph.pruned(1.0)[:-1] == [i for i in range(len(graph.nodes) - 1) if influence[i] > 0] or len(
        graph.pruned(1.0)
    ) >= len(kept)


def test_transcoders_that_do_not_fit_say_why():
    model = build_random_model(GPT2_LIKE, seed=2)
    with pytest.raises(GlassboxError, match="One transcoder per block"):
        attribution_graph(model, TOKENS, transcoders(GPT2_LIKE)[:1], TARGET)
    wrong = transcoders(GPT2_LIKE)
    wrong[1] = transcoders(GPT2_LIKE)[0]
    with pytest.raises(GlassboxError, match="must read block 1"):
        attribution_graph(model, TOKENS, wrong, TARGET)


def test_an_intervention_is_run_by_the_real_model_and_predicted_by_the_graph():
    """Real effect. Reference: the model run with a plain torch forward hook on the block's MLP
    that adds the change times the feature's decoder row (1e-10). Prediction. Reference: the frozen
    replacement model, forward passes only: the feature scaled, each later block's features moved
    by their pre-activations' change, block by block, then the logit (1e-9); directly, the logit
    with only the feature scaled (1e-10)."""
    from glassbox.model.analysis.attribution_graph import intervene

    model, tcs = build_random_model(GPT2_LIKE, seed=2), transcoders(GPT2_LIKE)
    graph = attribution_graph(model, TOKENS, tcs, TARGET)
    replacement = ReplacementModel(model, TOKENS, tcs, TARGET)
    node = next(k for k, n in enumerate(graph.nodes) if n.kind == "feature" and n.block == 0)
    feature = graph.nodes[node]
    for factor in (0.0, 2.5):
        result = intervene(model, TOKENS, tcs, graph, node, factor)
        change = (factor - 1) * feature.value

        def add(module, args, output, change=change):
            output = output.clone()
            output[0, feature.position] += change * tcs[0].W_dec[feature.feature]
            return output

        handle = model.blocks[0].mlp.register_forward_hook(add)
        try:
            with torch.no_grad():
                hooked = model(torch.tensor([TOKENS])).logits[0, -1].double()
        finally:
            handle.remove()
        assert result.logit_after == pytest.approx(float(hooked[TARGET]), abs=1e-10)
        assert torch.allclose(result.probs_after, hooked.softmax(-1), atol=1e-12)

        rows = [k for k, n in enumerate(graph.nodes) if n.kind == "feature"]
        values = {name: v.clone() for name, v in replacement.sources.items()}
        values["acts.0"][feature.position, feature.feature] *= factor
        with torch.no_grad():
            direct = replacement.targets(values)[-1]
            before = replacement.targets(replacement.sources)
            for block in range(1, GPT2_LIKE.n_layers):  # later features move by their pre-activation's change
                now = replacement.targets(values)
                for r, k in enumerate(rows):
                    n = graph.nodes[k]
                    if n.block == block:
                        values[f"acts.{block}"][n.position, n.feature] = n.value + (now[r] - before[r])
            carried = replacement.targets(values)[-1]
        assert result.predicted_direct == pytest.approx(float(direct), abs=1e-10)
        assert result.predicted == pytest.approx(float(carried), abs=1e-9)
    with pytest.raises(GlassboxError, match="Only a feature"):
        intervene(model, TOKENS, tcs, graph, 0, 0.0)


def test_a_demeaned_graph_explains_the_logit_less_the_mean_logit():
    """circuit-tracer's target. References: the real pass's logits (1e-10), completeness (1e-10), and
    for an intervention, the real model with the feature switched off by a plain torch forward hook
    (1e-10): the change of the logit less the mean logit."""
    from glassbox.model.analysis.attribution_graph import intervene

    model, tcs = build_random_model(GPT2_LIKE, seed=2), transcoders(GPT2_LIKE)
    graph = attribution_graph(model, TOKENS, tcs, TARGET, demeaned=True)
    logits = run_trace(model, TOKENS, names=["hook_logits"])["hook_logits"][-1]
    assert graph.target_value == pytest.approx(float(logits[TARGET] - logits.mean()), abs=1e-10)
    assert graph.completeness() < 1e-10
    node = next(k for k, n in enumerate(graph.nodes) if n.kind == "feature" and n.block == 0)
    feature = graph.nodes[node]

    def off(module, args, output):
        output = output.clone()
        output[0, feature.position] -= feature.value * tcs[0].W_dec[feature.feature]
        return output

    handle = model.blocks[0].mlp.register_forward_hook(off)
    try:
        with torch.no_grad():
            hooked = model(torch.tensor([TOKENS])).logits[0, -1].double()
    finally:
        handle.remove()
    assert intervene(model, TOKENS, tcs, graph, node, 0.0).logit_after == pytest.approx(
        float(hooked[TARGET] - hooked.mean()), abs=1e-10
    )


def test_the_graph_bench_measures_a_graph_batched_and_one_by_one():
    """Smoke test of `glassbox bench --graph`'s measure: the same graph both ways (its node count and
    completeness, 1e-6 in float32), on the default model and its shipped transcoders."""
    import glassbox
    from glassbox.model.tools.graph_bench import measure

    loaded = glassbox.load("default")
    transcoders, tokens = loaded._transcoders("default-transcoders"), loaded.tokens("Once upon a time")
    batched, one_by_one = measure(loaded, transcoders, tokens, 8), measure(loaded, transcoders, tokens, 1)
    assert batched["nodes"] == one_by_one["nodes"] > len(tokens) + 1
    assert batched["completeness"] < 1e-6 and one_by_one["completeness"] < 1e-6 and batched["seconds"] > 0


def test_top_activations_are_every_features_largest_with_where_they_are():
    """Reference: every position of every sequence read through each transcoder, sorted by hand (1e-12)."""
    from glassbox.model.analysis.feature_examples import top_activations

    model, tcs = build_random_model(GPT2_LIKE, seed=2), transcoders(GPT2_LIKE)
    sequences = [TOKENS, [5, 1, 8], [2, 2, 9, 13, 0, 4, 7]]
    top = top_activations(model, tcs, sequences, k=4)
    for i, t in enumerate(tcs):
        acts = [t.encode(t.rows(run_trace(model, tokens, names=[t.reads])[t.reads])) for tokens in sequences]
        for feature in range(t.d_sae):
            every = sorted((float(a[p, feature]) for a in acts for p in range(len(a))), reverse=True)
            got = top.of(i, feature)
            assert [value for value, _, _ in got] == pytest.approx([v for v in every if v > 0][:4], abs=1e-12)
            for value, s, p in got:  # each reported place holds its value
                assert float(acts[s][p, feature]) == pytest.approx(value, abs=1e-12)
