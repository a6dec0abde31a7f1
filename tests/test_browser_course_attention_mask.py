"""Lessons 1 and 4 in Chromium: the attention lesson's angle slider moved by keyboard, and the mask
lesson's head changed by a click; each shown number checked against numpy computed here."""

import math

import numpy as np
import pytest
from playwright.sync_api import expect

from glassbox.model.course.attention_by_hand import KEYS
from glassbox.model.course.mask import PROMPT
from glassbox.model.engine import run_trace, variant
from glassbox.model.io.checkpoint import load
from tests.browser import settled

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_the_angle_slider_moves_the_weight_of_cat(app_url, page):
    """Reference: numpy's softmax of q·k/√2 over "the", "cat", "sat" for the query of length 2 at
    the angle the slider shows after one ArrowRight (46°), written to 4 decimals as the page does;
    the walk-through button brings back the course's 0.5896."""
    page.goto(app_url + "/course-attention")
    lesson = page.locator(".gb-lesson-attention")  # drawn by the page (app/components/lesson_controls.js)
    table = lesson.locator("table").first
    expect(table).to_contain_text("0.5896", timeout=60_000)  # the walk-through: softmax(0.7, 2.1, 1.3)
    # the slider is a range input (role "slider" implied, not written): focused, as a click on its
    # thumb would, then moved by one step; the page redraws without a rerun
    thumb = lesson.get_by_role("slider", name="Angle of its query (degrees)")
    thumb.focus()
    page.keyboard.press("ArrowRight")
    expect(thumb).not_to_have_value("45", timeout=60_000)
    angle = math.radians(float(thumb.input_value()))
    q = 2.0 * np.array([math.cos(angle), math.sin(angle)])
    weight = softmax(np.array(KEYS[:3]) @ q / math.sqrt(2))[1]
    assert abs(weight - 0.5896) > 5e-4  # a number that differs from the one shown before
    expect(table.locator("tr").filter(has_text="cat")).to_contain_text(f"{weight:.4f}", timeout=5_000)
    lesson.get_by_role("button", name="The course's walk-through").click()  # the preset brings it back
    expect(thumb).to_have_value("45", timeout=5_000)
    expect(table.locator("tr").filter(has_text="cat")).to_contain_text("0.5896", timeout=5_000)


def test_choosing_another_head_updates_its_share_of_later_tokens(app_url, page):
    """Reference: numpy's softmax of the encoder variant's q·kᵀ/√d_head for block 1, head 2 on the
    default prompt, and the mean weight every position (the last's 0 included) puts on later tokens."""
    loaded = load("default")
    ids = loaded.encode(PROMPT)
    trace = run_trace(variant(loaded.model, causal=False), ids, names=["blocks.0.attn.hook_q", "blocks.0.attn.hook_k"])
    q, k = (trace[f"blocks.0.attn.{n}"][1].double().numpy() for n in ("hook_q", "hook_k"))
    pattern = softmax(q @ k.T / math.sqrt(loaded.cfg.d_head))
    share = 100 * np.triu(pattern, 1).sum(-1).mean()

    page.goto(app_url + "/course-mask")
    settled(page)
    text = page.locator("[data-testid='stMarkdownContainer']").filter(has_text="puts on average")
    expect(text).to_contain_text("head 1 ([0]) puts on average", timeout=60_000)
    assert f"{share:.2f}%" not in text.inner_text()
    page.locator("[data-testid='stRadio']").filter(has_text="Head").get_by_text("head 2", exact=True).click()
    expect(text).to_contain_text(f"head 2 ([1]) puts on average {share:.2f}%", timeout=60_000)
