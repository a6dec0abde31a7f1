"""The generation tree (model/engine/generation_tree.py, model/api/tree.py), its CLI
(`glassbox generate --alternatives K --force POSITION:TOKEN`) and the explorer's ``ids`` link.

References: a fresh generation of the forced prefix (the engine's plain generate, its own prefill, no
cache shared); the model run on the whole sequence without a cache; token counts taken by a forward
pre-hook on the embedding (the test's own, on a model loaded for this module); numpy's softmax."""

import json

import numpy as np
import pytest
import torch

import glassbox as gb
from glassbox.model.engine import GlassboxError
from glassbox.model.engine.generation_tree import MAX_PATHS
from tests.helpers import cli, start

PROMPT = "Lily had a"
SETTINGS = dict(temperature=0.9, top_k=40, top_p=0.95, seed=3)
N = 12


@pytest.fixture(scope="module")
def model():
    return gb.load("default", dtype="float64")


@pytest.fixture(scope="module")
def tree(model):
    return model.generate(PROMPT, N, **SETTINGS, tree=True)


def no_cache_logits(model, tokens: list[int]) -> torch.Tensor:
    """The logits after ``tokens``' last position, the whole sequence run at once (no cache)."""
    with torch.no_grad():
        return model.module(torch.tensor([tokens])).logits[0, -1]


def test_a_forced_branch_is_a_fresh_generation_of_the_forced_prefix(model, tree):
    """Reference: the engine's plain generation of prompt + the path up to the branch + the forced
    token, with the same settings and seed, in float64: the same tokens, log-probabilities to 1e-10."""
    n_prompt = len(tree.prompt)
    for step in (0, 4, N - 1):
        position = n_prompt + step
        drawn = tree.paths[0].steps[step]
        token = next(int(t) for t in drawn.before.argsort(descending=True) if t != drawn.token_id)  # any token can be forced
        branch = tree.branch(position, token)
        assert branch.parent == 0 and branch.position == position and branch.steps[step].forced
        assert branch.token_ids[:step] == tree.paths[0].token_ids[:step] and branch.token_ids[step] == token
        prefix = tree.tokens(0)[:position] + [token]
        fresh = model.generate(prefix, N - step - 1, **SETTINGS) if step < N - 1 else []
        assert branch.token_ids[step + 1 :] == [t.token_id for t in fresh]
        for mine, theirs in zip(branch.steps[step + 1 :], fresh):
            assert np.log(mine.p) == pytest.approx(np.log(theirs.p), abs=1e-10)
            assert np.log(mine.p_model) == pytest.approx(np.log(theirs.p_model), abs=1e-10)
        assert tree.branch(position, token) is branch  # the same branch again: the one already made


def test_a_branch_computes_only_the_positions_after_it(model):
    """Reference: the positions the first block sees, counted by the test's own pre-hook: a sample
    computes the prompt and every new token but the last; a branch at new token j of n only the
    forced token and those after it, n − j − 1 (its cache up to j is the path's)."""
    seen = []
    handle = model.module.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    try:
        tree = model.generate(PROMPT, N, **SETTINGS, tree=True)
        n_prompt = len(tree.prompt)
        assert sum(seen) == n_prompt + N - 1 == tree.paths[0].computed
        for step in (2, 7, N - 1):
            seen.clear()
            drawn = tree.paths[0].steps[step].token_id
            branch = tree.branch(n_prompt + step, (drawn + 1) % model.cfg.vocab_size)
            assert sum(seen) == N - step - 1 == branch.computed
            assert all(n == 1 for n in seen)  # one new token at a time, never the prefix again
    finally:
        handle.remove()


def test_the_alternatives_are_the_samplers_distribution(model, tree):
    """Reference: numpy's softmax of the no-cache logits / temperature, cut to the top-k, then to the
    smallest set reaching top-p, renormalised (1e-12); and the model's softmax before the settings."""
    for step in (0, 5):
        position = len(tree.prompt) + step
        logits = no_cache_logits(model, tree.tokens(0)[:position]).numpy()
        scaled = np.exp((logits - logits.max()) / SETTINGS["temperature"])
        p = scaled / scaled.sum()
        order = np.argsort(-p, kind="stable")[: SETTINGS["top_k"]]
        kept = p[order] / p[order].sum()
        n_keep = int(np.sum(np.cumsum(kept) - kept < SETTINGS["top_p"]))
        after = np.zeros_like(p)
        after[order[:n_keep]] = p[order[:n_keep]] / p[order[:n_keep]].sum()
        model_p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        alternatives = tree.alternatives(position, k=n_keep + 5)
        assert [a["token_id"] for a in alternatives] == list(order[:n_keep])  # nonzero ones only
        for a in alternatives:
            assert a["p"] == pytest.approx(after[a["token_id"]], abs=1e-12)
            assert a["p_model"] == pytest.approx(model_p[a["token_id"]], abs=1e-12)


