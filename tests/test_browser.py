"""Like a user: start the app with the README's command, open it in Chromium (Playwright
driving Debian's /usr/bin/chromium, installed by tests/install.sh), and step through the
worked example with the keyboard."""

import json
import os
import re
import subprocess
import sys
from urllib.parse import quote, unquote, urlencode, urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.browser import settled, watch
from tests.helpers import ROOT, serving

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


def readme_app_command() -> str:
    """The README's command that installs and starts the app."""
    readme = (ROOT / "README.md").read_text()
    (command,) = [line for line in readme.splitlines() if "glassbox app" in line and "pip install" in line]
    return command.strip()


def test_the_readmes_command_installs_and_starts_the_app(tmp_path, page):
    """The README's command as written, its `pip install` going into a venv that sees this
    machine's packages (reinstalling the shared editable install would pull glassbox away from
    the tests running beside this one while pip swaps it); then the welcome page in Chromium.
    The other tests here use the run's one server (conftest.py's app_url)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    with serving(readme_app_command(), env=env, seconds=300) as server:
        page.goto(server.url)
        settled(page)
        expect(page.get_by_role("link", name=re.compile("worked example", re.I)).first).to_be_visible(timeout=60_000)
    assert "Successfully installed glassbox" in server.log, server.log[-2000:]
    assert list(venv.glob("lib/python*/site-packages/glassbox-*.dist-info")), "installed into the venv"


def step_title(page) -> str:
    """The worked example's step, as its in-page player (app/components/step_player.js) draws it."""
    title = page.locator(".gb-player .gb-title").first
    title.wait_for(timeout=60_000)
    return title.inner_text()


def press_next(page, until: str, limit: int = 80):
    for _ in range(limit):
        if step_title(page).startswith(until):
            return
        before = page.url
        for attempt in range(2):  # a key pressed while a fresh page still attaches its shortcuts can be lost: once more
            page.keyboard.press("ArrowRight")  # the Next button's shortcut
            try:
                page.wait_for_function("u => window.location.href !== u", arg=before, timeout=30_000)
                break
            except PlaywrightTimeout:
                if attempt:
                    raise
        settled(page)
    pytest.fail(f"never reached the step {until!r}")


def test_step_to_the_loss_then_back_through_the_gradients_to_the_update(app_url, page):
    page.goto(app_url + "/worked-example")
    settled(page)
    expect(page.get_by_text("The worked example, step by step")).to_be_visible()
    assert step_title(page) == "Tokens"
    press_next(page, "Loss")
    assert "step=loss" in page.url
    expect(page.locator(".main, [data-testid='stMain']").get_by_text(re.compile(r"1\.768")).first).to_be_visible()
    press_next(page, "∂L/∂logits")
    press_next(page, "Update")
    assert step_title(page) == "Update: one gradient-descent step, η = 0.5"
    expect(page.locator(".katex").filter(has_text="W_E_new").first).to_be_visible()  # a cell's update, written out
    # the payoff: the forward pass again with the new weights (its numbers checked against torch.optim.SGD in test_app)
    main = page.locator("[data-testid='stMain']")
    expect(main.get_by_text("What the step bought.")).to_be_visible()
    expect(main.get_by_text("1.0490", exact=True)).to_be_visible()  # the loss after the step, from 1.7685
    expect(main.get_by_text("0.3503", exact=True)).to_be_visible()  # p(mat), from 0.1706
    expect(main.get_by_role("link", name=re.compile("Train it live"))).to_be_visible()
    assert "step=update" in page.url
    assert page.locator(".gb-player .gb-grid").count() >= 3
    assert page.locator("[data-testid='stException']").count() == 0
    # back, by the key and by the button; the URL follows, and a reload opens the same step
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(re.compile(r"step=grad-embedding"), timeout=30_000)
    page.get_by_role("button", name="◀ Previous").click()
    page.wait_for_url(re.compile(r"step=grad-positions"), timeout=30_000)
    page.reload()
    settled(page)
    expect(page.locator(".gb-player")).to_have_attribute("data-step", "grad-positions", timeout=60_000)


