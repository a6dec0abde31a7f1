"""The explorer's quantities (model/analysis.py), each against an independent reference:
numpy's SVD for the PCA, brute-force cosines, transformers' GPT-2 hidden states for the logit
lens, torch autograd and central finite differences for the gradients, plain einsum sums for
the per-head dot products and the weight gradients written as products. float64 models: 1e-10;
float32 against transformers: 1e-5."""

import copy

import numpy as np
import pytest
import torch

from glassbox.model.analysis import (
    attention_pair,
    backward_steps,
    contribution_norms,
    dead_neurons,
    downsample,
    embedding_pca,
    gradient_norms,
    length_correlation,
    logit_lens,
    nearest_tokens,
    norm_prefixes,
    norm_summary,
    parts,
    recomputed_weight_gradient,
    saliency,
    tile,
    to_csv,
    top_neurons,
    weight_gradient_product,
)
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, Target, run_trace
from glassbox.model.io.checkpoint import load
from glassbox.model.serving import (
    Needs,
    TraceCache,
    capture_plan,
    check_budget,
    full_trace_bytes,
    held_bytes,
    trace_bytes,
    trace_names,
    working_bytes,
)
from glassbox.model.serving.sizing import most_tokens

MODERN = ModelConfig(
    vocab_size=50,
    n_ctx=16,
    d_model=24,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    d_ff=40,
    norm="rmsnorm",
    activation="silu",
    gated_mlp=True,
    positional="rope",
    attn_bias=False,
    mlp_bias=False,
    tie_embeddings=False,
)
RELU_UNTIED = ModelConfig(
    vocab_size=30, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32, activation="relu", tie_embeddings=False
)

GEMMA_LIKE = ModelConfig(
    vocab_size=40,
    n_ctx=16,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=1,
    d_head=6,
    d_ff=24,
    norm="rmsnorm",
    gated_mlp=True,
    positional="rope",
    attn_bias=False,
    mlp_bias=False,
    qk_norm=True,
    post_norms=True,
    attn_scale=0.3,
    attn_softcap=2.0,
    final_softcap=5.0,
    window=3,
    local_layers=[0],
    embed_scale=4.0,
    rotary_dim=4,
    parallel_block=False,
)
CONFIGS = {"modern": MODERN, "relu-untied": RELU_UNTIED, "gemma-like": GEMMA_LIKE}


@pytest.fixture(scope="module")
def worked():
    loaded = load("worked-example")
    return loaded, run_trace(loaded.model, loaded.encode("the cat sat on the"), backward=True)


@pytest.fixture(scope="module", params=["worked-example", *CONFIGS])
def model_and_trace(request, random_model):
    if request.param == "worked-example":
        model, tokens = load("worked-example").model, [0, 1, 2, 3, 0]
    else:
        model = random_model(CONFIGS[request.param])
        tokens = [3, 7, 1, 7, 9, 2, 11, 4]
    return model, run_trace(model, tokens, backward=True)


def test_parts_add_up_to_every_parameter_once(model_and_trace):
    model, _ = model_and_trace
    listed = [name for part in parts(model) for name, _ in part.params]
    assert sorted(listed) == sorted(n for n, _ in model.named_parameters())
    assert sum(p.count for p in parts(model)) == sum(p.numel() for p in model.parameters())


def test_full_trace_bytes_predicts_a_trace_it_never_probed(model_and_trace):
    model, _ = model_and_trace
    for length in (4, model.cfg.n_ctx):
        tokens = [i % model.cfg.vocab_size for i in range(length)]
        assert full_trace_bytes(model, length) == trace_bytes(run_trace(model, tokens, backward=True))
    every = set(trace_names(model))
    assert every == set(run_trace(model, [1, 2], backward=True, target=Target(0)).names())


PARTIAL = [
    (("blocks.*.attn.hook_pattern",), False),
    (("hook_probs",), False),
    (("blocks.1.hook_resid_post",), True),
    (("blocks.0.*",), True),
    ((), False),
]


def test_held_bytes_predicts_a_partial_capture_it_never_ran(model_and_trace):
    """Reference: the bytes run_trace's own trace holds, for captures as the views ask for them."""
    model, _ = model_and_trace
    for names, backward in PARTIAL:
        for length in (5, model.cfg.n_ctx):
            tokens = [i % model.cfg.vocab_size for i in range(length)]
            trace = run_trace(model, tokens, names=names, backward=backward, target=Target(1) if backward else None)
            assert held_bytes(model, length, names, backward) == trace_bytes(trace), (names, backward, length)


