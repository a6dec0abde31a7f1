"""Lesson 11, encoders, decoders and cross-attention, on the seq2seq micro-model.

References and tolerances:
- the lesson's output against the teacher-forced argmax: fed the start token and its own output
  but the last, the model's most likely token at every position is that output (greedy generation
  through the KV cache against one uncached pass; exact ids);
- its patterns against a separate run_seq2seq_trace of the same source and output (1e-12), the
  aligned share against numpy indexing of the traced pattern (1e-12), the encoder's weight on later
  keys above zero and the decoder's exactly zero (the mask);
- the page: Random source draws the next seed's source; the shown output and anti-diagonal share
  against the same computation done here (the page's 3 digits).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from playwright.sync_api import expect

from glassbox.model.course import cross_attention
from glassbox.model.engine import run_seq2seq_trace
from glassbox.model.engine.seq2seq import shift_right
from glassbox.model.io.checkpoint import load
from glassbox.model.micro import seq2seq
from tests.browser import settled


@pytest.fixture(scope="module")
def loaded():
    return load(cross_attention.MODEL)


def test_the_output_is_the_teacher_forced_argmax_and_the_patterns_are_the_traced_ones(loaded):
    source = cross_attention.random_source(4)
    seen = cross_attention.reverse(loaded, source)
    assert len(seen.output) == len(source)
    with torch.no_grad():
        logits = loaded.model(
            torch.tensor([source]), shift_right(torch.tensor([seen.output]), loaded.cfg.decoder_start_token_id)
        ).logits[0]
    assert logits.argmax(-1).tolist() == seen.output
    assert seen.correct == (seen.output == source[::-1])

    trace = run_seq2seq_trace(loaded.model, source, seen.output, names=["*hook_pattern"])
    n = len(source)
    for block in range(loaded.cfg.n_decoder_layers):
        cross = trace[f"decoder.blocks.{block}.cross_attn.hook_pattern"].double().numpy()
        assert np.abs(seen.cross[block] - cross).max() < 1e-12
        by_hand = cross[:, np.arange(n), n - 1 - np.arange(n)].mean(-1)
        assert np.abs(seq2seq.aligned_share(seen.cross[block]) - by_hand).max() < 1e-12
        decoder = trace[f"decoder.blocks.{block}.attn.hook_pattern"].double().numpy()
        assert np.abs(seen.decoder[block] - decoder).max() < 1e-12
        assert np.triu(decoder, 1).sum() == 0  # the causal mask: no weight on a later target position
    for block in range(loaded.cfg.n_layers):
        encoder = trace[f"encoder.blocks.{block}.attn.hook_pattern"].double().numpy()
        assert np.abs(seen.encoder[block] - encoder).max() < 1e-12
        assert np.triu(encoder, 1).sum() > 0.1  # no mask: source positions read later ones


def test_the_lesson_figures_name_the_shipped_models_best_head(loaded):
    figure = cross_attention.figures()
    assert figure["best_head"] == seq2seq.figures(loaded)["best_head"]
    assert figure["example"]["decoder_weight_after_query"] == 0
    assert figure["example"]["encoder_weight_after_query"] > 0.05


@pytest.mark.browser
@pytest.mark.subprocess
def test_random_source_is_reversed_and_its_share_shown(app_url, page, loaded):
    """Reference: the first click's source (seed 1) reversed here, its best head's anti-diagonal share
    recomputed by numpy indexing of a separate trace."""
    source = cross_attention.random_source(1)
    seen = cross_attention.reverse(loaded, source)
    best = seq2seq.figures(loaded)["best_head"]
    n = len(source)
    pattern = (
        run_seq2seq_trace(loaded.model, source, seen.output, names=["decoder.*cross_attn.hook_pattern"])[
            f"decoder.blocks.{best['block']}.cross_attn.hook_pattern"
        ]
        .double()
        .numpy()[best["head"]]
    )
    share = pattern[np.arange(n), n - 1 - np.arange(n)].mean()
    page.goto(app_url + "/course-cross-attention")
    settled(page)
    expect(page.get_by_text("Weight on the anti-diagonal", exact=True)).to_be_visible(timeout=90_000)
    page.get_by_role("button", name="Random source").click()
    typed = " ".join(loaded.pieces[t] for t in source)
    expect(page.get_by_label("Source (syllables, separated by spaces)", exact=True)).to_have_value(typed, timeout=60_000)
    output = " ".join(loaded.pieces[t] for t in seen.output)
    expect(page.locator("p", has_text=re.compile("Output:"))).to_contain_text(output, timeout=60_000)
    expect(page.locator("[data-testid='stMetricValue']").first).to_have_text(f"{share:.3f}", timeout=60_000)
