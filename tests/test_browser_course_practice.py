"""Issue 45 in Chromium: exercises answered wrong then right on three lessons, the progress kept in
the browser's storage and shown by the course contents, and an assignment link opened in a fresh
browser (its own context: no storage, no cookies) showing the state it fixes.

Reference for each verdict: the exercise's answer computed here, in the test's own process, by
the lesson module (the page computes its own in the server); a number is typed as a learner would."""

import re

import pytest
from playwright.sync_api import expect

from glassbox.model.course import LESSON
from glassbox.model.course.assignments import Assignment
from tests.browser import settled, watch
from tests.test_course_practice import typed, wrong

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]
WAIT = 90_000  # ms: a loaded 2-core machine


def answer(page, number: int, exercise, given: str) -> None:
    box = page.locator(f".st-key-exercise_{number}")
    if exercise.kind == "choice":
        box.get_by_text(given, exact=True).click()
    else:
        field = box.get_by_label(re.compile("^Your answer"))
        field.fill(given)
    box.get_by_role("button", name="Check").click()


@pytest.fixture
def learner(chromium):
    """One learner's browser: its own storage, kept across the lessons of one test."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1600})
    yield watch(context.new_page())
    context.close()


def answer_wrong_then_right(app_url, learner, slug):
    seed = 1
    exercises = LESSON[slug].exercises(seed)
    learner.goto(f"{app_url}/{LESSON[slug].url_path}?seed={seed}")
    expect(learner.get_by_text(f"Seed {seed}:", exact=False)).to_be_visible(timeout=WAIT)
    first = exercises[0]
    answer(learner, 1, first, wrong(first))
    box = learner.locator(".st-key-exercise_1")
    expect(box.locator("[data-testid='stAlertContentError']")).to_contain_text("Not", timeout=WAIT)
    expect(box.get_by_text("Worked solution")).to_be_visible(timeout=WAIT)
    answer(learner, 1, first, typed(first))
    expect(box.locator("[data-testid='stAlertContentSuccess']")).to_contain_text("Right", timeout=WAIT)
    expect(box).to_contain_text("Exercise 1 ✓", timeout=WAIT)  # stored in the browser, sent back


def test_exercises_answered_wrong_then_right_and_the_contents_show_what_the_browser_kept(app_url, learner):
    """One test, one browser: the contents read what the three lessons stored (split in tests, the
    workers could run the last without the others)."""
    slugs = ("attention", "objective", "key-figures")
    for slug in slugs:
        answer_wrong_then_right(app_url, learner, slug)
    learner.goto(f"{app_url}/course")
    settled(learner, timeout=WAIT)
    for slug in slugs:
        of = len(LESSON[slug].exercises(1))
        expect(learner.get_by_text(f"✓ 1 of {of}").first).to_be_visible(timeout=WAIT)
    expect(learner.get_by_text("in 3 of 18 lessons", exact=False)).to_be_visible(timeout=WAIT)


def test_an_assignment_link_opens_its_state_in_a_fresh_browser(app_url, chromium):
    link = Assignment("objective", prompt="Max saw a big dog.", seed=23)
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(link.url(app_url))
        banner = page.locator(".st-key-assignment_banner")
        expect(banner).to_contain_text("exercise seed: 23", timeout=WAIT)
        expect(banner).to_contain_text("prompt: Max saw a big dog.")
        expect(page.get_by_label("Text", exact=True)).to_have_value("Max saw a big dog.", timeout=WAIT)
        expect(page.get_by_text("Seed 23:", exact=False)).to_be_visible(timeout=WAIT)
        question = LESSON["objective"].exercises(23)[0].question
        expect(page.get_by_text(question[:40], exact=False).first).to_be_visible(timeout=WAIT)
        expect(page.get_by_role("button", name="New set")).to_have_count(0)
        banner.get_by_role("button", name="Start from here").click()
        expect(banner).to_have_count(0, timeout=WAIT)
        expect(page.get_by_role("button", name="New set")).to_be_visible(timeout=WAIT)
        assert "assignment=" not in page.url and "seed=23" in page.url
    finally:
        context.close()
