"""Lessons 8 (zero and one layer) and 9 (induction heads), on the shipped micro-models.

References and tolerances:
- the zero-layer continuations against numpy: the counted bigram rows and the softmax of W_E · W_U
  from the stored weights (1e-9 and 1e-6, float32 weights);
- the page's claims about the losses: the zero-layer model's validation loss within 0.05 nats of
  the counted table's entropy (the floor: they differ by the KL divergence and by the held-out
  text), and the one-layer model's well below it;
- the induction lesson's stripe share against numpy indexing of the traced pattern (1e-12), its
  per-position losses against torch's cross_entropy of the model's own logits (1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from playwright.sync_api import expect
from safetensors.numpy import load_file

from glassbox.model.course import induction_heads, zero_one_layer
from glassbox.model.io.assets import asset
from glassbox.model.io.checkpoint import load
from glassbox.model.micro import attention_only, bigram
from glassbox.model.micro.common import story_tokens
from tests.browser import settled


def test_zero_layer_continuations_are_the_counted_and_learned_tables():
    zero = load(zero_one_layer.BIGRAM)
    ids = story_tokens(bigram.N_STORIES, bigram.SEED)[1].numpy()
    w = load_file(str(asset(zero_one_layer.BIGRAM) / "model.safetensors"))
    logits = w["embed.W_E"].astype(np.float64) @ w["unembed.W_U"].astype(np.float64)
    token = zero.tokenizer.token_id(" cat")
    after = ids[1:][ids[:-1] == token]
    counted = np.bincount(after, minlength=zero.cfg.vocab_size) / len(after)
    learned = np.exp(logits[token] - logits[token].max())
    learned /= learned.sum()
    rows = zero_one_layer.continuations(zero, token)
    assert rows[0][0] == int(counted.argmax())
    for i, c, m in rows:
        assert c == pytest.approx(counted[i], abs=1e-9) and m == pytest.approx(learned[i], abs=1e-6)


def test_the_zero_layer_model_stops_at_the_floor_and_one_block_goes_below():
    loss = zero_one_layer.losses(load(zero_one_layer.BIGRAM), load(zero_one_layer.ONE_LAYER))
    assert loss["zero_layer"] == pytest.approx(loss["bigram_floor"], abs=0.05)
    assert loss["one_layer"] < loss["bigram_floor"] - 0.5


def test_the_induction_stripe_and_the_losses_by_hand():
    loaded = load(induction_heads.MODEL)
    n = induction_heads.LENGTH
    seen = induction_heads.repeated(loaded, 3)
    assert seen.tokens[:n] == seen.tokens[n:]
    pattern = seen.patterns[1, 0]
    assert induction_heads.stripe_share(pattern, n) == pytest.approx(
        pattern[np.arange(n, 2 * n), np.arange(1, n + 1)].mean(), abs=1e-12
    )
    with torch.no_grad():
        logits = loaded.model(torch.tensor([seen.tokens])).logits[0].double()
    expected = F.cross_entropy(logits[:-1], torch.tensor(seen.tokens[1:]), reduction="none").numpy()
    unseen, first, repeat = induction_heads.split_losses(seen, n)
    assert np.allclose(np.concatenate([unseen, first, repeat]), expected, atol=1e-5)
    assert repeat.mean() < 0.25 * unseen.mean()


# one Chromium interaction per lesson, the shown numbers against the computations above


@pytest.mark.browser
@pytest.mark.subprocess
def test_choosing_a_head_lists_its_skip_trigrams(app_url, page):
    one = load(zero_one_layer.ONE_LAYER)
    rows = attention_only.figures(one)["skip_trigrams"]
    page.goto(app_url + "/course-zero-one-layer")
    settled(page)
    table = page.locator("[data-testid='stTable']").first
    expect(table).to_contain_text(f"{rows[0][0]['ov']:.3f}", timeout=90_000)
    page.get_by_text("head 4", exact=True).click()
    expect(table).to_contain_text(f"{rows[3][0]['ov']:.3f}", timeout=60_000)
    expect(table).to_contain_text(one.pieces[rows[3][0]["raised"]].strip(), timeout=60_000)


@pytest.mark.browser
@pytest.mark.subprocess
def test_another_sequence_gives_its_own_losses(app_url, page):
    loaded = load(induction_heads.MODEL)
    n = induction_heads.LENGTH
    seen = induction_heads.repeated(loaded, 5)
    with torch.no_grad():
        logits = loaded.model(torch.tensor([seen.tokens])).logits[0].double()
    copyable = F.cross_entropy(logits[n + 1 : 2 * n - 1], torch.tensor(seen.tokens[n + 2 :]), reduction="none").mean().item()
    page.goto(app_url + "/course-induction")
    settled(page)
    seed = page.get_by_label("Random sequence (seed)", exact=True)
    expect(seed).to_have_value("0", timeout=90_000)
    seed.fill("5")
    seed.press("Enter")
    expect(page.locator("[data-testid='stMetricValue']").nth(1)).to_have_text(f"{copyable:.3f} nats", timeout=60_000)


@pytest.mark.browser
@pytest.mark.subprocess
def test_route_sends_another_sentence_through_the_router(app_url, page):
    """Reference: the balance loss of block 1 on the sentence the button picks, written out in numpy
    from the router's probabilities (N · Σ f_i · P_i, f from the top 2)."""
    from glassbox.model.course.mixture_of_experts import BALANCED, route, sentences

    loaded = load(BALANCED)
    sentence = sentences()[1]  # the first click's
    probs = route(loaded, loaded.encode(sentence)).probs[0]
    top2 = np.argsort(-probs, axis=-1)[:, :2]
    f = np.array([(top2 == e).any(-1).mean() for e in range(probs.shape[-1])])
    expected = probs.shape[-1] * (f * probs.mean(0)).sum()
    page.goto(app_url + "/course-moe")
    settled(page)
    expect(page.get_by_text("N · Σ fᵢ · Pᵢ =")).to_be_visible(timeout=90_000)
    page.get_by_role("button", name="Route another sentence").click()
    expect(page.get_by_label("Prompt", exact=True)).to_have_value(sentence, timeout=60_000)
    expect(page.get_by_text("N · Σ fᵢ · Pᵢ =")).to_contain_text(f"{expected:.4f}", timeout=60_000)


def test_a_capacity_factor_drops_the_routings_over_each_experts_cap():
    """Reference: each block's top 2 of the router's probabilities (in the capped run: a cap in block
    1 changes what block 2 reads), renormalised, with GShard's rule applied here in numpy (each
    expert keeps its first ceil(C · tokens · 2 / 8) positions); the kept weights unchanged (1e-6)."""
    import math

    from glassbox.model.course.mixture_of_experts import BALANCED, PROMPT, route

    loaded = load(BALANCED)
    tokens = loaded.encode(PROMPT)
    capped = route(loaded, tokens, 1.0)
    capacity = math.ceil(1.0 * len(tokens) * 2 / 8)
    assert capped.capacity == capacity
    for block in range(loaded.cfg.n_layers):
        probs = capped.probs[block]
        top = np.argsort(-probs, axis=-1)[:, :2]
        chosen = np.zeros_like(probs)
        np.put_along_axis(chosen, top, np.take_along_axis(probs, top, -1), -1)
        expected = chosen / chosen.sum(-1, keepdims=True)
        routed = expected > 0
        for e in range(8):
            expected[np.flatnonzero(routed[:, e])[capacity:], e] = 0.0
        assert np.allclose(capped.weights[block], expected, atol=1e-6)
        assert capped.dropped[block].sum() == routed.sum() - (expected > 0).sum() > 0
