"""Issue 44 item 2: the induction lesson's copyable span starts one position after the repeat's
first, whose loss is a uniform guess.

References: each position's loss by torch's cross_entropy of the model's own logits (1e-5) and the
uniform guess ln 64 from math; the heads' weights by indexing the traced patterns here; the page's
metrics and caption in AppTest against those."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassbox.model.course import induction_heads
from glassbox.model.io.checkpoint import load
from glassbox.model.micro import induction
from tests.helpers import charts, shown, start

N = induction_heads.LENGTH


@pytest.fixture(scope="module")
def loaded():
    return load(induction_heads.MODEL)


@pytest.fixture(scope="module")
def heads(loaded):
    return induction.figures(loaded)


def own_losses(loaded, tokens) -> np.ndarray:
    with torch.no_grad():
        logits = loaded.model(torch.tensor([tokens])).logits[0].double()
    return F.cross_entropy(logits[:-1], torch.tensor(tokens[1:]), reduction="none").numpy()


@pytest.mark.parametrize("seed", range(8))
def test_the_repeats_first_position_is_a_uniform_guess_and_the_copyable_span_is_copied(loaded, seed):
    seen = induction_heads.repeated(loaded, seed)
    expected = own_losses(loaded, seen.tokens)
    unseen, first, copyable = induction_heads.split_losses(seen, N)
    assert np.allclose(np.concatenate([unseen, first, copyable]), expected, atol=1e-5)
    assert len(first) == 1 and len(copyable) == N - 2
    uniform = math.log(64)
    assert abs(expected[N] - uniform) < 0.6  # position N (the repeat's first) predicts like a uniform guess
    assert expected[N + 1 : 2 * N - 1].mean() < 0.15 * uniform  # the span the page calls copyable is copied
    assert copyable.mean() == pytest.approx(expected[N + 1 : 2 * N - 1].mean(), abs=1e-5)


def test_why_the_first_is_not_copied_and_the_composition_weights(loaded, heads):
    prev, ind = heads["previous_token_head"], heads["induction_head"]
    seen = induction_heads.repeated(loaded, 0)
    why = induction_heads.first_repeat(seen, N, prev, ind)
    assert why["previous_head_at_0_on_itself"] == 1.0  # position 0 has only itself to look at
    assert why["induction_weight_on_0"] == seen.patterns[ind["block"], ind["head"], N, 0]
    assert why["induction_weight_on_0"] > 0.1 and why["induction_weight_on_1"] < 0.9  # split between 0 and 1
    c = induction_heads.composition(seen, N, N + 3, prev, ind)
    assert c["key"] == 4 and c["source"] == 3 and seen.tokens[c["query"]] == seen.tokens[c["source"]]
    assert c["copied_token"] == seen.tokens[c["query"] + 1]
    assert c["previous_weight"] == seen.patterns[prev["block"], prev["head"], 4, 3] > 0.9
    assert c["induction_weight"] == seen.patterns[ind["block"], ind["head"], N + 3, 4] > 0.5
    assert c["p_next"] == pytest.approx(math.exp(-own_losses(loaded, seen.tokens)[N + 3]), rel=1e-4)


def test_the_page_shows_the_span_and_the_composition(loaded):
    seen = induction_heads.repeated(loaded, 0)
    expected = own_losses(loaded, seen.tokens)
    at = start("course/induction_heads.py")
    metrics = {m.label: m.value for m in at.metric}
    # the chart and the labels count the token predicted: position t's loss is token t + 1's
    assert metrics[f"Mean loss, copyable (tokens {N + 2}–{2 * N - 1})"] == f"{expected[N + 1 : 2 * N - 1].mean():.3f} nats"
    assert metrics[f"Loss on token {N + 1}, the repeat's second"] == f"{expected[N]:.3f} nats"
    text = shown(" ".join(c.value for c in at.caption))
    assert "near a uniform guess" in text and "ln 64 = 4.16" in text
    titles = [c["layout"]["title"]["text"] for c in charts(at) if "title" in c["layout"]]
    assert "<b>How the two heads compose</b>" in titles
    drawing = next(c for c in charts(at) if c["layout"].get("title", {}).get("text") == "<b>How the two heads compose</b>")
    words = " ".join(a.get("text", "") for a in drawing["layout"]["annotations"])
    assert "block 1 (blocks.0), head 2 ([1])" in words and "block 2 (blocks.1), head 1 ([0])" in words
