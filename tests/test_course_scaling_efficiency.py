"""The scaling and efficiency lessons: each figure against a computation written here.

References and tolerances:
- scaling: the power-law fit against numpy.polyfit on (log N, log L) (1e-10); the fit with an
  irreducible loss against the E, α and N_c it was made from (synthetic losses; within the E grid's
  step); non-embedding parameters against 12·L·d² + 13·L·d + 2d written here and against the
  model's own parameters minus its token and position tables (exact); the held-out loss against
  torch's cross_entropy over the same windows (1e-6); the shipped file's settings against the
  module's constants; Kaplan et al.'s α_N = 0.076 and N_c = 8.8e13 as the paper prints them (eq. 1.1).
- efficiency: flash tiles and ring attention against torch.nn.functional.scaled_dot_product_attention
  (causal, float64, 1e-12); on the model's own q, k, v against the engine's hook_z (float32, 1e-5);
  the elements held against the closed forms 2·Bq·d + 2·Bk·d + Bq·Bk + 2·Bq and, for the ring,
  2·(N − 1)·T·d sent (exact); the tiles computed against nb(nb + 1)/2 (exact); the sliding window's
  mask against a hand-written loop and its count against Σ min(i + 1, w) (exact); GQA's bytes per
  token against 2 · layers · kv_heads · d_head · 2 written out for Llama-3-70B (exact).
- exercises: every answer recomputed from its data (seeds 0, 1, 2), checked right and wrong.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassbox.model.course import efficiency, scaling
from glassbox.model.engine import Transformer, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import start


@pytest.fixture(scope="module")
def loaded():
    return load("default")


@pytest.fixture(scope="module")
def shipped():
    return json.loads(scaling.RUNS_FILE.read_text())


# --- scaling ---------------------------------------------------------------------------------------


def test_the_kaplan_constants_are_as_published():
    # Kaplan et al. 2020, eq. 1.1: α_N ~ 0.076, N_c ~ 8.8 × 10^13 (non-embedding parameters)
    assert scaling.KAPLAN_ALPHA_N == 0.076 and scaling.KAPLAN_N_C == 8.8e13


def test_the_fit_is_numpys_line_in_log_space(shipped):
    n = [r["non_embedding"] for r in shipped["runs"]]
    loss = [r["final_held_out"] for r in shipped["runs"]]
    for part in (slice(None), slice(1, None), slice(0, 3)):
        fit = scaling.fit_power_law(n[part], loss[part])
        slope, intercept = np.polyfit(np.log(n[part]), np.log(loss[part]), 1)
        assert fit["alpha"] == pytest.approx(-slope, abs=1e-10)
        assert math.log(fit["n_c"]) == pytest.approx(intercept / -slope, rel=1e-10)
    exact = scaling.fit_power_law([1e3, 1e5, 1e7], list(scaling.power_law([1e3, 1e5, 1e7], 0.2, 3e9)))
    assert exact["alpha"] == pytest.approx(0.2, abs=1e-12) and exact["n_c"] == pytest.approx(3e9, rel=1e-9)
    assert exact["r2"] == pytest.approx(1.0, abs=1e-12)


def test_the_fit_with_a_floor_recovers_the_law_it_was_made_from():
    n = np.geomspace(1e3, 1e7, 7)
    loss = 1.5 + scaling.power_law(n, 0.3, 1e8)
    fit = scaling.fit_with_floor(list(n), list(loss), points=1000)
    assert fit["floor"] == pytest.approx(1.5, abs=loss.min() / 1000)
    assert fit["alpha"] == pytest.approx(0.3, abs=0.01)


def test_non_embedding_parameters_by_hand_and_by_the_model():
    for d, layers, heads in scaling.SIZES:
        cfg = scaling.config(d, layers, heads, vocab=598, context=64)
        model = Transformer(cfg)
        every = sum(p.numel() for p in model.parameters())
        written_here = 12 * layers * d * d + 13 * layers * d + 2 * d  # d_ff = 4d
        assert scaling.non_embedding_by_hand(cfg) == written_here
        assert scaling.non_embedding_parameters(model) == written_here == every - 598 * d - 64 * d


def test_the_held_out_loss_is_cross_entropy_over_the_windows():
    cfg = scaling.config(16, 1, 2, vocab=50, context=8)
    model = Transformer(cfg).init_weights(3)
    data = torch.randint(50, (100,), generator=torch.Generator().manual_seed(0))
    windows = data[:99].view(11, 9)
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits
    reference = F.cross_entropy(logits.reshape(-1, 50), windows[:, 1:].reshape(-1)).item()
    assert scaling.held_out_loss(model, data, 8) == pytest.approx(reference, abs=1e-6)


def test_the_shipped_runs_are_the_modules_settings(shipped):
    assert shipped["settings"] == scaling.TRAINING
    assert [tuple(x) for x in shipped["sizes"]] == scaling.SIZES and len(shipped["runs"]) >= 5
    assert shipped["command"] == "glassbox course scaling --remeasure" and shipped["torch"] and shipped["seconds"] > 0
    for run, size in zip(shipped["runs"], scaling.SIZES):
        cfg = scaling.config(*size, vocab=shipped["vocab"], context=scaling.TRAINING["context"])
        assert run["non_embedding"] == scaling.non_embedding_by_hand(cfg)
        assert len(run["train_losses"]) == scaling.TRAINING["steps"] and run["held_out"][-1]["step"] == scaling.TRAINING["steps"]
        assert run["final_held_out"] == run["held_out"][-1]["loss"] < math.log(shipped["vocab"])


def test_the_held_out_stories_are_not_training_stories(loaded):
    from glassbox.model.data.stories import corpus

    texts = corpus(30, 0)
    _, held = scaling.story_tokens(loaded.tokenizer, 20, 10, 0)
    end = loaded.tokenizer.token_id("<|endoftext|>")
    expected = [t for t in texts[20:] if t not in set(texts[:20])]
    assert held.tolist() == [i for s in expected for i in loaded.tokenizer.encode(s) + [end]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scaling_exercises(seed):
    by_key = {x.key: x for x in scaling.exercises(seed)}
    p = by_key["predict"].data
    assert by_key["predict"].answer == pytest.approx((p["n_c"] / p["n"]) ** p["alpha"], abs=1e-6)
    a = by_key["alpha"].data
    two_points = -np.polyfit(np.log([a["n1"], a["n2"]]), np.log([a["l1"], a["l2"]]), 1)[0]
    assert by_key["alpha"].answer == pytest.approx(two_points, abs=1e-6)
    h = by_key["halve"].data
    assert (1 / by_key["halve"].answer) ** h["alpha"] == pytest.approx(0.5, rel=1e-9)  # N'/N halves L
    for x in by_key.values():
        assert x.check(f"{float(x.answer):.6g}").right
        assert not x.check(str(float(x.answer) * 1.2 + 0.01)).right


def test_the_scaling_page_fits_what_it_shows(shipped):
    at = start("course/scaling.py")
    assert not at.exception and not at.get("error")
    n = [r["non_embedding"] for r in shipped["runs"]]
    loss = [r["final_held_out"] for r in shipped["runs"]]
    metrics = {m.label: m.value for m in at.get("metric")}
    assert float(metrics["α, fitted here"]) == pytest.approx(scaling.fit_power_law(n, loss)["alpha"], abs=1e-3)
    assert metrics["Kaplan's α_N"] == "0.076"
    at.select_slider(key="scaling_range").set_value((1, len(n) - 1)).run()
    at.checkbox(key="scaling_floor").check().run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.get("metric")}
    assert float(metrics["α, fitted here"]) == pytest.approx(scaling.fit_power_law(n[1:], loss[1:])["alpha"], abs=1e-3)


# --- efficiency ------------------------------------------------------------------------------------


def random_qkv(T: int, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(T, d, generator=g, dtype=torch.float64) for _ in range(3))


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]


def test_flash_tiles_are_plain_attention():
    q, k, v = random_qkv(37)
    reference = sdpa(q, k, v)
    assert (efficiency.plain_attention(q, k, v) - reference).abs().max() < 1e-12
    for bq, bk in ((1, 1), (5, 8), (8, 5), (16, 16), (64, 4)):
        tiled = efficiency.flash_attention(q, k, v, bq, bk)
        assert (tiled.out - reference).abs().max() < 1e-12, (bq, bk)
        assert tiled.held == efficiency.flash_held_formula(37, 8, bq, bk)


def test_flash_counts_against_closed_forms():
    q, k, v = random_qkv(64)
    for b in (4, 8, 16):
        tiled = efficiency.flash_attention(q, k, v, b, b)
        nb = 64 // b
        assert sum(t["computed"] for t in tiled.tiles) == nb * (nb + 1) // 2 and len(tiled.tiles) == nb * nb
        assert tiled.scores_computed == b * b * nb * (nb + 1) // 2
        assert tiled.held == 2 * b * 8 + 2 * b * 8 + b * b + 2 * b
    assert efficiency.plain_held(64, 8) == 4 * 64 * 8 + 64 * 64


def test_ring_attention_is_plain_attention():
    q, k, v = random_qkv(37, seed=1)
    reference = sdpa(q, k, v)
    for devices in (1, 2, 3, 5, 8):
        ring = efficiency.ring_attention(q, k, v, devices)
        assert (ring.out - reference).abs().max() < 1e-12, devices
        assert [[c["key_block"] for c in row] for row in ring.steps] == [
            [(i - s) % devices for i in range(devices)] for s in range(devices)
        ]
    q, k, v = random_qkv(64, seed=2)
    ring = efficiency.ring_attention(q, k, v, 4)
    assert ring.sent == 2 * (4 - 1) * 64 * 8
    assert ring.per_device_held == efficiency.flash_held_formula(64, 8, 16, 16)


def test_on_the_models_head_flash_is_the_engines_attention(loaded):
    tokens = efficiency.story_prompt(loaded)
    assert len(tokens) == loaded.cfg.n_ctx
    block, head = 2, 1
    q, k, v = efficiency.head_qkv(loaded, tokens, block, head)
    z = run_trace(loaded.model, tokens, names=[f"blocks.{block}.attn.hook_z"])[f"blocks.{block}.attn.hook_z"][head]
    tiled = efficiency.flash_attention(q, k, v, 16, 32)
    assert (tiled.out - sdpa(q, k, v)).abs().max() < 1e-12
    assert (tiled.out - z.double()).abs().max() < 1e-5


def test_the_sliding_window_mask_and_its_count():
    for T, w in ((12, 1), (12, 4), (12, 12), (12, 30), (40, 7)):
        loop = torch.zeros(T, T, dtype=torch.bool)
        for i in range(T):
            for j in range(T):
                loop[i, j] = j <= i and i - j < w
        assert torch.equal(efficiency.window_mask(T, w), loop)
        assert efficiency.window_scores(T, w) == sum(min(i + 1, w) for i in range(T)) == int(loop.sum())
        q, k, v = random_qkv(T, seed=3)
        reference = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=loop)[0]
        assert (efficiency.plain_attention(q, k, v, window=w) - reference).abs().max() < 1e-12
    assert efficiency.causal_scores(40) == 40 * 41 // 2


def test_gqa_bytes_per_token():
    rows = {r["kv_heads"]: r for r in efficiency.gqa_table("Llama-3-70B")}
    assert rows[8]["bytes_per_token"] == 2 * 80 * 8 * 128 * 2 and rows[8]["the model's own"]
    assert rows[64]["bytes_per_token"] == 2 * 80 * 64 * 128 * 2 and rows[8]["saving"] == 8
    assert sorted(rows) == [g for g in range(1, 65) if 64 % g == 0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_efficiency_exercises(seed):
    by_key = {x.key: x for x in efficiency.exercises(seed)}
    w = by_key["window"].data
    assert by_key["window"].answer == sum(min(i + 1, w["window"]) for i in range(w["T"]))
    g = by_key["gqa"].data
    per_head = 2 * g["layers"] * g["d_head"] * g["bytes"]
    assert by_key["gqa"].answer == g["tokens"] * per_head * (g["heads"] - g["kv_heads"])
    t = by_key["tile"].data
    assert by_key["tile"].answer == pytest.approx(t["T"] ** 2 / (t["block_q"] * t["block_k"]), rel=1e-12)
    for x in by_key.values():
        assert x.check(f"{x.answer:,}" if isinstance(x.answer, int) else f"{x.answer:.10g}").right
        assert not x.check(str(x.answer + 1)).right


def test_the_efficiency_page_holds_its_results_to_plain_attention():
    at = start("course/efficiency.py")
    assert not at.exception and not at.get("error")
    metrics = {m.label: m.value for m in at.get("metric")}
    assert float(metrics["largest |flash − plain|"]) < 1e-12 and float(metrics["largest |ring − plain|"]) < 1e-12
    assert metrics["elements held at once"] == f"{efficiency.flash_held_formula(128, 32, 16, 32):,}"
    at.select_slider(key="eff_bq").set_value(8).run()
    at.slider(key="eff_window").set_value(5).run()
    at.select_slider(key="eff_devices").set_value(3).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.get("metric")}
    assert metrics["elements held at once"] == f"{efficiency.flash_held_formula(128, 32, 8, 32):,}"
    assert metrics["scores computed"] == f"{efficiency.window_scores(128, 5):,}"
    assert float(metrics["largest |ring − plain|"]) < 1e-12
