"""Issue 45: the moe lesson's other two remedies for expert collapse, noisy top-k routing and
expert-choice routing (model/course/mixture_of_experts.py), their shipped runs and the page.

References and tolerances:
- expert-choice routing against a hand-written loop: for each sequence and expert, the positions
  sorted by that expert's probability, the first C kept with their probability as weight (exact);
  the tokens left with no expert counted by a loop over positions (exact);
- noisy top-k: the noise is the same for the same seed and different for another (exact), absent in
  eval (the logits equal x·W_router exactly), and equal to ε·softplus(x·W_noise) with ε redrawn from
  torch.Generator(seed) by hand (1e-6);
- the balance statistics (each expert's share of the expert computations, the share of positions
  with no expert, the coefficient of variation) against numpy on the same weights (1e-12);
- the shipped runs: expert choice is perfectly balanced at every step (each share 1/8 to the file's
  4 decimals), every run's shares sum to 1 (1e-3, four-decimal rounding), and a few steps of each
  remedy retrained here agree with the file's first steps (loss 1e-4, shares 1e-3)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassbox.model.course import mixture_of_experts as lesson
from glassbox.model.engine import ModelConfig
from tests.helpers import start


def hand_expert_choice(probs: np.ndarray, capacity: int) -> np.ndarray:
    """A loop: for each sequence and expert, its ``capacity`` highest-scoring positions keep their probability."""
    weights = np.zeros_like(probs)
    batch, positions, experts = probs.shape
    for b in range(batch):
        for e in range(experts):
            order = sorted(range(positions), key=lambda t: -probs[b, t, e])
            for t in order[:capacity]:
                weights[b, t, e] = probs[b, t, e]
    return weights


def test_expert_choice_matches_a_hand_loop_and_counts_tokens_with_no_expert():
    generator = torch.Generator().manual_seed(3)
    probs = torch.randn(3, 10, 4, generator=generator, dtype=torch.float64).softmax(-1)
    capacity = lesson.expert_choice_capacity(10, 4, factor=1.0)  # ceil(10 / 4) = 3
    assert capacity == 3
    weights = lesson.expert_choice(probs, capacity).numpy()
    expected = hand_expert_choice(probs.numpy(), capacity)
    np.testing.assert_array_equal(weights, expected)
    assert ((weights > 0).sum(axis=1) == capacity).all()  # every expert exactly C positions
    unrouted = sum(all(expected[b, t, e] == 0 for e in range(4)) for b in range(3) for t in range(10))
    assert unrouted > 0  # 12 picks over 10 positions leave some position out
    assert lesson.unrouted_share(torch.from_numpy(weights)) == pytest.approx(unrouted / 30, abs=1e-12)


def tiny_config() -> ModelConfig:
    return ModelConfig(
        vocab_size=16,
        n_ctx=8,
        d_model=8,
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
        norm_top_k=True,
    )


def noisy_router(seed: int) -> lesson.NoisyTopK:
    router = lesson.NoisyTopK(tiny_config(), "blocks.0.mlp.", seed)
    with torch.no_grad():
        router.W_router.copy_(torch.randn(8, 4, generator=torch.Generator().manual_seed(1)))
        router.W_noise.copy_(torch.randn(8, 4, generator=torch.Generator().manual_seed(2)))
    return router


def test_noisy_top_k_noise_is_seeded_and_absent_in_eval():
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    plain = x @ noisy_router(0).W_router
    one, same, other = (noisy_router(s).train().logits(x) for s in (7, 7, 8))
    torch.testing.assert_close(one, same, rtol=0, atol=0)
    assert not torch.equal(one, other)
    eps = torch.randn(plain.shape, generator=torch.Generator().manual_seed(7))  # the noise, drawn by hand
    torch.testing.assert_close(one, plain + eps * F.softplus(x @ noisy_router(7).W_noise), rtol=0, atol=1e-6)
    router = noisy_router(7).eval()
    torch.testing.assert_close(router.logits(x), plain, rtol=0, atol=0)
    torch.testing.assert_close(router.logits(x), router.logits(x), rtol=0, atol=0)


def test_balance_statistics_match_numpy():
    rng = np.random.default_rng(0)
    weights = rng.random((2, 6, 4)) * (rng.random((2, 6, 4)) < 0.4)  # about 40% of pairs given a weight
    ran = (weights > 0).reshape(-1, 4)
    shares = ran.sum(0) / ran.sum()
    np.testing.assert_allclose(lesson.slot_shares(torch.from_numpy(weights)).numpy(), shares, atol=1e-12)
    assert lesson.unrouted_share(torch.from_numpy(weights)) == pytest.approx(np.mean(~ran.any(1)), abs=1e-12)
    np.testing.assert_allclose(lesson.imbalance(shares), np.std(shares) / np.mean(shares), atol=1e-12)
    assert lesson.imbalance([0.25] * 4) == 0
    assert lesson.imbalance([1, 0, 0, 0]) == pytest.approx(np.sqrt(3), abs=1e-12)


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(lesson.REMEDIES_FILE.read_text())


def test_the_shipped_runs_are_the_remedies(shipped):
    assert set(shipped["runs"]) == set(lesson.REMEDIES)
    assert shipped["command"] == lesson.REMEDIES_COMMAND
    for run in shipped["runs"].values():
        shares = np.array(run["shares"])
        assert shares.shape == (shipped["settings"]["steps"], 2, 8) and len(run["loss"]) == shares.shape[0]
        np.testing.assert_allclose(shares.sum(-1), 1, atol=1e-3)
    np.testing.assert_allclose(shipped["runs"]["expert_choice"]["shares"], 1 / 8, atol=5e-5)
    assert 0 < np.mean(shipped["runs"]["capacity"]["unrouted"])  # a cap drops tokens; top-2 with noise never does
    assert np.max(shipped["runs"]["noisy"]["unrouted"]) == 0


def test_a_few_steps_retrained_agree_with_the_shipped_start(shipped):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the runs were trained (the file records the threads)
    try:
        for key in ("noisy", "expert_choice"):
            run = shipped["runs"][key]
            assert run["threads"] == 1
            again = lesson.train_remedy(key, steps=2)
            # the learning rate of a step in warm-up does not depend on the number of steps: two steps alike
            np.testing.assert_allclose(again["loss"], run["loss"][:2], atol=1e-4)
            np.testing.assert_allclose(again["shares"], run["shares"][:2], atol=1e-3)
    finally:
        torch.set_num_threads(threads)


def test_the_table_reads_the_runs():
    runs = lesson.remedy_runs()
    table = lesson.remedy_table(runs)
    assert list(table) == ["none", "balance", *lesson.REMEDIES]
    end = runs["none"]["shares"][-50:].mean(0)
    assert table["none"]["largest_share"] == [round(float(v), 4) for v in end.max(-1)]
    assert table["expert_choice"]["imbalance"] == [0.0, 0.0]


def test_page_draws_the_remedies():
    at = start("course/mixture_of_experts.py")
    assert not at.exception
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "Four remedies, trained side by side" in " ".join(h.value for h in at.subheader)
    assert "got no expert at all" in text and lesson.REMEDIES_COMMAND in text
    assert len(at.table) >= 3