def test_two_seeds_part_where_their_tokens_first_differ(tree):
    """Reference: the first index where the two id lists differ, found here by a plain loop."""
    other = tree.sample(7)
    assert other.parent is None and other.sampling.seed == 7 and tree.sample(7) is other
    a, b = tree.paths[0].token_ids, other.token_ids
    first = next((i for i in range(N) if a[i] != b[i]), None)
    assert tree.parting(0, other.index) == (None if first is None else len(tree.prompt) + first)
    assert tree.parting(0, 0) is None


def test_the_trace_and_the_lens_of_a_path(model, tree):
    """Reference: the sampler's own distributions (drawn with the cache): the path's trace gives
    the same softmax at every position before a new token (1e-10, float64), and the lens's last
    point, the model's own prediction, the token's probability there (1e-6: the lens is float32)."""
    drawn = tree.paths[0].steps[4]
    token = next(int(t) for t in drawn.before.argsort(descending=True) if t != drawn.token_id)
    branch = tree.branch(len(tree.prompt) + 4, token)  # its own branch: not one another test may not have made
    trace = tree.trace(branch.index)
    assert trace.tokens == tree.tokens(branch.index)
    n_prompt = len(tree.prompt)
    for i, step in enumerate(branch.steps):
        softmax = torch.softmax(trace["hook_logits"][n_prompt - 1 + i].double(), -1)
        assert torch.allclose(softmax, step.before, atol=1e-10)
    lens = tree.lens(branch.index)
    assert len(lens["labels"]) == model.cfg.n_layers + 1 and len(lens["p"]) == N
    for i, step in enumerate(branch.steps):
        assert lens["p"][i][-1] == pytest.approx(step.p_model, abs=1e-6)
        top = [t == step.token for t in lens["top"][i]]
        committed = lens["committed"][i]
        assert committed is None if not top[-1] else (all(top[committed:]) and (committed == 0 or not top[committed - 1]))


def test_bad_branches_say_why(tree):
    n_prompt = len(tree.prompt)
    with pytest.raises(GlassboxError, match="not a generated one"):
        tree.branch(n_prompt - 1, 5)
    with pytest.raises(GlassboxError, match="not in the vocabulary"):
        tree.branch(n_prompt, 10**6)
    with pytest.raises(GlassboxError, match="no path"):
        tree.branch(n_prompt, 5, path=999)


def test_a_tree_keeps_at_most_max_paths(model):
    tree = model.generate("Lily", 2, temperature=0, tree=True)
    for seed in range(1, MAX_PATHS):
        tree.sample(seed)  # greedy: every seed a new root path of the same tokens
    with pytest.raises(GlassboxError, match=f"at most {MAX_PATHS}"):
        tree.sample(MAX_PATHS)


