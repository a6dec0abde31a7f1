"""``python -m app.bench``: how long each explorer view takes to open, in a real browser.

A GPT-2-small-shaped model (random weights, float32, 124M parameters, written to a temporary
directory with the default model's tokenizer) and a 512-token prompt from the story grammar.
The app is started with Streamlit and driven by Chromium (Playwright, /usr/bin/chromium). Each
view is opened by clicking it, and timed in the page from the click event until the script is
idle and the view's chart (or download button) is on screen: its first visit (cold: its trace
is computed; for the Overview, where the page opens, from loading the page) and three revisits
(warm: the trace comes from the cache; their median is reported); then three steps of the
explorer's backward pass and three head changes in its Attention view. Before those, on the fresh server: the worked example's first open (and at the end on another fresh server, started with plain `streamlit run app/main.py`), five
steps and five cell clicks, which the page answers itself (app/components/step_player.js); after
them, five moves of the playground's temperature slider on the same model and prompt, and five
step changes of an 8-token generation, also answered in the page (app/components/sampling_controls.js,
generation_player.js). Beside each time until drawn is the server's own time for the runs it caused
(GLASSBOX_TIMING, app/components/timing.py). The goals are printed with them: a reopen or a
step change within 0.2 s of server time and 0.5 s until drawn, a first open within one plain
forward pass of the same prompt (measured in this process just before, median of 5) plus 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import torch

from glassbox.app.replicas import free_port
from glassbox.model.data.stories import corpus
from glassbox.model.engine import Transformer
from glassbox.model.engine.files import write_text
from glassbox.model.io.checkpoint import load, save
from glassbox.model.tools.bench import GPT2_SMALL, TINY

# what marks each view as drawn: a chart title, or for Export its download button
VIEWS = {
    "Overview": "Parameters per part",
    "Tokens & embeddings": "Token embeddings W_E[token]",  # the first tab (the others, the PCA among them, are lazy)
    "Attention": "Every head's pattern",
    "LayerNorm": "Per position",
    "MLP": "Fraction of neurons active",
    "Residual stream": "Top token after each block",
    "Backward": "∂L/∂",  # a step's gradient, drawn in the page (its first tab; the other parts are lazy tabs)
    "Ask why": "What each part writes into",
    "Circuits": "QK circuit",
    "Export": None,
}  # Compare needs a second prompt typed: not timed
TITLES = ".gtitle, .gb-map-title"  # a plotly chart's title, or a map's drawn in the page (page_kit.js: mapNode)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def config(small: bool):
    return dataclasses.replace(TINY, vocab_size=598) if small else GPT2_SMALL  # 598: the default tokenizer's


def checkpoint(directory: Path, small: bool) -> tuple[Path, str]:
    """A random model of the benchmark's shape, and a prompt of its length in tokens."""
    tokenizer = load("default").tokenizer
    cfg = config(small)
    model = Transformer(cfg).init_weights(0).float()
    save(directory, model, tokenizer, "float32", {"source": "random weights for the view benchmark"})
    length = 24 if small else 512
    ids = tokenizer.encode(" ".join(corpus(60, seed=1)))[:length]
    return directory, tokenizer.decode(ids)


def forward_seconds(path: Path, prompt: str) -> float:
    loaded = load(str(path))
    ids = torch.tensor([loaded.encode(prompt)])
    times = []
    with torch.no_grad():
        for run in range(6):
            start = time.perf_counter()
            loaded.model(ids)
            if run:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


APP = Path(__file__).resolve().parents[1] / "main.py"
START_COMMANDS = {  # the two commands the docs give, each with Streamlit's options after it
    "glassbox app": ["-m", "glassbox", "app"],
    "streamlit run": ["-m", "streamlit", "run", str(APP)],
}