def test_the_worked_example_reopens_where_the_reader_left_it(app_url, page):
    """Stepping asks nothing of the server: the page writes the step into the URL and this tab's
    sessionStorage, so leaving by the sidebar and coming back (a URL without ?step=) opens the same
    step with the same cell chosen."""
    page.goto(app_url + "/worked-example?step=b1-softmax")
    settled(page)
    page.locator(".gb-grid[data-label='A(1,1)'] td[data-cell='3,1']").click()
    expect(page.locator(".gb-arithmetic")).to_have_attribute("data-cell", "A(1,1),3,1")
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(r"step=b1-weighted-values"), timeout=30_000)
    page.keyboard.press("ArrowLeft")
    page.get_by_role("link", name="Welcome").click()
    settled(page)
    page.get_by_role("link", name="Worked example").first.click()
    settled(page)
    expect(page.locator(".gb-player")).to_have_attribute("data-step", "b1-softmax", timeout=60_000)
    expect(page.locator(".gb-arithmetic")).to_have_attribute("data-cell", "A(1,1),3,1")
    assert "step=b1-softmax" in page.url


@pytest.mark.parametrize(
    "step, within, link, lands",
    [
        ("update", ".gb-player", "Train it live", r"/train"),
        ("loss", ".gb-lessons", "The training objective", r"/course-objective"),
    ],
)
def test_the_worked_examples_links_keep_the_session(app_url, page, step, within, link, lands):
    """The update step's link to Train it live and a lesson link are followed by the server
    (st.switch_page), not loaded anew: the page is not reloaded (a marker set on window survives),
    so the session, and what the reader did in it, stays."""
    page.goto(f"{app_url}/worked-example?step={step}")
    settled(page)
    page.evaluate("window.__same_page = true")
    page.locator(within).get_by_role("link", name=re.compile(link)).click()
    page.wait_for_url(re.compile(lands), timeout=60_000)
    settled(page)
    expect(page.get_by_role("heading").first).to_be_visible(timeout=60_000)
    assert page.evaluate("window.__same_page === true")


def test_the_same_tensor_has_the_same_label_on_both_pages(app_url, page):
    """The worked example's A(1,1) and the explorer's block 1, head 1: one numbering, one name."""
    page.goto(app_url + "/worked-example?step=b1-softmax")
    settled(page)
    main = page.locator("[data-testid='stMain']")
    expect(main.get_by_text("block 1 (blocks.0)").first).to_be_visible(timeout=30_000)  # the pipeline strip
    expect(main.get_by_role("radio", name="head 1 ([0])")).to_be_visible()
    expect(main.locator(".gb-engine", has_text="blocks.0.attn.hook_pattern[0]").first).to_be_visible()
    page.goto(app_url + "/explore?model=worked-example&prompt=the+cat+sat+on+the&view=Attention&block=1&head=1")
    settled(page)
    expect(main.get_by_role("heading", name="Block 1 (blocks.0), head 1 ([0])")).to_be_visible(timeout=60_000)
    expect(main.get_by_text("block 1 (blocks.0)").first).to_be_visible()
    expect(main.locator(".gb-engine", has_text="blocks.0.attn.hook_pattern[0]").first).to_be_visible()


def test_a_shared_step_url_opens_that_step_and_a_click_explains_a_cell(app_url, page):
    page.goto(app_url + "/worked-example?step=b1-scores")
    settled(page)
    assert step_title(page) == "Block 1: attention scores"
    page.locator(".gb-grid[data-label='scores(1,1)'] td[data-cell='2,1']").click()  # row 2, column 1
    expect(page.get_by_role("combobox", name="Row")).to_have_value("2")
    expect(page.get_by_role("combobox", name="Row").locator("option:checked")).to_have_text("2 sat")
    expect(page.get_by_role("combobox", name="Column").locator("option:checked")).to_have_text("1 cat")
    expect(page.locator(".katex").filter(has_text="scores(1,1)2,1").first).to_be_visible()
    expect(page.locator(".gb-grid[data-label='Q(1,1)'] td.gb-mark")).to_have_count(2)  # the row of Q it reads
    assert "step=b1-scores" in page.url  # the click asked nothing of the server


