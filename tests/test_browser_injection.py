"""A model's own text stays text, in Chromium: a model folder and a hub-cache model whose
config.json (``about``: family, model card, samples) and word-level vocabulary hold Markdown
links, Markdown images, HTML tags and bare URLs, all pointing at a server this test listens on
at 127.0.0.1.

Reference: the browser itself (Playwright driving Debian's /usr/bin/chromium, as
tests/test_browser.py does): after the explorer (its Overview, and the prompt's help tooltip,
hovered so that it renders) and the playground (the model card, opened) have drawn, no <a>,
<img> or SVG <image> element anywhere on the page points at that server, the crafted text is on
the page as typed, nothing went wrong, and the server received no request. The app runs with the
hub on, offline (HF_HUB_OFFLINE=1, the cache laid out by the test as huggingface_hub lays it out:
see tests/test_hub.py), and any model directory allowed (GLASSBOX_MODEL_DIRS unset)."""

from __future__ import annotations

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from tests.browser import settled
from tests.helpers import serving

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]

COMMIT = "0123456789abcdef0123456789abcdef01234567"
HUB_ID = "evil-org/tiny"
WAIT = 180_000  # ms: a loaded 2-core machine opens a model and draws a view slowly


@pytest.fixture(scope="module")
def listener():
    """A server on 127.0.0.1 that records every request it gets: the crafted text points here."""
    requests: list[str] = []

    class Record(BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()


def crafted_text(host: str, where: str) -> dict[str, str]:
    """Markdown and HTML that would fetch or link to ``host`` if rendered; ``where`` tells the
    two models apart in the server's log."""
    url = f"http://{host}/{where}"
    return {
        "link": f"[click me]({url}/link)",
        "image": f"![pixel]({url}/image.png)",
        "img": f"<img src='{url}/img.png'>",
        "a": f"<a href='{url}/a'>a tag</a>",
        "bare": f"{url}/bare",
    }


def craft_model(path: Path, host: str, where: str) -> Path:
    """A Glassbox model whose config.json's about and whose word-level vocabulary hold the
    crafted text; about.card.parameters is a string (not a number) and so is the loss."""
    from glassbox.model.engine import ModelConfig
    from glassbox.model.io.checkpoint import save
    from glassbox.model.io.tokenizer import Tokenizer
    from tests.helpers import build_random_model

    text = crafted_text(host, where)
    words = ["<unk>", "the", "cat", *text.values()]
    about = {
        "source": f"crafted {text['link']}",
        "family": f"{text['link']} {text['image']} {text['img']}",
        "card": {
            "parameters": f"about a million {text['link']}",
            "validation_loss": text["image"],
            "notes": f"{text['a']} {text['bare']}",
            "training": {"corpus": text["img"]},
        },
        "samples": [{"prompt": text["image"], "completion": text["link"], "settings": text["a"]}],
    }
    cfg = ModelConfig(vocab_size=len(words), n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_ff=16)
    save(path, build_random_model(cfg), Tokenizer.from_words(words), "float32", about)
    return path


@pytest.fixture(scope="module")
def models(listener, tmp_path_factory):
    """(model folder, hub cache home): the crafted model as a directory, and as HUB_ID cached at
    COMMIT with refs/main pointing at it (models--owner--name/snapshots/<commit>/<files>)."""
    host, _ = listener
    root = tmp_path_factory.mktemp("injection")
    folder = craft_model(root / "folder-model", host, "folder")
    repo = root / "hf" / "hub" / ("models--" + HUB_ID.replace("/", "--"))
    craft_model(repo / "snapshots" / COMMIT, host, "hub")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return folder, root / "hf"


@pytest.fixture(scope="module")
def app_url(models):
    folder, hf_home = models
    env = {k: v for k, v in os.environ.items() if k not in ("GLASSBOX_MODEL_DIRS", "GLASSBOX_HUB", "HF_HUB_CACHE")}
    env |= {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    with serving([sys.executable, "-m", "glassbox", "app"], env, seconds=240) as server:
        yield server.url


# every element that links to or loads a URL, in HTML and in plotly's SVG (xlink:href)
POINTING_AT = """host => Array.from(document.querySelectorAll('a, img, image, source, video, audio, iframe, object'))
    .map(e => [e.tagName, e.getAttribute('href') || e.getAttribute('xlink:href') || e.getAttribute('src') || ''])
    .filter(([tag, url]) => url.includes(host))"""


def shown_text(page) -> str:
    """The page's text as a reader sees it (the word joiners ``plain`` puts in are invisible)."""
    return page.locator("[data-testid='stApp']").inner_text().replace("\u2060", "")


def check_nothing_points_at(page, host: str) -> None:
    assert page.evaluate(POINTING_AT, host) == []
    assert page.locator("[data-testid='stException']").count() == 0
    assert "Something went wrong" not in shown_text(page)


@pytest.mark.parametrize("which", ["folder", "hub"])
def test_a_models_text_makes_no_link_image_or_request(which, models, listener, app_url, page):
    """The explorer and the playground on the crafted model (a directory, or a hub id from the
    cache): every crafted text is on the page as text, no element points at the listener, and
    the listener gets no request."""
    host, requests = listener
    folder, _ = models
    model = str(folder) if which == "folder" else HUB_ID
    text = crafted_text(host, which)
    fetched = []

    def record(request):
        if host in request.url:
            fetched.append(request.url)

    page.on("request", record)
    try:
        page.goto(f"{app_url}/explore?model={quote(model)}&prompt=the+cat&view=Overview")
        settled(page)
        main = page.locator("[data-testid='stMain']")
        expect(main.locator(".gtitle", has_text="Parameters per part").first).to_be_visible(timeout=WAIT)
        expect(main.get_by_text("This model's blocks")).to_be_visible(timeout=WAIT)
        check_nothing_points_at(page, host)
        family = main.locator("[data-testid='stMarkdownContainer']", has_text="This model's blocks").inner_text()
        assert f"{text['link']} {text['image']} {text['img']}" in family.replace("\u2060", "")  # as typed
        # the prompt's help lists the vocabulary: a tooltip, drawn when the pointer is on its icon
        page.locator("[data-testid='stTextArea'] [data-testid='stTooltipIcon']").first.hover()
        tooltip = page.locator("[data-testid='stTooltipContent']", has_text="Words this model knows")
        expect(tooltip).to_be_visible(timeout=WAIT)
        check_nothing_points_at(page, host)
        assert all(repr(word) in tooltip.inner_text().replace("\u2060", "") for word in text.values())

        page.goto(f"{app_url}/playground?model={quote(model)}&prompt=the+cat")
        settled(page)
        card = main.locator("[data-testid='stExpander']", has_text="Model card")
        expect(card).to_be_visible(timeout=WAIT)
        check_nothing_points_at(page, host)
        assert (
            f"Model card: about a million {text['link']} parameters, validation loss {text['image']}"
            in card.inner_text().replace("\u2060", "")
        )  # a string where a number was expected: shown as it is
        card.locator("summary").first.click()
        expect(card.get_by_text("Notes", exact=False).first).to_be_visible(timeout=WAIT)
        opened = card.inner_text().replace("\u2060", "")
        assert f"{text['a']} {text['bare']}" in opened and text["img"] in opened  # the card's lines, as typed
        assert f"{text['image']} {text['link']} ({text['a']})" in opened  # the sample
        expect(main.get_by_text("Next token after the prompt").first).to_be_attached(timeout=WAIT)
        check_nothing_points_at(page, host)
    finally:
        page.remove_listener("request", record)
    assert fetched == [] and requests == [], (fetched, requests)