def test_the_cli_forces_a_token_and_prints_the_alternatives(model):
    """Reference: the library's tree, same settings (float32 here, as the CLI loads the model)."""
    f32 = gb.load("default")
    tree = f32.generate(PROMPT, 8, seed=1, tree=True)
    position = len(tree.prompt) + 3
    branch = tree.branch(position, " old")
    out = cli("generate", "--prompt", PROMPT, "--max-new-tokens", "8", "--seed", "1", "--force", f"{position}: old",
              "--alternatives", "3", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["completion"] == tree.text(branch.index)
    assert [s["token_id"] for s in printed["steps"]] == branch.token_ids
    assert [s["forced"] for s in printed["steps"]] == [i == 3 for i in range(8)]
    assert [p["positions_computed"] for p in printed["paths"]] == [len(tree.prompt) + 7, 4]
    for s in printed["steps"]:
        assert [a["token_id"] for a in s["alternatives"]] == [a["token_id"] for a in tree.alternatives(s["position"], 1, 3)]
    bad = cli("generate", "--prompt", PROMPT, "--max-new-tokens", "4", "--force", "1: old")
    assert bad.returncode != 0 and "not a generated one" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_explorer_opens_a_generations_own_tokens():
    """Reference: the tokenizer. " c" + "at" decode to " cat", which encodes as one token: the
    explorer's link (ids=) keeps the two the model wrote, and a prompt changed after drops them."""
    f32 = gb.load("default")
    ids = [f32.token_id(" c"), f32.token_id("at")]
    assert len(f32.encode(" cat")) == 1
    at = start("screens/explore.py", model="default", prompt=" cat", ids=",".join(map(str, ids))).run()
    assert not at.exception
    assert any("this prompt: 2 tokens" in c.value for c in at.caption)
    at = start("screens/explore.py", model="default", prompt=" cat", ids="1,2").run()  # not " cat": encoded
    assert any("this prompt: 1 tokens" in c.value for c in at.caption)


def test_the_tree_bench_measures_a_branch_beside_a_fresh_generation():
    """Smoke test of `glassbox bench --tree`'s measure on a tiny random model (its own check: the
    branch's tokens equal the fresh generation's, else it exits). Reference for the counts: a
    branch at new token j of n computes n − j − 1 positions, a fresh one its prefix (prompt, j kept, the forced one) and then n − j − 2."""
    from glassbox.model.engine import ModelConfig
    from glassbox.model.tools.tree_bench import RandomTextModel, measure

    rows = measure(RandomTextModel(ModelConfig(vocab_size=64, n_ctx=32, d_model=32, n_layers=2, n_heads=4, d_ff=64)), 8, 6, 1)
    assert [r["new_token"] for r in rows] == [0, 3, 5]
    assert [r["branch_positions"] for r in rows] == [5, 2, 0]
    assert [r["fresh_positions"] for r in rows] == [
        (8 + 0 + 1) + (5 - 1),
        (8 + 3 + 1) + (2 - 1),
        0,
    ]  # prefill, then all but the last drawn
    assert rows[0]["ratio"] > 0 and rows[-1]["ratio"] is None


def test_every_explorer_view_opens_on_a_generated_position():
    """The playground's link to a path (ids=, pos= a new token's position) in one session, every
    view in turn: each draws without an error, on the path's own tokens (the caption's count)."""
    from glassbox.app.explore import VIEWS

    f32 = gb.load("default")
    tree = f32.generate(PROMPT, 6, seed=2, tree=True)
    branch = tree.branch(len(tree.prompt) + 2, " old")
    ids = tree.tokens(branch.index)
    at = start(
        "screens/explore.py",
        model="default",
        prompt=f32.tokenizer.decode(ids),
        ids=",".join(map(str, ids)),
        pos=str(len(ids) - 2),
    ).run()
    assert at.session_state["explore_pos"] == len(ids) - 2
    for view in VIEWS:
        at.segmented_control(key="explore_view").set_value(view).run()
        assert at.session_state["explore_view"] == view and not at.exception and not at.error, view
        assert any(f"this prompt: {len(ids)} tokens" in c.value for c in at.caption), view


def test_a_branch_is_a_fresh_generation_on_rope_shared_keys_and_a_window():
    """The same reference as above (a fresh generation of the forced prefix, float64, 1e-10) on a
    random llama-like model: RoPE, 2 key/value heads for 4 query heads, and a 4-position window on
    block 0, where the cache is sliced at the branch and extended after it."""
    from glassbox.model.engine import ModelConfig
    from glassbox.model.engine.generation_tree import GenerationTree
    from glassbox.model.engine.sampling import Sampling, generate
    from glassbox.model.tools.tree_bench import RandomTextModel
    from tests.helpers import build_random_model

    cfg = ModelConfig(vocab_size=50, n_ctx=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, norm="rmsnorm",
                      activation="silu", gated_mlp=True, positional="rope", tie_embeddings=False, window=4, local_layers=(0,))  # fmt: skip
    loaded = RandomTextModel(cfg)
    loaded.model = build_random_model(cfg, seed=3)
    sampling = Sampling(temperature=1.3, seed=5)
    tree = GenerationTree(loaded, list(range(6)), 10, sampling)
    branch = tree.branch(6 + 3, (tree.paths[0].token_ids[3] + 7) % 50)
    fresh = list(generate(loaded, tree.tokens(branch.index)[:10], 6, sampling))
    assert branch.token_ids[4:] == [t.token_id for t in fresh]
    for mine, theirs in zip(branch.steps[4:], fresh):
        assert np.log(mine.p_model) == pytest.approx(np.log(theirs.p_model), abs=1e-10)