def test_welcome_page_a_click_on_the_drawing_leads_to_the_matching_step_and_view(app_url, page):
    """The landing page: clicking the drawing's MLP box names the worked example's FFN step and the
    explorer's MLP view, and its links open them (the part's key, step and view from architecture.PARTS)."""
    from glassbox.app.components.architecture import PARTS

    mlp = next(p for p in PARTS if p.key == "mlp")
    page.goto(app_url)
    # a reader arriving fresh: no step kept in this tab by an earlier test (step_player.js)
    page.evaluate("sessionStorage.clear()")
    settled(page)
    expect(page.get_by_role("heading", name="Glassbox")).to_be_visible()
    drawing = page.locator("[data-testid='stPlotlyChart']").first
    label = drawing.locator(".textpoint", has_text="MLP").first
    label.wait_for(timeout=30_000)
    # plotly takes its click handlers a moment after drawing (on a loaded machine): click once it listens
    page.wait_for_function(
        "(chart) => Boolean(chart._ev?._events?.plotly_click)",
        arg=drawing.locator(".js-plotly-plot").element_handle(),
        timeout=30_000,
    )
    box = label.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    settled(page)
    expect(page.get_by_text("MLP (feed-forward).")).to_be_visible(timeout=30_000)
    assert "part=mlp" in page.url
    page.get_by_role("link", name="By hand, in the worked example").click()
    page.wait_for_url(re.compile(r"/worked-example\?step=" + mlp.step), timeout=30_000)
    settled(page)
    assert step_title(page) == "Block 1: MLP expand"
    page.goto(app_url + "/?part=mlp")
    settled(page)
    page.get_by_role("link", name=re.compile("the explorer's MLP view")).click()
    page.wait_for_url(re.compile(r"/explore\?.*view=MLP"), timeout=30_000)
    settled(page)
    expect(page.get_by_role("heading", name="Explore a prompt")).to_be_visible()
    assert page.locator("[data-testid='stException']").count() == 0


def test_an_unknown_step_in_the_url_says_so(app_url, page):
    page.goto(app_url + "/worked-example?step=zzz")
    settled(page)
    expect(page.get_by_text("There is no step called “zzz”")).to_be_visible()
    assert step_title(page) == "Tokens"


def drawn_with(page, setting: str, value) -> None:
    """Waits until the playground's chart, drawn in the page, shows ``setting`` at ``value`` (a
    key press is handled between frames: read at once, the attribute can still be the last one)."""
    page.wait_for_function(
        "([k, v]) => { const c = document.querySelector('.gb-chart[data-drawn]');"
        " return c && JSON.parse(c.dataset.drawn)[k] === v; }",
        arg=[setting, value],
        timeout=30_000,
    )


