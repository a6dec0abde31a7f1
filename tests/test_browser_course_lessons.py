"""Lessons 2, 3, 6 and 7 in Chromium: one interaction each, the shown number checked against a
computation written here."""

import re

import numpy as np
import pytest
from playwright.sync_api import expect

from glassbox.model.course.real_model_configs import MODEL
from tests.browser import settled

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


def opened(page, url: str, first_number: str | re.Pattern):
    """The page, once its script has run and a number it computes is shown."""
    page.goto(url)
    settled(page)
    expect(page.locator("[data-testid='stMetricValue']").first).to_have_text(first_number, timeout=60_000)


def nudge(page, slider_name: str, before: str) -> float:
    """One ArrowRight on a slider (a range input: focused as a click would); its new value."""
    thumb = page.get_by_role("slider", name=slider_name)
    thumb.focus()
    page.keyboard.press("ArrowRight")
    expect(thumb).not_to_have_value(before, timeout=60_000)
    return float(thumb.input_value())


def test_the_score_multiplier_moves_the_jacobian_norm(app_url, page):
    """Reference: numpy's ‖diag(p) − p·pᵀ‖ for the softmax of [1, 0.0125, −0.0375] × c. The slider is the
    page's own (app/components/lesson_controls.js): the norm is redrawn by the page."""

    def norm(c):
        p = np.exp(c * np.array([1.0, 0.0125, -0.0375]))
        p /= p.sum()
        return np.linalg.norm(np.diag(p) - np.outer(p, p))

    page.goto(app_url + "/course-sqrt-dk")
    value = page.locator(".gb-lesson-saturation .gb-metric-value")
    expect(value).to_have_text(f"{norm(1.0):.6f}", timeout=60_000)
    c = nudge(page, "Score multiplier c", "1")
    assert c == pytest.approx(1.25)
    expect(value).to_have_text(f"{norm(c):.6f}", timeout=5_000)


def test_the_offset_slider_keeps_the_rotation_exact(app_url, page):
    """The offset is the page's own slider (app/components/lesson_controls.js): it redraws the error."""
    page.goto(app_url + "/course-positions")
    lesson = page.locator(".gb-lesson-positions")
    expect(lesson.locator(".gb-metric-value")).to_have_text(re.compile(r"e-1\d$"), timeout=60_000)  # k = 1: rounding
    k = nudge(page, "Offset k", "1")
    assert k == 2
    expect(lesson.locator(".gb-metric-label")).to_contain_text("PE(pos + 2)", timeout=5_000)
    assert float(lesson.locator(".gb-metric-value").inner_text()) < 1e-12


def test_a_generated_token_adds_one_row_per_layer(app_url, page):
    """Reference: one more position in 4 layers' keys and values: 2 × 4 × 4 heads × 32 × 4 bytes."""
    opened(page, app_url + "/course-kv-cache", "20,480")  # "the cat sat on the": 5 positions
    page.get_by_role("button", name="Generate a token").click()
    expect(page.locator("[data-testid='stMetricValue']").first).to_have_text(f"{20_480 + 2 * 4 * 4 * 32 * 4:,}", timeout=60_000)


def test_choosing_a_model_shows_its_parameters(app_url, page):
    """Reference: transformers' count of Mixtral-8x7B equals the catalog's (tests/test_course_cache_and_model_sizes.py)."""
    page.goto(app_url + "/course-key-figures")
    settled(page)
    parts = page.locator("[data-testid='stTable']").first
    expect(parts).to_contain_text(f"{MODEL['GPT-2 small'].parameters:,}", timeout=60_000)
    page.locator("[data-testid='stSelectbox']").first.click()
    page.keyboard.type("Mixtral")  # the list is long and drawn only where it is scrolled: filter it
    page.get_by_role("option", name="Mixtral-8x7B").click()
    expect(parts).to_contain_text(f"{MODEL['Mixtral-8x7B'].parameters:,}", timeout=60_000)
