"""``python -m app.bench.fairness``: do light requests wait behind long ones? (issue 43, item 3)

The README's public-hosting setup (``GLASSBOX_HUB=0``, ``GLASSBOX_MODEL_DIRS=``,
``GLASSBOX_TRACE_BUDGET_GB=2``) on 127.0.0.1. A sixth visitor opens the playground (until its
chart is drawn in the page) and the worked example (until its step player shows), each in a new
browser session, ``--repeats`` times: first on an idle server, then while ``--visitors``
visitors each run the heaviest computation this setup offers (Train it live's mixture of
experts, ``--steps`` steps; about a minute each on 2 cores). Reported: the median of each,
their ratio (the issue's target: at most 1.5), how many long computations were running and
waiting meanwhile, and the server's CPU time. ``--slots`` sets GLASSBOX_LONG_SLOTS (default:
the server's own, half the cores).

This is a measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time

from glassbox.app.bench.views import CHROMIUM_ARGS, serve
from glassbox.app.replicas import free_port

PUBLIC = {"GLASSBOX_HUB": "0", "GLASSBOX_MODEL_DIRS": "", "GLASSBOX_TRACE_BUDGET_GB": "2"}
TIMEOUT_MS = 180_000


def opened(browser, url: str, path: str, ready: str) -> float:
    """Seconds from a new session's first request to ``ready`` on the page."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    try:
        start = time.perf_counter()
        page.goto(url + path, wait_until="commit")
        page.locator(ready).first.wait_for(timeout=TIMEOUT_MS)
        return time.perf_counter() - start
    finally:
        page.context.close()


def light(browser, url: str, repeats: int) -> dict[str, float]:
    """The sixth visitor's two pages, the median of ``repeats`` opens each."""
    return {
        "playground": statistics.median(opened(browser, url, "/playground", ".gb-chart[data-drawn]") for _ in range(repeats)),
        "worked example": statistics.median(
            opened(browser, url, "/worked-example", ".gb-player .gb-title") for _ in range(repeats)
        ),
    }


def start_training(browser, url: str, steps: int):
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(url + "/train")
    page.get_by_role("tab", name="A mixture of experts").click(timeout=TIMEOUT_MS)
    box = page.get_by_label("Steps").last
    box.fill(str(steps))
    box.press("Tab")
    page.get_by_role("button", name="Train the experts").click()
    page.get_by_text(re.compile(r"Training the experts:")).first.wait_for(timeout=TIMEOUT_MS)
    return page


def states(pages) -> tuple[int, int]:
    """(running, waiting) among the heavy visitors' pages, as their bars say."""
    texts = [p.inner_text("body") for p in pages]
    return (
        sum(bool(re.search(r"Training the experts:\W*step", t)) for t in texts),
        sum("waiting for its turn" in t for t in texts),
    )


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.fairness", description=__doc__.split("\n")[0])
    parser.add_argument("--visitors", type=int, default=5, help="visitors running a long computation each (1..16)")
    parser.add_argument("--steps", type=int, default=600, help="training steps each (10..600)")
    parser.add_argument("--repeats", type=int, default=3, help="opens of each light page, idle and loaded")
    parser.add_argument("--slots", type=int, default=None, help="GLASSBOX_LONG_SLOTS for the server")
    args = parser.parse_args(argv)
    if not 1 <= args.visitors <= 16 or not 10 <= args.steps <= 600 or not 1 <= args.repeats <= 10:
        parser.error("--visitors 1..16, --steps 10..600, --repeats 1..10")
    from playwright.sync_api import sync_playwright

    os.environ.update(PUBLIC)
    if args.slots is not None:
        os.environ["GLASSBOX_LONG_SLOTS"] = str(args.slots)
    port = free_port()
    server = serve(port)
    url = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            light(browser, url, 1)  # the models loaded and the pages compiled once, as on a server in use
            idle = light(browser, url, args.repeats)
            heavy = [start_training(browser, url, args.steps) for _ in range(args.visitors)]
            cpu_before, started = cpu_seconds(server.pid), time.perf_counter()
            before = states(heavy)
            loaded = light(browser, url, args.repeats)
            after = states(heavy)
            cpu = (cpu_seconds(server.pid) - cpu_before) / (time.perf_counter() - started)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(
        f"server: {PUBLIC}, long slots {os.environ.get('GLASSBOX_LONG_SLOTS', 'default (half the cores)')}, "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{args.visitors} visitors each training the experts for {args.steps} steps; running/waiting when the "
        f"sixth visitor began {before[0]}/{before[1]}, when it ended {after[0]}/{after[1]}; server CPU "
        f"{cpu:.2f} s a second meanwhile"
    )
    print(f"{'page':16} {'idle (s)':>9} {'loaded (s)':>11} {'ratio':>6}")
    for name in idle:
        print(f"{name:16} {idle[name]:9.2f} {loaded[name]:11.2f} {loaded[name] / idle[name]:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