def test_playground_types_a_prompt_moves_the_temperature_and_generates(app_url, page):
    from glassbox.model.engine.sampling import Sampling, generate
    from glassbox.model.io.checkpoint import load

    page.goto(app_url + "/playground?max_new=8&seed=3")
    settled(page)
    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.fill("Tom had a")
    prompt.press("Control+Enter")
    settled(page)
    expect(page.get_by_text("Next token after the prompt").first).to_be_visible()
    chart = page.locator(".gb-chart[data-drawn]")  # drawn in the page (app/components/sampling_controls.js)
    slider = page.get_by_role("slider", name="Temperature")
    slider.focus()
    for _ in range(4):
        page.keyboard.press("ArrowLeft")  # 1.0 -> 0.8
    # redrawn by the page itself at each step, before the server has been asked anything
    drawn_with(page, "temperature", 0.8)
    page.get_by_role("slider", name="top-k").focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")  # 0 -> 3
    drawn_with(page, "drawable", 3)
    expect(chart).to_contain_text("3 of 598 tokens can be drawn")
    for _ in range(3):  # back to no top-k: the generation below is checked without it
        page.keyboard.press("ArrowLeft")
    drawn_with(page, "drawable", 598)
    # Generate, drawn beside the sliders, sends the settings the chart shows: temperature 0.8, no top-k
    page.locator(".gb-sampling").get_by_role("button", name="Generate").click()
    settled(page)
    page.wait_for_url(re.compile(r"temperature=0\.8"), timeout=60_000)
    assert "top_k=3" not in page.url and "prompt=Tom" in page.url  # the setup can be shared
    # the engine, run here with the same settings, must give the text the page shows
    drawn = list(generate(load("default"), "Tom had a", 8, Sampling(temperature=0.8, seed=3)))
    expected = "".join(t.token for t in drawn)
    expect(page.get_by_text(expected.strip(), exact=False).first).to_be_visible(timeout=60_000)
    expect(page.get_by_text("Generated", exact=True)).to_be_visible()
    # the completion ends on the page once: the streamed text gives way to the chips (waited for:
    # under load the rerun that swaps them can come after "Generated" shows)
    once = """t => document.querySelector("[data-testid='stMain']").textContent.replace(/\\u00a0/g, " ")
                   .split(t).length === 2"""
    page.wait_for_function(once, arg=expected.strip(), timeout=60_000)
    expect(page.get_by_text("KV cache size as generation goes on").first).to_be_attached()
    # a step is chosen in the page (app/components/generation_player.js): its distribution and its KV cache
    player = page.locator(".gb-generation")
    player.get_by_role("button", name=re.compile(r"^3: ")).click()
    expect(player).to_have_attribute("data-step", "2")
    expect(player).to_contain_text("Step 3: drew")
    expect(player).to_contain_text(f"used to predict step 3: the keys and values of the {drawn[2].position} positions")
    player.locator(".gb-chip").nth(0).click()
    expect(player).to_have_attribute("data-step", "0")
    expect(player.locator(".gb-math .katex").first).to_be_attached(timeout=30_000)  # the formula, typeset
    # leaving by the sidebar and coming back keeps the generation (the session) and the step this tab
    # chose (its sessionStorage)
    player.get_by_role("button", name=re.compile(r"^4: ")).click()
    page.get_by_role("link", name="Train it live").click()
    page.wait_for_url(re.compile(r"/train"), timeout=60_000)
    page.get_by_role("link", name="Playground").click()
    expect(page.locator(".gb-generation")).to_have_attribute("data-step", "3", timeout=60_000)
    # its explorer link opens the trace of the prompt and the first three tokens, in the same session
    page.locator(".gb-generation").get_by_role("link", name="Open this step's full trace in the explorer").click()
    page.wait_for_url(re.compile(r"/explore\?"), timeout=60_000)
    expect(page.get_by_role("textbox", name="Prompt")).to_have_value(
        "Tom had a" + "".join(t.token for t in drawn[:3]), timeout=60_000
    )
    assert page.locator("[data-testid='stException']").count() == 0


