"""Like a user, in Chromium (Playwright, Debian's /usr/bin/chromium): steering in the playground and
the explorer's head catalog (issue 29), as drawn. References: ``Model.steer`` and ``Model.heads``
called here with the page's settings."""

import re

import pytest
from playwright.sync_api import expect

import glassbox as gb
from tests.browser import settled

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


def test_steer_draws_both_completions_and_outlines_where_they_part(app_url, page):
    page.goto(app_url + "/playground?model=default&prompt=Lily+had+a&max_new=8&seed=3")
    settled(page)
    page.get_by_text("Steer", exact=True).first.click()  # the expander
    page.get_by_role("button", name="Steer", exact=True).click()
    expect(page.get_by_text(re.compile(r"They part at step \d+\.")).first).to_be_visible(timeout=120_000)
    from glassbox.app.components.steering import CONTRASTIVE_STRENGTH, NEGATIVE, POSITIVE

    model = gb.load("default")
    block = model.cfg.n_layers // 2  # the form's defaults: block 3 (blocks.2)
    vector = model.steering_vector(POSITIVE, NEGATIVE, block)
    steered, plain = model.steer("Lily had a", vector, block, CONTRASTIVE_STRENGTH, 0, 8, seed=3)
    parted = next(i for i, (a, b) in enumerate(zip(steered, plain)) if a.token_id != b.token_id)
    outlined = page.locator("span[style*='outline']")
    expect(outlined).to_have_count(2)
    assert [outlined.nth(0).inner_text(), outlined.nth(1).inner_text()] == [steered[parted].token, plain[parted].token]
    for side in (steered, plain):  # each completion, whole, after the prompt
        expect(page.get_by_text("Lily had a" + "".join(t.token for t in side), exact=True)).to_have_count(1)


def test_head_catalog_draws_five_labelled_grids_and_outlines_the_found_heads(app_url, page):
    page.goto(app_url + "/explore?model=micro-induction&prompt=ba+ko+mi+to+ze+li+ba+ko&view=Head+catalog")
    settled(page)
    for title in ("Induction score", "Previous-token score", "Duplicate-token score", "Self score", "Mean entropy (nats)"):
        chart = page.locator(".js-plotly-plot").filter(has_text=title)
        expect(chart).to_have_count(1, timeout=120_000)
        expect(chart.locator("text.ytitle")).to_have_text("block")
        expect(chart.locator("text.xtitle")).to_have_text("head")
    found = gb.load("micro-induction").heads().find("induction", 0.5)  # the finder's default: induction over 0.5
    induction = page.locator(".js-plotly-plot").filter(has_text="Induction score")
    expect(induction.locator(".shapelayer path")).to_have_count(len(found))