def test_working_bytes_bound_what_the_backward_graph_saves(model_and_trace):
    """Reference: every tensor autograd saves for the backward pass, as torch's saved-tensor hooks
    see them (distinct storages), for one traced pass and for a batch of eight sequences."""
    model, _ = model_and_trace
    length = model.cfg.n_ctx
    ids = torch.tensor([[i % model.cfg.vocab_size for i in range(length)]] * 8)
    for batch in (1, 8):
        saved = {}

        def pack(tensor):
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()  # noqa: B023 (hooks of this pass only)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(ids[:batch]).logits
        assert logits.requires_grad and saved
        parameters = sum(p.nbytes for p in model.parameters())  # saved by reference, not allocated
        assert sum(saved.values()) - parameters <= working_bytes(model, length, backward=True, batch=batch)


def test_most_tokens_is_the_longest_prompt_within_the_budget():
    """Reference: every length tried one by one."""
    for cost in (lambda n: 7 * n * n + 100, lambda n: 50 * n, lambda n: 10**9):
        for budget in (99, 100, 107, 800, 5000, 10**6):
            fits = [n for n in range(1, 65) if cost(n) <= budget]
            assert most_tokens(cost, budget, 64) == (max(fits) if fits else 0), (budget,)
    with pytest.raises(GlassboxError, match=r"of 40 tokens needs 11.0 KiB .* allows 1000 B .* At most 11 tokens fit here"):
        check_budget(lambda n: 7 * n * n + 100, 40, 1000, 64, "A trace")
    assert check_budget(lambda n: 7 * n * n + 100, 11, 1000, 64, "A trace") == 947


def test_capture_plan_keeps_everything_under_the_budget_and_only_the_view_over_it():
    model = load("worked-example").model
    needs = Needs(("blocks.0.attn.*",), backward=False)
    assert capture_plan(model, 5, needs) == (None, True)
    assert capture_plan(model, 5, needs, budget=1000) == (("blocks.0.attn.*",), False)


def test_trace_cache_computes_once_and_drops_the_least_recently_used():
    model = load("worked-example").model
    traces = {n: run_trace(model, [0] * n) for n in (1, 2, 3)}
    calls = []

    def compute(n):
        return lambda: calls.append(n) or traces[n]

    cache = TraceCache(max_bytes=trace_bytes(traces[2]) + trace_bytes(traces[3]))
    assert cache.get("a", compute(2)) is traces[2] and cache.get("a", compute(2)) is traces[2]
    cache.get("b", compute(3))
    cache.get("a", compute(2))  # "a" is now the most recent
    cache.get("c", compute(1))  # over the budget: "b", the least recently used, goes
    assert calls == [2, 3, 1] and len(cache) == 2
    cache.get("a", compute(2))
    cache.get("b", compute(3))
    assert calls == [2, 3, 1, 3]
    assert cache.nbytes() <= cache.max_bytes
    small = TraceCache(max_bytes=1)  # a trace larger than the whole cache is handed out, not kept
    assert small.get("x", compute(3)) is traces[3]
    assert len(small) == 0 and small.nbytes() == 0


def test_downsample_takes_block_means_and_leaves_small_arrays_alone():
    values = np.arange(7 * 5, dtype=np.float64).reshape(7, 5)
    same, rows, cols = downsample(values, 10, 10)
    assert np.array_equal(same, values) and list(rows) == list(range(7)) and list(cols) == list(range(5))
    small, rows, cols = downsample(values, 3, 2)
    for i, (r0, r1) in enumerate(zip(rows, list(rows[1:]) + [7])):
        for j, (c0, c1) in enumerate(zip(cols, list(cols[1:]) + [5])):
            assert small[i, j] == pytest.approx(values[r0:r1, c0:c1].mean())
    masked = np.array([[1.0, -np.inf], [3.0, 5.0]])
    assert downsample(masked, 1, 1)[0][0, 0] == pytest.approx(3.0)  # −∞ is left out of the mean
    grid = tile([[np.ones((4, 4)), 2 * np.ones((4, 4))]], 2)
    assert grid.shape == (2, 5) and np.isnan(grid[:, 2]).all() and (grid[:, :2] == 1).all() and (grid[:, 3:] == 2).all()


