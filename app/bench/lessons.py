"""``python -m app.bench lessons``: how fast each lesson of the course opens and answers, in a real browser.

For every lesson in glassbox.model.course.LESSONS (or those given with ``--lessons``), a fresh app
server (`glassbox app`, headless, GLASSBOX_TIMING on) and a fresh Chromium context (Playwright,
/usr/bin/chromium):

- **first paint, cold**: the lesson opened first on the fresh server, timed in the page from
  navigation start until the script is idle, the lesson's title is shown, no spinner is left and
  every plotly chart and in-page element is drawn;
- **first paint, warm**: the same lesson opened again (a new session on the same server: what
  the first visit cached is reused);
- **its main control**, moved ``--repeats`` times: the control named for it in CONTROLS, else the
  page's first slider (an in-page one, ``.gb-lesson input[type=range]``, before Streamlit's), radio
  group, list or text box. An in-page slider is timed from its input event until
  two animation frames later (app/bench/views.py's SLIDE: the page redraws synchronously); a
  server control from the key press (or click) until the rerun it started has ended and the page
  is drawn again (the script state seen running, then idle). The server's own seconds for those
  runs are read from GLASSBOX_TIMING (app/components/timing.py).

Targets (issue 45): a control ≤ 0.1 s where its math runs in the page, ≤ 0.5 s otherwise; first
paint ≤ 2 s warm, ≤ 5 s cold. Printed as a Markdown table; ``--json`` also writes every sample.
This is a measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from glassbox.app.bench.views import CHROMIUM_ARGS, SLIDE, ServerClock, serve
from glassbox.app.replicas import free_port
from glassbox.model.course import LESSON, LESSONS
from glassbox.model.engine.files import write_text

TARGETS = {"in the page": 0.1, "rerun": 0.5, "warm": 2.0, "cold": 5.0}
# each lesson's main control, by its label; a lesson missing here (or whose control is not found)
# gets the page's first slider, radio group, list or text box
CONTROLS = {
    "tokens": "Merges learned",
    "attention": "Angle of its query (degrees)",
    "sqrt-dk": "Score multiplier c",
    "multi-head": "Block",
    "positions": "Offset k",
    "mask": "Head",
    "mlp": "Neuron",
    "layernorm": "x1",
    "residual": "The token whose logit to split (the model's top 5)",
    "objective": "p(correct next token)",
    "kv-cache": "Model",
    "efficiency": "Window w",
    "key-figures": "Model",
    "scaling": "Models in the fit",
    "zero-one-layer": "Head",
    "induction": "The query's position (in the repeat)",
    "moe": "Capacity factor C",
    "cross-attention": "Head",
}

# the page drawn: its script idle, the lesson's title shown, no spinner, every chart and in-page element drawn
PAINTED = """(title) => {
    const app = document.querySelector("[data-testid='stApp']");
    if (!app || app.dataset.testScriptState !== 'notRunning') return false;
    if (document.querySelector("[data-testid='stException']")) return -1;  // the page failed: reported, not timed
    if (![...document.querySelectorAll('h1')].some((h) => h.textContent.includes(title))) return false;
    if (document.querySelector("[data-testid='stSpinner']")) return false;
    for (const chart of document.querySelectorAll("[data-testid='stPlotlyChart']"))
        if (!chart.querySelector('.main-svg')) return false;
    for (const lesson of document.querySelectorAll('.gb-lesson')) if (!lesson.dataset.drawn) return false;
    return performance.now() / 1000; }"""
# before a server control is moved: note the first key or click, and the script state's changes after it
ARM_RUN = """() => {
    window.__clicked = null; window.__ran = false; window.__settled = null;
    const note = () => { window.__clicked = window.__clicked ?? performance.now(); };
    for (const type of ['click', 'keydown']) document.addEventListener(type, note, {capture: true, once: true});
    const app = document.querySelector("[data-testid='stApp']");
    window.__watch?.disconnect();
    window.__watch = new MutationObserver(() => {
        const state = app.dataset.testScriptState;
        if (state === 'running') window.__ran = true;
        else if (state === 'notRunning' && window.__ran) window.__settled = performance.now();
    });
    window.__watch.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']}); }"""
# the rerun a control started has ended and the page is drawn again: seconds since the key or click
SETTLED = """() => {
    if (window.__clicked === null || window.__settled === null) return false;
    const app = document.querySelector("[data-testid='stApp']");
    if (app.dataset.testScriptState !== 'notRunning' || document.querySelector("[data-testid='stSpinner']")) return false;
    for (const chart of document.querySelectorAll("[data-testid='stPlotlyChart']"))
        if (!chart.querySelector('.main-svg')) return false;
    return (performance.now() - window.__clicked) / 1000; }"""


class NotDrawn(Exception):
    pass


def painted(page, url: str, title: str, timeout: float) -> float:
    """Seconds from navigation start until the lesson at ``url`` is drawn (PAINTED)."""
    page.goto(url)
    try:
        seconds = page.wait_for_function(PAINTED, arg=title, polling="raf", timeout=timeout * 1000).json_value()
    except PlaywrightTimeout:
        raise NotDrawn(f"not drawn within {timeout:g} s") from None
    if seconds < 0:
        raise NotDrawn("the page showed an exception")
    return seconds


CANDIDATES = """() => document.querySelector("[data-testid='stMain']").querySelector(
    ".gb-lesson input[type=range], [role=slider], [role=radiogroup], [role=combobox], input[type=text], textarea")"""
ROLES = ("slider", "radiogroup", "combobox", "textbox")  # Streamlit's sliders (select sliders too), radios, lists, text


def find_control(page, slug: str):
    """(kind, label, locator) of the lesson's main control: CONTROLS' label if the page has it,
    else the first in-page slider, Streamlit slider, radio, list or text box; None where there is none."""
    label = CONTROLS.get(slug)
    try:  # a page under load may draw its in-page elements a moment after its script is idle
        page.wait_for_function(CANDIDATES, polling="raf", timeout=10_000)
    except PlaywrightTimeout:
        return None
    main = page.locator("[data-testid='stMain']")  # not the sidebar's
    in_page = main.locator(".gb-lesson input[type=range]")
    if label:
        named = in_page.and_(page.get_by_label(label, exact=True))
        if named.count():
            return "in the page", label, named.first
        for role in ROLES:
            found = main.get_by_role(role, name=label, exact=True)
            if found.count():
                return role, label, found.first
    if in_page.count():
        return "in the page", in_page.first.get_attribute("aria-label") or "slider", in_page.first
    for role in ROLES:
        found = main.get_by_role(role)
        if found.count():
            return role, found.first.get_attribute("aria-label") or role, found.first
    return None


def move(page, kind: str, control, i: int, timeout: float) -> float:
    """Seconds until the page shows the ``i``-th move of ``control`` (see the module's docstring)."""
    if kind == "in the page":
        low, high = float(control.get_attribute("min")), float(control.get_attribute("max"))
        step = float(control.get_attribute("step") or 1)
        value = low + round(((0.2 + 0.37 * i) % 1) * (high - low) / step) * step  # spread over the range
        return control.evaluate(SLIDE, value)
    if kind == "combobox":
        control.click()  # the list opens (not timed); the key that picks the next entry is
    page.evaluate(ARM_RUN)
    if kind == "slider":
        at_top = control.get_attribute("aria-valuenow") == control.get_attribute("aria-valuemax")
        control.focus()
        page.keyboard.press("ArrowLeft" if at_top or i % 2 else "ArrowRight")
    elif kind == "combobox":
        page.keyboard.press("ArrowUp" if i % 2 else "ArrowDown")
        page.keyboard.press("Enter")
    elif kind == "textbox":
        control.fill("the cat sat on the mat" if i % 2 else "the dog ran to the park")
        control.press("Enter")
    else:  # a radio group: its next option, by its label (the input itself is drawn hidden)
        options = control.locator("label")
        options.nth((i + 1) % options.count()).click()
    return page.wait_for_function(SETTLED, polling="raf", timeout=timeout * 1000).json_value()


def measure(slug: str, repeats: int, tmp: Path, timeout: float) -> dict:
    """One lesson on a fresh server: its cold and warm first paint, and ``repeats`` moves of its control."""
    from playwright.sync_api import sync_playwright

    lesson = LESSON[slug]
    port = free_port()
    clock = ServerClock(tmp / f"timing-{slug}.jsonl")
    server = serve(port, clock.path)
    url, title = f"http://127.0.0.1:{port}/{lesson.url_path}", f"{LESSONS.index(lesson) + 1}. {lesson.title}"
    result = {"slug": slug, "title": lesson.title}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1600})
                result["cold_s"] = painted(page, url, title, timeout)
                logged = clock.seen
                result["cold_server_s"] = clock.read()[0]
                # what the cold visit's server time went to: its runs and the model passes they computed, by name
                result["cold_log"] = [json.loads(line) for line in clock.path.read_text().splitlines()[logged:]]
                result["warm_s"], result["warm_server_s"] = painted(page, url, title, timeout), clock.read()[0]
                found = find_control(page, slug)
                if found:
                    kind, label, control = found
                    moves = []
                    result["control"] = {
                        "label": label,
                        "kind": kind,
                        "where": "in the page" if kind == "in the page" else "rerun",
                        "moves": moves,
                    }
                    for i in range(repeats):
                        moves.append({"drawn_s": move(page, kind, control, i, timeout)})
                        page.wait_for_timeout(300)  # an in-page slider may send its value back: let that rerun end
                        page.wait_for_selector(
                            "[data-testid='stApp'][data-test-script-state='notRunning']", timeout=timeout * 1000
                        )
                        moves[-1]["server_s"] = clock.read()[0]
            except NotDrawn as exc:
                result["error"] = str(exc)
            except PlaywrightTimeout as exc:
                seen = page.evaluate("() => ({clicked: window.__clicked, ran: window.__ran, settled: window.__settled})")
                result["control"]["error"] = f"the page was not drawn again within {timeout:g} s"
                result["control"]["detail"] = {"seen": seen, "exception": str(exc).splitlines()[0]}
            finally:
                browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    return result


