"""Exact sampling and the KV cache (model/sampling.py, KVCache in model/transformer.py)."""

import math

import pytest
import torch

from glassbox.model.engine import GlassboxError, KVCache, ModelConfig, Transformer
from glassbox.model.engine.sampling import Sampling, distributions, generate, kv_cache_bytes
from glassbox.model.io.checkpoint import load


@pytest.fixture(scope="module")
def gpt2(gpt2_dir):
    return load(str(gpt2_dir))


def ids(sample) -> list[int]:
    return [t.token_id for t in sample]


@pytest.mark.parametrize(
    "cfg",
    [
        ModelConfig(
            vocab_size=50,
            n_ctx=32,
            d_model=32,
            n_layers=2,
            n_heads=4,
            d_ff=64,
            activation="gelu_tanh",
            attn_bias=True,
            mlp_bias=True,
        ),
        ModelConfig(
            vocab_size=50,
            n_ctx=32,
            d_model=32,
            n_layers=2,
            n_heads=4,
            n_kv_heads=2,
            d_ff=64,
            norm="rmsnorm",
            activation="silu",
            gated_mlp=True,
            positional="rope",
            tie_embeddings=False,
        ),
    ],
    ids=["gpt2-like", "llama-like"],
)
def test_kv_cache_gives_the_logits_of_recomputing_the_prefix(cfg):
    """Reference: the same model run on the whole prefix at every step, no cache (float64, ≤1e-12)."""
    model = Transformer(cfg).init_weights(seed=1, std=0.3).double().eval()
    tokens = torch.randint(0, 50, (1, 20), generator=torch.Generator().manual_seed(0))
    cache = KVCache(cfg.n_layers)
    with torch.no_grad():
        cached = [model(tokens[:, :7], cache=cache).logits[0, -1]]  # a prompt, then one token at a time
        for t in range(7, 20):
            cached.append(model(tokens[:, t : t + 1], cache=cache).logits[0, -1])
        full = [model(tokens[:, :t]).logits[0, -1] for t in range(7, 21)]
    assert cache.length == 20
    for a, b in zip(cached, full):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_generation_uses_the_cache_and_reports_its_size(gpt2):
    steps = list(generate(gpt2, "The cat sat", 5, Sampling(temperature=0)))
    prompt_len = len(gpt2.encode("The cat sat"))
    assert [s.position for s in steps] == list(range(prompt_len, prompt_len + 5))
    assert [s.cache_bytes for s in steps] == [kv_cache_bytes(gpt2, n) for n in range(prompt_len, prompt_len + 5)]
    assert kv_cache_bytes(gpt2, 1) == 2 * gpt2.cfg.n_layers * gpt2.cfg.d_model * 4
    # greedy generation with the cache equals argmax of a full recompute at every step
    tokens = gpt2.encode("The cat sat")
    for step in steps:
        with torch.no_grad():
            logits = gpt2.model(torch.tensor([tokens], device=gpt2.model.device)).logits[0, -1]
        assert step.token_id == int(torch.argmax(logits))
        tokens.append(step.token_id)


def test_greedy_is_deterministic_and_equals_top_k_1_and_a_tiny_top_p(gpt2):
    greedy = ids(generate(gpt2, "Rain fell", 12, Sampling(temperature=0, seed=1)))
    assert ids(generate(gpt2, "Rain fell", 12, Sampling(temperature=0, seed=2))) == greedy
    assert ids(generate(gpt2, "Rain fell", 12, Sampling(temperature=1, top_k=1, seed=3))) == greedy
    assert ids(generate(gpt2, "Rain fell", 12, Sampling(temperature=1, top_p=1e-9, seed=4))) == greedy


def test_a_seed_reproduces_a_sample(gpt2):
    a = ids(generate(gpt2, "Rain fell", 15, Sampling(temperature=1.5, seed=7)))
    assert ids(generate(gpt2, "Rain fell", 15, Sampling(temperature=1.5, seed=7))) == a
    others = {tuple(ids(generate(gpt2, "Rain fell", 15, Sampling(temperature=1.5, seed=s)))) for s in range(8, 12)}
    assert len(others | {tuple(a)}) > 1


def test_filters_keep_what_they_promise():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    before, after = distributions(logits, Sampling(temperature=1))
    assert torch.allclose(before, torch.softmax(logits.double(), -1)) and torch.allclose(after, before)
    _, after = distributions(logits, Sampling(top_k=3))
    assert (after > 0).sum() == 3 and math.isclose(after.sum().item(), 1.0)
    assert torch.allclose(after[:3], before[:3] / before[:3].sum())
    _, after = distributions(logits, Sampling(top_p=0.7))
    kept = int((after > 0).sum())  # the smallest set of most likely tokens with mass >= 0.7
    assert before[:kept].sum() >= 0.7 > before[: kept - 1].sum()
    _, after = distributions(logits, Sampling(top_k=100))  # k capped at the vocabulary
    assert (after > 0).all()
    _, sharp = distributions(logits, Sampling(temperature=0.5))
    _, flat = distributions(logits, Sampling(temperature=2.0))
    assert sharp[0] > before[0] > flat[0]
    _, tiny = distributions(logits * 1000, Sampling(temperature=1e-6))  # stays finite
    assert torch.isfinite(tiny).all() and tiny[0] == 1.0


def test_sampled_frequencies_match_the_filtered_distribution():
    """Chi-square goodness of fit of 20,000 seeded draws (the engine's own sampling path)
    against the filtered distribution; df = 3, critical value 16.27 at p = 0.001."""
    loaded = load("worked-example")
    sampling = Sampling(temperature=0.7, top_k=4)
    first = [next(generate(loaded, "the cat sat on the", 1, Sampling(0.7, 4, 1.0, seed))) for seed in range(2000)]
    after = first[0].after
    counts = torch.bincount(torch.tensor([t.token_id for t in first]), minlength=8).double()
    # more draws from one generator, as generate makes them
    generator = torch.Generator().manual_seed(123)
    counts += torch.bincount(torch.multinomial(after, 18_000, replacement=True, generator=generator), minlength=8)
    kept = after > 0
    assert int(kept.sum()) == 4 and counts[~kept].sum() == 0  # filtered tokens are never drawn
    expected = after[kept] * counts.sum()
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    assert chi2 < 16.27, chi2
    assert sampling.top_k == 4


@pytest.mark.parametrize(
    "sampling,max_new,prompt,message",
    [
        (Sampling(temperature=-0.5), 5, "the cat", "Temperature"),
        (Sampling(top_p=0.0), 5, "the cat", "top-p"),
        (Sampling(top_p=1.5), 5, "the cat", "top-p"),
        (Sampling(top_k=0), 5, "the cat", "top-k"),
        (Sampling(), 5, "", "empty"),
        (Sampling(), 2, "the cat sat on the", "context"),
        (Sampling(), 0, "the cat", "at least one"),
    ],
)
def test_bad_settings_are_clear_errors(sampling, max_new, prompt, message):
    with pytest.raises(GlassboxError, match=message):
        list(generate(load("worked-example"), prompt, max_new, sampling))