def serve(port: int, timing: Path | None = None, command: str = "glassbox app") -> subprocess.Popen:
    """The app on ``port``, started with ``command`` (one of START_COMMANDS); with ``timing``, its
    server logs each run's seconds there."""
    env = {**os.environ, **({"GLASSBOX_TIMING": str(timing)} if timing else {})}
    server = subprocess.Popen(
        [
            sys.executable,
            *START_COMMANDS[command],
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    for _ in range(240):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("the app did not start")


class ServerClock:
    """The server's own time for what a click made it run: the script and fragment runs
    app/components/timing.py logs (GLASSBOX_TIMING) since the last reading."""

    def __init__(self, path: Path):
        self.path, self.seen = path, 0

    def read(self) -> tuple[float, float]:
        """(server seconds, of which computing traces) since the last reading."""
        time.sleep(0.2)  # the log line is written as the run ends, just before the browser hears so
        lines = [json.loads(line) for line in (self.path.read_text().splitlines() if self.path.exists() else [])]
        new, self.seen = lines[self.seen :], len(lines)
        return (sum(r["seconds"] for r in new if "run" in r), sum(r["seconds"] for r in new if "compute" in r))


IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"


@contextlib.contextmanager
def chromium_page():
    """A 1400 × 1600 page of Debian's Chromium, driven by Playwright, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1600})
        finally:
            browser.close()


# Time until drawn is measured in the page: from the click (or key) event, armed before each, to
# the first animation frame where the script is idle and the view's marker is on screen. So
# Playwright's own round trips are not counted (they added ~0.05 s).
ARM = """() => { window.__clicked = null;
    const note = () => { window.__clicked = window.__clicked ?? performance.now(); };
    for (const type of ['click', 'keydown']) document.addEventListener(type, note, {capture: true, once: true}); }"""
DRAWN = """([title, idle]) => {
    if (window.__clicked === null || !document.querySelector(idle)) return false;
    const shown = title === null
        ? [...document.querySelectorAll('button')].some(b => b.textContent.includes('Download the trace'))
        : [...document.querySelectorAll('.gtitle, .gb-map-title')].some(e => e.textContent.includes(title));
    return shown ? (performance.now() - window.__clicked) / 1000 : false; }"""


# the Backward view's step as the page shows it (app/components/backward_player.js); a step change is
# drawn at the first animation frame where the page shows another
STEP_SHOWN_NOW = "() => document.querySelector('.gb-backward').dataset.step"
STEP_DRAWN = """(before) => {
    const root = document.querySelector('.gb-backward');
    if (window.__clicked === null || !root || root.dataset.step === before) return false;
    return (performance.now() - window.__clicked) / 1000; }"""
STEP_CHANGES = (
    "Backward step change",
    "Attention head change",
)  # within a view: in the page; a server rerun (a long prompt's head)
IN_PAGE_TOKENS = 128  # the Attention view's prompt for its in-page timings: GPT-2 small's block fits the page


def time_views(
    url: str, clock: ServerClock, reopens: int = 3, views: list[str] | None = None
) -> dict[str, list[tuple[float, float, float]]]:
    """Per view (``views``, the Overview first; by default every one in VIEWS), (until drawn,
    server, of which traces) seconds of its first open and of ``reopens`` reopens; then of as many
    backward-step changes in the explorer."""
    views = list(VIEWS) if views is None else ["Overview", *[v for v in views if v != "Overview"]]
    times = {view: [] for view in views} | {name: [] for name in STEP_CHANGES}

    def timed_click(click, title: str | None, changes_url: bool = True) -> float:
        before = page.url
        page.evaluate(ARM)
        click()
        if changes_url:  # the rerun has begun: the page is no longer the one before
            page.wait_for_function("u => window.location.href !== u", arg=before, timeout=600_000)
        return page.wait_for_function(DRAWN, arg=[title, IDLE], polling="raf", timeout=600_000).json_value()

    with chromium_page() as page:
        start = time.perf_counter()  # the page opens on the Overview: its first open includes loading the page
        page.goto(url)
        page.wait_for_timeout(500)
        page.wait_for_selector(IDLE, timeout=600_000)
        page.locator(TITLES, has_text=VIEWS["Overview"]).first.wait_for(timeout=600_000)
        times["Overview"].append((time.perf_counter() - start, *clock.read()))
        for round_ in range(1 + reopens):
            for view in views[1 - min(round_, 1) :]:  # the first round starts after the Overview
                drawn = timed_click(lambda: page.get_by_role("radio", name=view, exact=True).click(), VIEWS[view])  # noqa: B023 (clicked now)
                times[view].append((drawn, *clock.read()))
        page.get_by_role("radio", name="Backward", exact=True).click()
        page.locator(TITLES, has_text=VIEWS["Backward"]).first.wait_for(timeout=600_000)
        page.wait_for_selector(IDLE, timeout=600_000)
        clock.read()
        for _ in range(reopens):  # in the page; then the server's part of the step (its rerun) is let end
            before = page.evaluate(STEP_SHOWN_NOW)
            page.evaluate(ARM)
            page.locator(".gb-backward").get_by_role("button", name="Next ▶").click()
            drawn = page.wait_for_function(STEP_DRAWN, arg=before, polling="raf", timeout=600_000).json_value()
            page.wait_for_timeout(300)
            page.wait_for_selector(IDLE, timeout=600_000)
            times["Backward step change"].append((drawn, *clock.read()))
        page.get_by_role("radio", name="Attention", exact=True).click()
        page.locator(TITLES, has_text=VIEWS["Attention"]).first.wait_for(timeout=600_000)
        page.wait_for_selector(IDLE, timeout=600_000)
        clock.read()
        if page.locator(".gb-attention").count():  # drawn in the page (a short prompt): timed by time_attention
            return times
        for head in (2, 3, 4):  # the Head list: the chosen head's scores, mask and pattern drawn again
            box = page.get_by_role("combobox", name="Head")
            box.click()
            box.press_sequentially(f"head {head} (")  # the list filters to that head; Enter chooses it
            drawn = timed_click(lambda: page.keyboard.press("Enter"), "Pattern: softmax")
            times["Attention head change"].append((drawn, *clock.read()))
    return times


# A head or a query chosen in the page: from the click (or the list's change) until two animation
# frames after the page has drawn it (app/components/attention_head.js)
CHOOSE = """([kind, index]) => new Promise((done) => {
    const start = performance.now();
    if (kind === 'head') document.querySelectorAll('.gb-attention .gb-head')[index].click();
    else {  // a list, by its label: 'Query position', or 'Block' where the page has or fetches every block
        const box = [...document.querySelectorAll('.gb-attention label')].find((l) => l.textContent.startsWith(kind));
        const list = box.querySelector('select');
        list.value = String(index);
        list.dispatchEvent(new Event('change', {bubbles: true}));
    }
    // drawn: at once, or (a block the page fetches) once its data-block is the new one
    const drawn = () => kind !== 'Block' || document.querySelector('.gb-attention').dataset.block === String(index);
    const frame = () => drawn() ? requestAnimationFrame(() => done((performance.now() - start) / 1000)) : requestAnimationFrame(frame);
    requestAnimationFrame(frame);
})"""
BLOCK_DRAWN = """(block) => {
    const root = document.querySelector('.gb-attention');
    if (window.__clicked === null || !root || root.dataset.block !== block) return false;
    return (performance.now() - window.__clicked) / 1000; }"""


def time_attention(
    url: str, clock: ServerClock, n_layers: int, n_tokens: int, repeats: int = 5
) -> dict[str, list[tuple[float, float]]]:
    """(until drawn, server) seconds of the Attention view answered in the page, on a prompt of
    ``n_tokens``: five head changes and five query changes (in the page: with every head's scores
    sent, or, over app/components/attention_head.py's IN_PAGE_BYTES, computed there from the sent
    queries and keys), then three block changes: in the page where every block is sent (a small
    model) or fetched by the page (app/served.py: a trace with every block's queries and keys), else
    a server rerun that sends the new block's heads, timed until the page has drawn them."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    names = {kind: f"Attention {kind}, {n_tokens} tokens" for kind in ("head", "query", "block")}
    times = {
        names["head"] + ", in the page": [],
        names["query"] + ", in the page": [],
        names["block"] + " (rerun)": [],
        names["block"] + ", in the page": [],
    }
    with chromium_page() as page:
        page.goto(url)
        page.locator(".gb-attention .gb-arithmetic .katex").first.wait_for(timeout=600_000)
        page.wait_for_selector(IDLE, timeout=600_000)
        clock.read()

        def chosen(kind: str, index: int, name: str) -> None:
            before = page.url
            times[name].append((page.evaluate(CHOOSE, [kind, index]), 0.0))
            try:  # the rerun the choice sends back (its URL, the charts below) settles before the next
                page.wait_for_function("u => window.location.href !== u", arg=before, timeout=1500)
            except PlaywrightTimeout:  # a choice that was already made sends none
                pass
            page.wait_for_selector(IDLE, timeout=600_000)
            clock.read()

        for kind, name, picks in (
            ("head", names["head"] + ", in the page", (1, 2, 3, 0, 2)),
            ("Query position", names["query"] + ", in the page", (3, 9, 17, 1, 12)),
        ):
            for index in picks[:repeats]:
                chosen(kind, index, name)
        in_page = page.locator(".gb-attention label", has_text="Block").count() > 0
        for block in (1, 2, 0)[: max(1, n_layers - 1)]:
            if in_page:  # the page has (a small model) or fetches every block
                chosen("Block", block, names["block"] + ", in the page")
                continue
            box = page.get_by_role("combobox", name="Block")
            box.click()
            box.press_sequentially(f"block {block + 1} (")
            page.evaluate(ARM)
            page.keyboard.press("Enter")
            drawn = page.wait_for_function(BLOCK_DRAWN, arg=str(block), polling="raf", timeout=600_000).json_value()
            page.wait_for_selector(IDLE, timeout=600_000)
            times[names["block"] + " (rerun)"].append((drawn, clock.read()[0]))
    return times


# The worked example is played in the page (app/components/step_player.js): a step or a cell is
# drawn when the player's data-step (or its arithmetic's data-cell) is the new one and its KaTeX is set.
PLAYED = """([selector, attribute, before]) => {
    const node = document.querySelector(selector);
    if (window.__clicked === null || !node || node.dataset[attribute] === before) return false;
    if (node.querySelector('.gb-math[data-pending]') || !document.querySelector('.gb-arithmetic .katex')) return false;
    return (performance.now() - window.__clicked) / 1000; }"""


# the worked example's first open, timed in the page from its request (the navigation's start) to
# the first animation frame with a step's arithmetic typeset (Playwright's own wait added 0.2–0.4 s)
FIRST_DRAWN = """() => document.querySelector('.gb-player .gb-arithmetic .katex') ? performance.now() / 1000 : false"""


def first_open(page, base: str, clock: ServerClock) -> tuple[float, float]:
    """(until drawn, server) seconds of the worked example opened in ``page``."""
    page.goto(base + "/worked-example?step=b1-scores", wait_until="commit")
    drawn = page.wait_for_function(FIRST_DRAWN, polling="raf", timeout=600_000).json_value()
    return drawn, clock.read()[0]


def time_first_open_plain(directory: Path) -> tuple[float, float]:
    """The worked example's first open on a fresh server started with plain `streamlit run app/main.py`."""
    port = free_port()
    clock = ServerClock(directory / "timing-plain.jsonl")
    server = serve(port, clock.path, "streamlit run")
    try:
        with chromium_page() as page:
            return first_open(page, f"http://127.0.0.1:{port}", clock)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def time_worked_example(base: str, clock: ServerClock, repeats: int = 5) -> dict[str, list[tuple[float, float]]]:
    """(until drawn, server) seconds of the worked example's first open on this server (from the
    page's request to its first step drawn with its arithmetic), then of ``repeats`` step
    changes by the → key and ``repeats`` cell clicks."""
    times = {"first open": [], "step change": [], "cell click": []}
    with chromium_page() as page:
        times["first open"].append(first_open(page, base, clock))
        page.wait_for_selector(IDLE, timeout=600_000)
        clock.read()
        for _ in range(repeats):
            before = page.locator(".gb-player").get_attribute("data-step")
            page.evaluate(ARM)
            page.keyboard.press("ArrowRight")
            drawn = page.wait_for_function(PLAYED, arg=[".gb-player", "step", before], polling="raf", timeout=60_000).json_value()
            times["step change"].append((drawn, clock.read()[0]))
        for i in range(repeats):
            cells = page.locator(".gb-player td.gb-clickable")
            before = page.locator(".gb-arithmetic").get_attribute("data-cell")
            page.evaluate(ARM)
            cells.nth((3 * i + 1) % cells.count()).click()
            drawn = page.wait_for_function(
                PLAYED, arg=[".gb-arithmetic", "cell", before], polling="raf", timeout=60_000
            ).json_value()
            times["cell click"].append((drawn, clock.read()[0]))
    return times


# a slider moved in the page: from the input event until two animation frames later (the redraw painted)
SLIDE = """(input, value) => new Promise((done) => {
    const start = performance.now();
    input.value = value;
    input.dispatchEvent(new Event("input", {bubbles: true}));
    requestAnimationFrame(() => requestAnimationFrame(() => done((performance.now() - start) / 1000)));
})"""


# a generation step chosen in the page: from the click until two animation frames after it is drawn
PICK = """(button) => new Promise((done) => {
    const start = performance.now();
    button.click();
    requestAnimationFrame(() => requestAnimationFrame(() => done((performance.now() - start) / 1000)));
})"""


def time_playground(url: str, clock: ServerClock, repeats: int = 5) -> dict[str, list[tuple[float, float]]]:
    """(until drawn, server) seconds of five temperature changes on the playground at ``url``,
    which the page answers itself (app/components/sampling_controls.js): the whole vocabulary's
    distribution computed again and the chart redrawn; then, after one generation of 8 tokens,
    five step changes (app/components/generation_player.js: a step's distributions and KV cache)."""
    times = {"playground slider": [], "playground step": []}
    with chromium_page() as page:
        page.goto(url + "&max_new=8")
        page.locator(".gb-chart[data-drawn]").wait_for(timeout=600_000)
        page.wait_for_selector(IDLE, timeout=600_000)
        clock.read()
        for value in (0.5, 1.3, 0.8, 1.7, 0.3)[:repeats]:
            drawn = page.locator("input[data-setting=temperature]").evaluate(SLIDE, value)
            times["playground slider"].append((drawn, clock.read()[0]))
        page.locator(".gb-sampling .gb-action").click()
        page.locator(".gb-generation .gb-math .katex").first.wait_for(timeout=600_000)
        page.wait_for_selector(IDLE, timeout=600_000)
        clock.read()
        for step in (3, 5, 1, 7, 2)[:repeats]:
            drawn = page.locator(".gb-generation .gb-step").nth(step).evaluate(PICK)
            assert page.locator(".gb-generation").get_attribute("data-step") == str(step)
            times["playground step"].append((drawn, clock.read()[0]))
    return times


def reopened(runs: list[tuple[float, float, float]]) -> tuple[float, float]:
    """The median until drawn and the median server time of a view's reopens (all but its first open)."""
    return statistics.median(r[0] for r in runs[1:]), statistics.median(r[1] for r in runs[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--small",
        action="store_true",
        help="a tiny model and a 24-token prompt, each interaction timed twice and each view reopened once: a smoke test",
    )
    parser.add_argument(
        "--views", help=f"comma-separated views to time (default: all of {', '.join(VIEWS)}; the Overview always)"
    )
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    views = None if not args.views else [v.strip() for v in args.views.split(",")]
    unknown = [v for v in views or [] if v not in VIEWS]
    if unknown:
        parser.error(f"no view {', '.join(unknown)}: the views timed are {', '.join(VIEWS)}")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path, prompt = checkpoint(Path(tmp) / "model", args.small)
        n_tokens = len(load(str(path)).encode(prompt))
        forward = forward_seconds(path, prompt)
        clock = ServerClock(Path(tmp) / "timing.jsonl")
        server = serve(port, clock.path)
        try:
            query = urllib.parse.urlencode({"model": str(path), "prompt": prompt, "view": "Overview"})
            repeats, reopens = (2, 1) if args.small else (5, 3)
            worked = time_worked_example(f"http://127.0.0.1:{port}", clock, repeats)
            times = time_views(f"http://127.0.0.1:{port}/explore?{query}", clock, reopens, views)
            loaded = load(str(path))
            # the whole prompt (over 128 tokens the page computes the scores from q and k), then its first 128 tokens
            for tokens in dict.fromkeys((n_tokens, min(n_tokens, IN_PAGE_TOKENS))):
                short = loaded.tokenizer.decode(loaded.encode(prompt)[:tokens])
                attention = time_attention(
                    f"http://127.0.0.1:{port}/explore?"
                    + urllib.parse.urlencode(
                        {"model": str(path), "prompt": short, "view": "Attention", "pos": "20", "key_pos": "3"}
                    ),
                    clock,
                    loaded.cfg.n_layers,
                    tokens,
                    repeats,
                )
                worked |= {name: runs for name, runs in attention.items() if runs}  # one kind of block change ran
            worked |= time_playground(f"http://127.0.0.1:{port}/playground?{query}", clock, repeats)
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
        worked["first open (streamlit run)"] = [time_first_open_plain(Path(tmp))]
    cfg = config(args.small)
    print(
        f"model    {'tiny (--small)' if args.small else 'GPT-2-small shape'}, random weights, float32, "
        f"{cfg.n_layers} layers × {cfg.n_heads} heads, d_model {cfg.d_model}, vocab {cfg.vocab_size}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"prompt   {n_tokens} tokens; one plain forward pass: {forward * 1000:.0f} ms (median of 5)")
    print(
        "goals    reopen or step change: ≤ 0.2 s of server time and ≤ 0.5 s until drawn; "
        f"first open ≤ one forward pass + 1 s = {forward + 1:.2f} s"
    )
    print(f"\n{'view':<22}{'first open: drawn':>19}{'server':>9}{'trace':>8}{'rest':>7}{'reopen: drawn':>15}{'server':>9}")
    for view in (v for v in VIEWS if v in times):  # those timed (--views)
        (cold, cold_server, cold_trace), warm, warm_server = times[view][0], *reopened(times[view])
        print(
            f"{view:<22}{cold:>18.2f}s{cold_server:>8.2f}s{cold_trace:>7.2f}s{cold_server - cold_trace:>6.2f}s"
            f"{warm:>14.2f}s{warm_server:>8.2f}s"
        )
    print(f"\n{'within a view (median of 3)':<34}{'drawn':>8}{'server':>9}{'trace':>8}")
    for name in (n for n in STEP_CHANGES if times[n]):  # a head drawn in the page is timed below instead
        drawn, server_time, trace_time = (statistics.median(t[k] for t in times[name]) for k in range(3))
        print(f"{name:<34}{drawn:>7.2f}s{server_time:>8.2f}s{trace_time:>7.2f}s")
    print(
        "\nanswered in the page (goals: a worked-example step or cell ≤ 0.1 s drawn, its first open on a fresh "
        "server ≤ 1.5 s with either start command; a playground slider or step ≤ 0.15 s)"
    )
    print(f"{'':<44}{'drawn':>8}{'server':>9}")
    for name, runs in worked.items():
        label = name if name.startswith("first open") else f"{name} (median of {len(runs)})"
        drawn, server_time = (statistics.median(t[k] for t in runs) for k in range(2))
        print(f"{label:<44}{drawn:>7.3f}s{server_time:>8.2f}s")
    print(
        "\n(trace: the model's own passes inside the server time (traces; Ask why's attribution, ablation and logit "
        "split; Circuits' head scores); rest: everything else the page did)"
    )
    if args.json:
        write_text(
            args.json,
            json.dumps(
                {
                    "n_tokens": n_tokens,
                    "forward_s": forward,
                    "config": cfg.to_dict(),
                    "views": {
                        v: {
                            "first_s": times[v][0][0],
                            "first_server_s": times[v][0][1],
                            "first_trace_s": times[v][0][2],
                            "reopen_s": reopened(times[v])[0],
                            "reopen_server_s": reopened(times[v])[1],
                            "reopens": [{"drawn_s": t, "server_s": s} for t, s, _ in times[v][1:]],
                        }
                        for v in VIEWS
                        if v in times
                    },
                    "step_changes": {
                        n: [{"drawn_s": t, "server_s": s, "trace_s": c} for t, s, c in times[n]] for n in STEP_CHANGES
                    },
                    "in_the_page": {n: [{"drawn_s": t, "server_s": s} for t, s in runs] for n, runs in worked.items()},
                },
                indent=2,
            ),
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