def test_explorer_opens_every_view_and_a_click_opens_a_head(app_url, page):
    page.goto(app_url + "/explore?model=default&prompt=the+cat+sat+on+the+mat")
    settled(page)
    from glassbox.app.bench.views import TITLES, VIEWS  # each view's chart title (the benchmark waits for the same ones)

    for view, title in ((v, t) for v, t in VIEWS.items() if t is not None):
        page.get_by_role("radio", name=view, exact=True).click()
        settled(page)
        expect(page.locator(TITLES, has_text=title).first).to_be_visible(timeout=60_000)
        page.wait_for_url(re.compile("view=" + re.escape(view.replace(" ", "+").replace("&", "%26"))), timeout=30_000)
        assert page.locator("[data-testid='stException']").count() == 0, view
    page.get_by_role("radio", name="Export", exact=True).click()
    settled(page)
    expect(page.get_by_role("button", name="Download the trace as .npz")).to_be_visible()

    page.get_by_role("radio", name="Attention", exact=True).click()
    settled(page)
    expect(page.get_by_role("heading", name="Block 1 (blocks.0), head 1 ([0])")).to_be_visible(timeout=30_000)
    grid = page.locator("[data-testid='stPlotlyChart']").first.locator(".nsewdrag").first.bounding_box()
    # 4 blocks × 4 heads: the panel of block 3 (blocks.2), head 4 ([3])
    page.mouse.click(grid["x"] + grid["width"] * 3.5 / 4, grid["y"] + grid["height"] * 2.5 / 4)
    settled(page)
    expect(page.get_by_role("heading", name="Block 3 (blocks.2), head 4 ([3])")).to_be_visible(timeout=30_000)
    page.wait_for_url(re.compile(r"block=3&head=4"), timeout=30_000)
    # in the page (app/components/attention_head.js): a head, then a (query, key) cell of the pattern
    heads = page.locator(".gb-attention")
    heads.get_by_role("button", name="head 2 ([1])").click()
    expect(page.get_by_role("heading", name="Block 3 (blocks.2), head 2 ([1])")).to_be_visible()
    page.wait_for_url(re.compile(r"block=3&head=2"), timeout=30_000)  # sent back: the URL follows
    pattern = heads.locator("figure", has=page.locator(".gb-engine", has_text="hook_pattern[1]")).locator("canvas")
    box = pattern.bounding_box()
    n_tokens = 6
    cell = min(40, (box["width"] - 8 - 10) // n_tokens)  # left labels are at most 130 px; measured from the right
    right = box["x"] + box["width"] - 8
    pattern.click(position={"x": right - box["x"] - cell * (n_tokens - 1.5), "y": cell * 4.5})  # query 4, key 1
    expect(heads).to_have_attribute("data-chosen", "1,4,1")
    expect(heads.locator(".gb-arithmetic .katex").first).to_be_attached()
    expect(heads).to_contain_text("“4:␣the” asks, “1:␣cat” answers.")
    # a small model's every block is in the page too: its Block list redraws at once, the URL follows
    heads.get_by_label("Block").select_option(label="block 2 (blocks.1)")
    expect(page.get_by_role("heading", name="Block 2 (blocks.1), head 2 ([1])")).to_be_visible()
    expect(heads).to_have_attribute("data-block", "1")
    page.wait_for_url(re.compile(r"block=2&head=2"), timeout=30_000)
    # another view and back: the page's own choice is drawn again
    page.get_by_role("radio", name="Overview", exact=True).click()
    settled(page)
    page.get_by_role("radio", name="Attention", exact=True).click()
    settled(page)
    expect(page.get_by_role("heading", name="Block 2 (blocks.1), head 2 ([1])")).to_be_visible(timeout=30_000)
    expect(page.locator(".gb-attention")).to_have_attribute("data-chosen", "1,4,1")


def test_a_long_prompts_heads_are_computed_in_the_page(app_url, page, tmp_path):
    """A prompt whose heads' scores are over the page's budget (12 heads of 64 dimensions, 200
    tokens: 5 MB) sends the queries and keys alone, and the page computes each head's scores and
    pattern when it is chosen; another block is fetched by the page (app/served.py) and drawn without
    a rerun, and where the fetch fails the page asks the server, which sends it. Reference: run_trace's
    hook_pattern on the same model, against the weights the page writes (3 decimals: 0.0005)."""
    from glassbox.model.engine import ModelConfig, Transformer, run_trace
    from glassbox.model.io.checkpoint import load, save

    tokenizer = load("default").tokenizer
    cfg = ModelConfig(vocab_size=598, n_ctx=256, d_model=32, n_layers=3, n_heads=12, d_head=64, d_ff=64)
    save(tmp_path / "wide", Transformer(cfg).init_weights(3).float(), tokenizer, "float32", {"source": "a test's"})
    prompt = tokenizer.decode(tokenizer.encode(" ".join(["the cat sat on the mat and the dog sat on the log."] * 30))[:200])
    loaded = load(str(tmp_path / "wide"))
    tokens = loaded.encode(prompt)
    patterns = run_trace(loaded.model, tokens)
    pattern = patterns["blocks.0.attn.hook_pattern"][2].numpy()
    query = len(tokens) - 1
    page.goto(
        app_url
        + "/explore?"
        + urlencode({"model": str(tmp_path / "wide"), "prompt": prompt, "view": "Attention", "pos": str(query), "key_pos": "0"})
    )
    heads = page.locator(".gb-attention")
    expect(heads.locator(".gb-arithmetic .katex").first).to_be_attached(timeout=120_000)
    expect(heads).to_contain_text(f"computed in this page from the {len(tokens)} queries and keys sent")
    heads.get_by_role("button", name="head 3 ([2])").click()
    expect(heads).to_have_attribute("data-chosen", f"2,{query},0")

    def weights_written(pattern):  # the weights where the last query looks, as the page writes them: "label  0.123"
        shown = {}
        texts = heads.locator(".gb-lines text").evaluate_all("nodes => nodes.map((n) => n.textContent)")
        for text in texts:
            if re.fullmatch(r".*  \d\.\d{3}", text):
                shown[text] = float(text.rsplit("  ", 1)[1])
        assert shown, texts
        top = sorted(pattern[query])[::-1][: len(shown)]
        assert sorted(shown.values(), reverse=True) == pytest.approx(top[: len(shown)], abs=5e-4)

    weights_written(pattern)
    # another block: fetched by the page itself (its requests are counted), drawn from what it fetched
    fetched = []
    page.on("request", lambda request: fetched.append(request.url) if "/glassbox/data/" in request.url else None)
    heads.get_by_label("Block").select_option(label="block 2 (blocks.1)")
    expect(heads).to_have_attribute("data-block", "1")
    assert [url.rsplit("/", 1)[1] for url in fetched] == ["1"]
    expect(page.get_by_role("heading", name="Block 2 (blocks.1), head 3 ([2])")).to_be_visible()
    weights_written(patterns["blocks.1.attn.hook_pattern"][2].numpy())
    page.wait_for_url(re.compile(r"block=2&head=3"), timeout=30_000)  # the choice still goes back: the URL follows
    # a block the page cannot fetch (the server's answer refused here): the page asks the server, which sends it
    page.route("**/glassbox/data/**", lambda route: route.fulfill(status=404, body="{}"))
    heads.get_by_label("Block").select_option(label="block 3 (blocks.2)")
    expect(page.locator(".gb-attention")).to_have_attribute("data-block", "2", timeout=60_000)
    expect(page.get_by_role("heading", name="Block 3 (blocks.2), head 3 ([2])")).to_be_visible()
    weights_written(patterns["blocks.2.attn.hook_pattern"][2].numpy())
    assert page.locator("[data-testid='stException']").count() == 0


def point_at(canvas, row: int, col: int) -> dict:
    """Where cell (row, col) of a map drawn in the page is on its canvas (page_kit.js: mapNode)."""
    geometry = json.loads(canvas.get_attribute("data-geometry"))
    return {"x": geometry["left"] + (col + 0.5) * geometry["cell"], "y": (row + 0.5) * geometry["tall"]}


def test_backward_steps_change_in_the_page_and_a_cell_click_writes_its_arithmetic(app_url, page):
    """The Backward view's steps, played in the page: Next ▶ (and ←) draws the next step from what the page
    fetched itself (app/served.py: its requests are counted), a hovered cell shows the traced
    gradient, a click on a cell writes that cell's arithmetic, and a step the page cannot fetch
    (the route refused here) is sent by the server. References: run_trace's gradients (float32 in
    the page, rtol 1e-6), and autograd's value as the caption prints it (6 significant digits)."""
    from glassbox.model.analysis import backward_steps
    from glassbox.model.engine import GRAD, run_trace
    from glassbox.model.io.checkpoint import load

    loaded = load("default")
    trace = run_trace(loaded.model, loaded.encode("the cat sat on the"), backward=True)
    keys = [step.key for step in backward_steps(loaded.model)]
    fetched = []
    page.on("request", lambda request: fetched.append(request.url) if "/glassbox/data/" in request.url else None)
    page.goto(app_url + "/explore?model=default&prompt=the+cat+sat+on+the&view=Backward&bstep=ln_final")
    settled(page)
    player = page.locator(".gb-backward")
    expect(player).to_have_attribute("data-step", str(keys.index("ln_final")), timeout=60_000)
    player.get_by_role("button", name="Next ▶").click()
    expect(player).to_have_attribute("data-step", str(keys.index("ln_final") + 1))
    assert str(keys.index("ln_final") + 1) in [url.rsplit("/", 1)[1] for url in fetched]  # fetched, not sent by a rerun
    name = GRAD + "blocks.3.hook_mlp_out"  # the next step's first map: the last block's MLP output
    canvas = player.locator(f"figure[data-name='{name}'] canvas")
    canvas.hover(position=point_at(canvas, 2, 7))
    tip = player.locator(f"figure[data-name='{name}'] .gb-tip").inner_text()
    assert float(tip.split("\n")[1]) == pytest.approx(float(trace[name][2, 7]), rel=1e-6)
    settled(page)
    page.keyboard.press("ArrowLeft")  # ← steps back, as ◀ Previous does
    expect(player).to_have_attribute("data-step", str(keys.index("ln_final")))
    name, row, col = GRAD + "ln_final.hook_out", 3, 5
    canvas = player.locator(f"figure[data-name='{name}'] canvas")
    canvas.click(position=point_at(canvas, row, col))
    settled(page)
    expect(page.get_by_text(f"Autograd's value: {float(trace[name][row, col]):.6g}")).to_be_visible(timeout=60_000)
    # a step the page cannot fetch (the server's answer refused here): the page asks the server, which sends it
    page.route("**/glassbox/data/**", lambda route: route.fulfill(status=404, body="{}"))
    player.get_by_label("Backward step").select_option(index=len(keys) - 1)
    expect(page.locator(".gb-backward")).to_have_attribute("data-step", str(len(keys) - 1), timeout=60_000)
    expect(page.locator(".gb-backward figure[data-name='grad:hook_embed']")).to_be_visible()
    assert page.locator("[data-testid='stException']").count() == 0


OVERFLOW = """() => [...document.querySelectorAll('[data-testid=stMain] .katex-display')]
    .filter(d => d.scrollWidth > d.clientWidth + 4).map(d => d.textContent.slice(0, 80))"""


@pytest.mark.parametrize("step", ["grad-b2-softmax", "grad-b1-residual2", "grad-b1-ffn-input", "softmax"])
def test_written_arithmetic_fits_its_box_at_1280_px(app_url, page, step):
    """The worked example's longest arithmetic (the steps whose lines ran to 120 characters, cut
    before their result at 1280 px): no formula or arithmetic line overflows its box
    (app/components/latex.py breaks long lines at their = and + signs)."""
    page.set_viewport_size({"width": 1280, "height": 800})
    try:
        page.goto(f"{app_url}/worked-example?step={step}")
        settled(page)
        page.locator(".katex-display").first.wait_for(timeout=60_000)
        assert page.evaluate(OVERFLOW) == []
    finally:
        page.set_viewport_size({"width": 1400, "height": 1600})


# --- user text stays text -------------------------------------------------------------------------

INJECTIONS = [  # URL query strings that put Markdown where the page quotes user text
    "/explore?model=" + quote("![pix](http://127.0.0.1:9/pixel.png)"),
    "/explore?model=" + quote("[Session expired, log in again](http://evil.example/login) www.evil.example"),
    "/explore?model=worked-example&view=Backward&prompt=the+cat&target="
    + quote("![t](http://127.0.0.1:9/target.png) [x](http://evil.example) http://evil.example"),
    "/explore?model=worked-example&prompt=" + quote("the [click](http://evil.example) a@evil.example"),
]


@pytest.mark.parametrize("path", INJECTIONS)
def test_markdown_in_the_url_makes_no_image_or_link(app_url, page, path):
    hosts = []

    def record(request):
        hosts.append(urlparse(request.url).netloc)

    page.on("request", record)
    page.goto(app_url + path)
    settled(page)
    main = page.locator("[data-testid='stMain']")
    expect(main.locator("[data-testid='stAlertContentError']").first).to_be_visible(timeout=30_000)
    payload = unquote(path.split("=")[-1])
    text = main.locator("[data-testid='stAlertContentError']").first.inner_text().replace("\u2060", "")
    assert payload.split()[0].split("[")[-1][:10] in text  # the visitor's text is shown, as text
    assert main.locator("img[src*='127.0.0.1'], a[href*='evil.example'], a[href*='127.0.0.1']").count() == 0
    page.remove_listener("request", record)
    assert "127.0.0.1:9" not in hosts and not [h for h in hosts if "evil.example" in h], hosts  # nothing fetched


@pytest.fixture(scope="module")
def plain_text_url():
    """tests/plain_text_page.py served by Streamlit."""
    with serving([sys.executable, "-m", "streamlit", "run", str(ROOT / "tests" / "plain_text_page.py")]) as server:
        yield server.url


def test_plain_shows_hostile_text_as_typed_in_chromiums_renderer(plain_text_url, page):
    from tests.plain_text_page import HOSTILE

    page.goto(plain_text_url)
    settled(page)
    blocks = page.locator("[data-testid='stMarkdownContainer']")
    expect(blocks.nth(2 * len(HOSTILE) - 1)).to_be_attached(timeout=30_000)
    assert blocks.count() == 2 * len(HOSTILE)
    made = "a, img, svg, .katex, h1, h2, h3, ul, ol, li, blockquote, code, pre, table, em, del, script, span[style]"
    for i, text in enumerate(HOSTILE):
        alone, inline = blocks.nth(2 * i), blocks.nth(2 * i + 1)
        assert alone.locator(made).count() == 0, (text, alone.inner_html())
        assert inline.locator(made).count() == 0 and inline.locator("strong").count() == 2, (text, inline.inner_html())
        seen = " ".join(alone.inner_text().replace("\u2060", "").split())
        assert seen == " ".join(text.split()), (text, seen)


@pytest.mark.long
def test_sessions_arriving_together_at_a_fresh_server_all_draw(chromium):
    """Six Chromium sessions open chart pages at the same moment on a server that has just
    started (its own, not the shared fixture's, which earlier tests have warmed). Before the
    libraries were initialised once in app/__init__.py, about half of them crashed with
    "partially initialized module 'pandas'" (the server log's words). Reference: each page's
    own text (no error box, the page's heading drawn) and the server's log."""
    paths = ["/explore?view=Attention", "/playground", "/explore?view=Overview", "/", "/explore?view=Backward", "/playground"]
    with serving([sys.executable, "-m", "streamlit", "run", "app/main.py"]) as server:
        sessions = [watch(chromium.new_page(viewport={"width": 1280, "height": 800})) for _ in paths]
        try:
            for session, path in zip(sessions, paths):  # all requested before any is drawn
                session.goto(server.url + path, wait_until="commit")
            for session, path in zip(sessions, paths):
                settled(session)
                session.wait_for_selector("h1", timeout=60_000)
                body = session.inner_text("body")
                assert "Something went wrong" not in body and "Error" not in body, (path, body[:300])
        finally:
            for session in sessions:
                session.close()
    assert "partially initialized" not in server.log and "Traceback" not in server.log, server.log[-2000:]


def test_ask_why_runs_a_patching_experiment_and_draws_its_heatmap(app_url, page):
    """The default model: “frog” against “boat” after a frog and after a boat. What the cells hold
    is tested against transformers and run_trace elsewhere (test_patching, test_explore_app); here,
    that a user's typing and clicking gets the heatmaps drawn with no error."""
    page.goto(app_url + "/explore?model=default&view=Ask+why&prompt=" + quote("Zoe had a frog. Zoe loved the"))
    settled(page)
    expect(page.locator(".gtitle", has_text="What each part writes into").first).to_be_visible(timeout=60_000)
    page.get_by_role("textbox", name="Explain the logit of").fill(" frog")
    page.get_by_role("textbox", name="Explain the logit of").press("Enter")
    settled(page)
    page.get_by_role("textbox", name="Compared with").fill(" boat")
    page.get_by_role("textbox", name="Compared with").press("Enter")
    settled(page)
    page.get_by_role("textbox", name="Corrupted prompt").fill("Zoe had a boat. Zoe loved the")
    page.get_by_role("button", name="Patch").click()
    settled(page)
    expect(page.locator(".gtitle", has_text="Fraction restored: patched").first).to_be_visible(timeout=60_000)
    expect(page.locator(".gtitle", has_text="Attribution patching's estimate").first).to_be_visible()
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("[data-testid='stAlert']").filter(has_text="error").count() == 0