def verdict(seconds: float | None, target: float) -> str:
    return "–" if seconds is None else ("✓" if seconds <= target else "✗")


def table(results: list[dict]) -> str:
    """The results as a Markdown table, each time against its target."""
    rows = [
        "| lesson | first paint, cold (≤ 5 s) | first paint, warm (≤ 2 s) | main control | where | "
        "control, median drawn | server | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['slug']} | {r['error']} |" + " |" * 6)
            continue
        control = r.get("control")
        if control and control.get("error"):
            cells = [control["label"], control["where"], control["error"], "", ""]
        elif control:
            drawn = statistics.median(m["drawn_s"] for m in control["moves"])
            server = statistics.median(m["server_s"] for m in control["moves"])
            target = TARGETS[control["where"]]
            cells = [
                control["label"],
                control["where"],
                f"{drawn:.3f} s {verdict(drawn, target)}",
                f"{server:.2f} s",
                f"≤ {target} s",
            ]
        else:
            cells = ["(none found)", "", "", "", ""]
        rows.append(
            f"| {r['slug']} | {r['cold_s']:.2f} s {verdict(r['cold_s'], TARGETS['cold'])} | "
            f"{r['warm_s']:.2f} s {verdict(r['warm_s'], TARGETS['warm'])} | " + " | ".join(cells) + " |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench lessons", description=__doc__.split("\n")[0])
    parser.add_argument("--lessons", help="comma-separated slugs (default: every lesson)")
    parser.add_argument("--repeats", type=int, default=5, help="moves of each lesson's main control (default 5)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a lesson may take to be drawn (default 300)")
    parser.add_argument("--json", type=Path, help="also write every sample to this JSON file")
    args = parser.parse_args(argv)
    slugs = args.lessons.split(",") if args.lessons else [lesson.slug for lesson in LESSONS]
    unknown = [s for s in slugs if s not in LESSON]
    if unknown:
        parser.exit(2, f"{parser.prog}: no lesson {', '.join(unknown)}: the lessons are {', '.join(LESSON)}\n")
    results = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for slug in slugs:
            results.append(measure(slug, args.repeats, Path(tmp), args.timeout))
            print(f"measured {slug}: " + table(results[-1:]).splitlines()[-1], flush=True)  # kept if the run is cut short
            if args.json:
                write_text(args.json, json.dumps({"targets": TARGETS, "lessons": results}, indent=2))
    print(
        f"\n{len(results)} lessons, a fresh server each, in {time.perf_counter() - started:.0f} s; "
        f"targets: a control ≤ {TARGETS['in the page']} s in the page, ≤ {TARGETS['rerun']} s by a rerun\n"
    )
    print(table(results))
    if args.json:
        write_text(args.json, json.dumps({"targets": TARGETS, "lessons": results}, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