def test_embedding_pca_matches_numpy_svd():
    W = torch.randn(300, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    W[:, 3] *= 5
    coords, explained = embedding_pca(W)
    X = W.cpu().numpy() - W.cpu().numpy().mean(0)
    u, s, vt = np.linalg.svd(X, full_matrices=False)
    reference = X @ vt[:2].T
    assert np.allclose(np.abs(coords), np.abs(reference), atol=1e-4)  # float32 coordinates; signs are arbitrary
    assert np.allclose(explained, (s**2 / (s**2).sum())[:2], atol=1e-10)
    # the later components, and the embeddings scaled to unit length first (reference: the same SVD)
    coords, explained = embedding_pca(W, first=1)
    assert np.allclose(np.abs(coords), np.abs(X @ vt[1:3].T), atol=1e-4)
    assert np.allclose(explained, (s**2 / (s**2).sum())[1:3], atol=1e-10)
    U = W.numpy() / np.linalg.norm(W.numpy(), axis=1, keepdims=True)
    U = U - U.mean(0)
    u, s, vt = np.linalg.svd(U, full_matrices=False)
    coords, explained = embedding_pca(W, unit=True)
    assert np.allclose(np.abs(coords), np.abs(U @ vt[:2].T), atol=1e-5)
    assert np.allclose(explained, (s**2 / (s**2).sum())[:2], atol=1e-10)


def test_the_raw_pc1_follows_the_embeddings_lengths_when_lengths_dominate():
    """Directions at random, lengths spread 1..20 (as frequent tokens grow long): the raw PC1 is
    the length (|r| near 1); with lengths nearly equal (5 ± 0.05), it is not."""
    g = torch.Generator().manual_seed(2)
    directions = torch.randn(400, 8, generator=g, dtype=torch.float64) + 3.0  # a shared mean direction
    directions = directions / directions.norm(dim=1, keepdim=True)
    lengths = torch.linspace(1, 20, 400, dtype=torch.float64)[:, None]
    assert length_correlation(directions * lengths) > 0.95
    assert length_correlation(directions * (5 + 0.1 * torch.rand(400, 1, generator=g, dtype=torch.float64))) < 0.5


def test_nearest_tokens_are_the_brute_force_cosine_ranking():
    W = torch.randn(40, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    X = W.cpu().numpy()
    cos = [float(X[i] @ X[7] / np.linalg.norm(X[i]) / np.linalg.norm(X[7])) for i in range(40)]
    expected = sorted((i for i in range(40) if i != 7), key=lambda i: -cos[i])[:5]
    got = nearest_tokens(W, 7, 5)
    assert [i for i, _ in got] == expected
    assert [c for _, c in got] == pytest.approx([cos[i] for i in expected], abs=1e-12)


def test_attention_pair_is_the_recorded_score(model_and_trace):
    model, trace = model_and_trace
    cfg = model.cfg
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            pair = attention_pair(trace, cfg, layer, head, 4, 2)
            assert pair.score == pytest.approx(pair.recorded, abs=1e-10)
            expected = float(np.dot(pair.q, pair.k)) * (cfg.attn_scale or 1 / np.sqrt(cfg.d_head))
            if cfg.attn_softcap is not None:
                expected = cfg.attn_softcap * np.tanh(expected / cfg.attn_softcap)
            assert pair.score == pytest.approx(expected, abs=1e-12)


def test_norm_summary_recomputes_the_recorded_statistics(model_and_trace):
    model, trace = model_and_trace
    cfg = model.cfg
    assert len(norm_prefixes(cfg)) == (4 if cfg.post_norms else 2) * cfg.n_layers + 1
    for prefix, source in norm_prefixes(cfg):
        s = norm_summary(trace, cfg, prefix, source)
        x = trace[source].cpu().numpy()
        if cfg.norm == "layernorm":
            assert np.allclose(s["input mean"], s["mean (recorded)"], atol=1e-12)
            assert np.allclose(s["scale (recorded)"], np.sqrt(x.var(-1) + cfg.norm_eps), atol=1e-12)
            assert np.allclose(s["normalized mean"], 0, atol=1e-12)
        else:
            assert np.allclose(s["scale (recorded)"], np.sqrt((x**2).mean(-1) + cfg.norm_eps), atol=1e-12)


def test_top_neurons_rank_what_each_neuron_writes(model_and_trace):
    model, trace = model_and_trace
    neurons = top_neurons(model, trace, 1, 3, k=5)
    W_out = model.blocks[1].mlp.W_out.detach().cpu().numpy()
    post = trace["blocks.1.mlp.hook_post"][3].cpu().numpy()
    writes = [np.linalg.norm(post[n] * W_out[n]) for n in range(len(post))]  # the neuron's actual vector into the stream
    assert [n.write for n in neurons] == pytest.approx(sorted(writes, reverse=True)[:5], abs=1e-12)
    assert [n.write for n in neurons] == pytest.approx([writes[n.index] for n in neurons], abs=1e-12)  # ties: any order


def test_contribution_norms_add_back_to_the_residual_stream(model_and_trace):
    model, trace = model_and_trace
    labels, norms = contribution_norms(trace, model.cfg)
    assert len(labels) == norms.shape[0] == 1 + 2 * model.cfg.n_layers
    last = model.cfg.n_layers - 1
    total = trace["blocks.0.hook_resid_pre"] + sum(
        trace[f"blocks.{i}.hook_attn_out"] + trace[f"blocks.{i}.hook_mlp_out"] for i in range(model.cfg.n_layers)
    )
    assert torch.allclose(total, trace[f"blocks.{last}.hook_resid_post"], atol=1e-12)
    assert np.allclose(norms[2], trace["blocks.0.hook_mlp_out"].norm(dim=-1).cpu().numpy(), atol=1e-12)


def test_logit_lens_matches_transformers_hidden_states(gpt2_dir):
    """Reference: GPT2LMHeadModel's hidden_states[i] (the stream before block i), its own ln_f
    and lm_head. The lens's last point is the model's own output."""
    import transformers

    loaded = load(str(gpt2_dir))
    tokens = loaded.encode("The cat sat on the mat; the dog sat on the log.")
    trace = run_trace(loaded.model, tokens, names=["blocks.*.hook_resid_*", "hook_probs"])
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(gpt2_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = hf(torch.tensor([tokens]), output_hidden_states=True).hidden_states
        expected = [hf.lm_head(hf.transformer.ln_f(h))[0].softmax(-1) for h in hidden[:-1]]
    target = tokens[3]
    lens = logit_lens(loaded.model, trace, target, k=3)
    assert len(lens.labels) == loaded.cfg.n_layers + 1
    for point, reference in enumerate(expected):
        assert np.allclose(lens.chosen[point], reference[:, target].cpu().numpy(), atol=1e-5)
        assert np.allclose(lens.top_probs[point], reference.topk(3, dim=-1).values.cpu().numpy(), atol=1e-5)
    assert np.allclose(lens.top_probs[-1], trace["hook_probs"].topk(3, dim=-1).values.cpu().numpy(), atol=1e-6)
    window = logit_lens(loaded.model, trace, target, k=3, positions=[2, 5])
    assert np.array_equal(window.top_ids, lens.top_ids[:, [2, 5]])


def test_every_backward_step_names_gradients_the_trace_has(model_and_trace):
    model, trace = model_and_trace
    steps = backward_steps(model)
    assert len({s.key for s in steps}) == len(steps) == 2 + 6 * model.cfg.n_layers + (1 if model.cfg.final_norm else 0)
    part_keys = {p.key for p in parts(model)}
    for step in steps:
        assert step.part in part_keys, step.key
        for name in step.names:
            assert name in trace.grads, (step.key, name)
        for weight in step.weights:
            assert GRAD + weight in trace.grads, (step.key, weight)
    named = {w for s in steps for w in s.weights}
    assert named == {n for n, _ in model.named_parameters()}  # every weight's gradient appears in some step


def test_masked_scores_get_exactly_zero_gradient_though_the_pattern_does_not(model_and_trace):
    model, trace = model_and_trace
    future = torch.ones(8 if model.cfg.vocab_size != 8 else 5, 8 if model.cfg.vocab_size != 8 else 5).triu(1).bool()
    g_pattern, g_scores = trace[GRAD + "blocks.0.attn.hook_pattern"], trace[GRAD + "blocks.0.attn.hook_scores"]
    assert (g_scores[:, future] == 0).all()
    assert (g_pattern[:, future] != 0).any()


def test_weight_gradients_are_the_products_they_are_written_as(model_and_trace):
    model, trace = model_and_trace
    checked = 0
    for name, _ in model.named_parameters():
        rebuilt = recomputed_weight_gradient(trace, model.cfg, name)
        if rebuilt is None:
            assert weight_gradient_product(model.cfg, name) is None
            continue
        assert torch.allclose(rebuilt, trace[GRAD + name], atol=1e-10), name
        checked += 1
    assert checked == 6 * model.cfg.n_layers + (0 if model.cfg.tie_embeddings else 1) + (
        model.cfg.n_layers if model.cfg.gated_mlp else 0
    )


def test_gradient_norms_follow_the_residual_stream(model_and_trace):
    model, trace = model_and_trace
    labels, norms = gradient_norms(trace, model.cfg)
    assert labels[0] == "embeddings" and norms.shape == (model.cfg.n_layers + 1, len(trace.tokens))
    assert np.allclose(norms[0], saliency(trace)[1], atol=1e-12)  # ∂L/∂resid_pre(0) is ∂L/∂embedding


def test_dead_relu_neurons_get_exactly_zero_gradient(worked):
    loaded, trace = worked
    cfg = loaded.cfg
    found = 0
    for layer in range(cfg.n_layers):
        dead = dead_neurons(trace, cfg, layer)
        pre, grad_pre = trace[f"blocks.{layer}.mlp.hook_pre"], trace[GRAD + f"blocks.{layer}.mlp.hook_pre"]
        assert (grad_pre[pre <= 0] == 0).all()
        assert dead.weight_grad_max == 0.0
        assert list(dead.neurons) == [n for n in range(cfg.d_ff) if (pre[:, n] <= 0).all()]
        found += len(dead.neurons)
    assert found > 0  # the article's example has dead neurons to show


def test_saliency_is_the_first_order_change_of_the_loss(random_model):
    """Central finite difference: scale one token's embedding row by (1 ± ε) in a copy of an
    untied float64 model (tied, the row would also move the head) with distinct tokens."""
    model = random_model(RELU_UNTIED)
    tokens = [3, 7, 1, 9, 2, 11]
    trace = run_trace(model, tokens, backward=True)
    signed, _ = saliency(trace)
    eps = 1e-6
    for position in (0, 3, 4):
        losses = []
        for factor in (1 + eps, 1 - eps):
            copy_ = copy.deepcopy(model)
            with torch.no_grad():
                copy_.embed.W_E[tokens[position]] *= factor
            losses.append(run_trace(copy_, tokens).loss)
        assert (losses[0] - losses[1]) / (2 * eps) == pytest.approx(signed[position], abs=1e-7)


def test_to_csv_round_trips():
    array = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7
    text = to_csv(array, ("head", "query", "key"))
    lines = text.strip().splitlines()
    assert lines[0] == "head,query,key,value" and len(lines) == 25
    rows = np.array([[float(x) for x in line.split(",")] for line in lines[1:]])
    rebuilt = np.zeros_like(array)
    rebuilt[rows[:, 0].astype(int), rows[:, 1].astype(int), rows[:, 2].astype(int)] = rows[:, 3]
    assert np.array_equal(rebuilt, array)  # full precision
    single = (np.arange(6, dtype=np.float32) / 3).reshape(2, 3)
    values = [float(line.split(",")[-1]) for line in to_csv(single, ("position", "d_model")).splitlines()[1:]]
    assert np.array_equal(np.array(values, dtype=np.float32), single.ravel())


def test_equal_probabilities_rank_in_token_id_order_in_every_view():
    """On the worked example p(sat) = p(mat) exactly (0.170596…, float64): the logit lens and the
    sampler's top list (the overview's and the playground's bars) both put sat (id 2) before mat
    (id 5). Reference: the tie itself, checked exact first."""
    from glassbox.model.engine.sampling import top

    loaded = load("worked-example")
    trace = run_trace(loaded.model, [0, 1, 2, 3, 0])
    probs = trace["hook_probs"][-1]
    assert probs[2].item() == probs[5].item()
    assert [t["token_id"] for t in top(probs, loaded.tokenizer.pieces, 2)] == [2, 5]
    lens = logit_lens(loaded.model, trace, 5, k=2)
    assert list(lens.top_ids[-1, -1]) == [2, 5]
