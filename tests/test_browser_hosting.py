"""A hostile visitor on the README's public-hosting setup (no hub, no model folders, a small
trace budget), through a real server and Chromium: one visitor's request must never freeze the
explorer for everyone (issue 32, items 1 and 4).

References: the page's own text (the error a visitor is shown, the chart a second visitor gets)
and what the engine computes in the test process (the prompt's length in tokens, the longest
prompt that fits the budget). Timeouts are generous for a loaded 2-core machine; what is
asserted is what the page shows, never how fast."""

import os
import re
import sys
import time
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from glassbox.model.engine import GlassboxError
from glassbox.model.io.checkpoint import load
from glassbox.model.serving import check_budget, trace_cost
from tests.browser import settled, watch
from tests.helpers import serving
from tests.test_hub import fake_hub, neox_dir  # noqa: F401 (fixtures: the fake hub on 127.0.0.1)

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

BUDGET_GB = 0.003  # ~3.2 MB: a short prompt's traces fit, a 126-token Attention view does not
FLOOD = "the cat sat on the mat. " * 1000  # the Prompt B: thousands of tokens past the context
LONG = "the cat sat on the mat. " * 18  # 126 tokens of the 128 the default model reads
ATTENTION = ("blocks.0.attn.*", "blocks.*.attn.hook_pattern", "blocks.0.ln1.hook_out")  # app/explore/attention.py


@pytest.fixture(scope="module")
def public_server():
    """The README's public-hosting settings, with a trace budget small enough to refuse a view."""
    env = {
        **os.environ,
        "GLASSBOX_HUB": "0",
        "GLASSBOX_MODEL_DIRS": "",
        "GLASSBOX_TRACE_BUDGET_GB": str(BUDGET_GB),
        "GLASSBOX_QUEUE_WAIT_S": "60",
    }
    with serving([sys.executable, "-m", "streamlit", "run", "app/main.py"], env) as server:
        yield server.url
    assert "Traceback" not in server.log, server.log[-3000:]


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


def visitor(browser):
    """A visitor of their own: a separate browser context is a separate Streamlit session."""
    return watch(browser.new_context(viewport={"width": 1400, "height": 1000}).new_page())


def a_second_visitor_is_served(browser, url):
    """Another visitor opens the explorer's Overview and gets its chart, not a queue."""
    page = visitor(browser)
    try:
        page.goto(url + "/explore?model=default&view=Overview&prompt=" + quote("the cat sat on the"))
        expect(page.locator(".gtitle", has_text="What the model predicts").first).to_be_visible(timeout=90_000)
        assert "Queued" not in page.inner_text("body")
    finally:
        page.context.close()


def test_a_prompt_b_past_the_context_is_refused_and_others_are_served(public_server, browser):
    """The issue's repro: Compare with Prompt B six thousand tokens long was sized and queued
    before its length was checked, and then waited for ever behind prompt A's trace (which its
    own page held), and every later visitor queued behind it."""
    n_tokens = len(load("default").encode(FLOOD))
    page = visitor(browser)
    try:
        page.goto(public_server + "/explore?model=default&view=Compare&prompt=" + quote("the cat sat on the"))
        box = page.get_by_label("Prompt B", exact=True).and_(page.locator("input"))
        box.wait_for(timeout=90_000)
        box.fill(FLOOD)
        box.press("Enter")
        error = page.locator("[data-testid='stAlertContentError']").filter(has_text="Prompt B is")
        expect(error.first).to_be_visible(timeout=90_000)
        seen = error.first.inner_text().replace("\u2060", "").replace("\\", "")
        assert f"Prompt B is {n_tokens:,} tokens; this model's context is 128 tokens" in seen, seen
        settled(page)
        assert "Queued" not in page.inner_text("body")
        a_second_visitor_is_served(browser, public_server)
    finally:
        page.context.close()


def test_a_view_over_the_trace_budget_is_refused_with_the_tokens_that_fit(public_server, browser):
    """An Attention view of a 126-token prompt under a ~3 MB budget: refused at once with the
    longest prompt that fits (computed here by the engine's sizing), never queued or run past the
    budget; the same visitor's short prompt, and another visitor, are served."""
    model = load("default").model
    tokens = load("default").encode(LONG)
    assert 100 < len(tokens) <= model.cfg.n_ctx
    with pytest.raises(GlassboxError, match=r"At most (\d+) tokens fit") as refused:
        check_budget(lambda n: trace_cost(model, n, ATTENTION, False), len(tokens), int(BUDGET_GB * 2**30), 128, "")
    fits = int(re.search(r"At most (\d+) tokens", str(refused.value))[1])
    page = visitor(browser)
    try:
        page.goto(public_server + "/explore?model=default&view=Attention&prompt=" + quote(LONG))
        error = page.locator("[data-testid='stAlertContentError']").filter(has_text="tokens fit here")
        expect(error.first).to_be_visible(timeout=90_000)
        seen = error.first.inner_text().replace("\u2060", "").replace("\\", "")
        assert f"of {len(tokens)} tokens needs" in seen and f"At most {fits} tokens fit here" in seen, seen
        a_second_visitor_is_served(browser, public_server)
        page.goto(public_server + "/explore?model=default&view=Attention&prompt=" + quote("the cat sat on the"))
        expect(page.locator(".gtitle", has_text="hook_pattern").first).to_be_visible(timeout=90_000)
    finally:
        page.context.close()


def test_a_download_is_cancelled_from_its_page(fake_hub, browser, tmp_path):  # noqa: F811 (the fixture imported above)
    """A hub model whose weights come at 2 kB/s (the fake hub of tests/test_hub.py, on
    127.0.0.1; the least rate switched off so that only the visitor ends it): Download, then
    Cancel while the bytes come. Reference: the page (its bar moved; then it says the download
    was cancelled and offers Download again), the fake hub (the transfer's connection was
    closed), and the cache (no partial file, no snapshot)."""
    from glassbox.model.io import hub

    weights = "GET /test-org/tiny-neox/resolve/main/model.safetensors"
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "trickle"
    env = {**os.environ, "GLASSBOX_HUB_MIN_KB_PER_S": "0"}  # HF_ENDPOINT and HF_HOME: the fake hub's (fixture)
    with serving([sys.executable, "-m", "streamlit", "run", "app/main.py"], env) as server:
        page = visitor(browser)
        try:
            page.goto(server.url + "/explore?model=test-org/tiny-neox&view=Overview&prompt=" + quote("The cat"))
            page.get_by_role("button", name="Download").click(timeout=90_000)
            expect(page.get_by_text(re.compile(r"[\d.]+ kB of [\d.]+ kB"))).to_be_visible(timeout=90_000)
            deadline = time.monotonic() + 60  # the bar is drawn as the transfer starts: its GET may still be on its way
            while weights not in fake_hub and time.monotonic() < deadline:
                time.sleep(0.1)
            assert weights in fake_hub
            page.get_by_role("button", name="Cancel").click()
            expect(page.get_by_text("Download cancelled: nothing of it was kept.")).to_be_visible(timeout=90_000)
            expect(page.get_by_role("button", name="Download")).to_be_visible(timeout=90_000)
        finally:
            page.context.close()
        assert fake_hub.count(weights) == 1  # stopped, not retried
        assert not list(hub.cache_dir().rglob("*.incomplete"))
        assert hub.cached(hub.HubId("test-org/tiny-neox")) is None
    assert "Traceback" not in server.log, server.log[-3000:]
