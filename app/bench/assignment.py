"""``python -m app.bench.assignment``: what forty students opening one assignment link cost the
server, against one student.

A fresh server (`glassbox app`, 127.0.0.1) per run. Run 1: one Chromium session opens the link.
Run 2: ``--sessions`` sessions (40 by default, each its own browser context: no shared cookies or
storage) open the same link, ``--wave`` at a time. With ``--distinct``, run 3: as many sessions, each
with its own prompt and seed (what the same class would cost without a shared link). For each run:
the server's CPU seconds (its process tree, from /proc), its script seconds and the model passes
and exercise sets it computed (GLASSBOX_TIMING's log: app/components/timing.py), its peak resident
memory, and each session's seconds until the exercises were drawn. A session counts as done when
the page is idle with its first exercise on screen and the banner shows the assignment.

This is a measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from glassbox.app.bench.load import _tree_rss, tree_pids
from glassbox.app.bench.views import CHROMIUM_ARGS, IDLE, serve
from glassbox.app.replicas import free_port
from glassbox.model.course.assignments import Assignment
from glassbox.model.data.stories import corpus

LINK = Assignment("mask", prompt="Lily had a red ball. She threw the ball to her dog.", seed=7)


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children, so far."""
    ticks = 0
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def run(links: list[str], wave: int, timeout: float) -> dict:
    """A fresh server; each link opened by its own browser context, ``wave`` at a time."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.jsonl"
        server = serve(port, timing)
        peak, stop = [0], threading.Event()

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], _tree_rss(server.pid))
                time.sleep(0.1)

        threading.Thread(target=watch, daemon=True).start()
        idle_rss, cpu_before = _tree_rss(server.pid), _tree_cpu_seconds(server.pid)
        seconds, failed = [], 0
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                for first in range(0, len(links), wave):
                    contexts = [browser.new_context(viewport={"width": 1280, "height": 800}) for _ in links[first : first + wave]]
                    pages = [c.new_page() for c in contexts]
                    started = time.perf_counter()
                    for page, link in zip(pages, links[first : first + wave]):
                        page.goto(f"http://127.0.0.1:{port}/{link}", wait_until="commit")
                    for page in pages:
                        try:
                            page.get_by_text("Exercise 1", exact=False).first.wait_for(timeout=timeout * 1000)
                            page.wait_for_selector(IDLE, timeout=timeout * 1000)
                            seconds.append(time.perf_counter() - started)
                        except Exception as exc:  # noqa: BLE001 (a timeout: counted, the run goes on)
                            failed += 1
                            print(f"a session failed: {type(exc).__name__}", file=sys.stderr)
                    for c in contexts:
                        c.close()
                browser.close()
            time.sleep(0.5)  # the last run's log line
            cpu = _tree_cpu_seconds(server.pid) - cpu_before
        finally:
            stop.set()
            os.killpg(server.pid, 15)
        log = [json.loads(line) for line in timing.read_text().splitlines()] if timing.exists() else []
    return {
        "sessions": len(links),
        "failed": failed,
        "server_cpu_s": round(cpu, 2),
        "script_s": round(sum(r["seconds"] for r in log if "run" in r), 2),
        "passes": sum(1 for r in log if "compute" in r and not r["compute"].startswith("exercises")),
        "exercise_sets": sum(1 for r in log if str(r.get("compute", "")).startswith("exercises")),
        "idle_rss_mib": round(idle_rss / 2**20),
        "peak_rss_mib": round(peak[0] / 2**20),
        "p50_s": round(statistics.median(seconds), 2) if seconds else None,
        "max_s": round(max(seconds), 2) if seconds else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.assignment", description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=40, help="students opening the link (default 40)")
    parser.add_argument("--wave", type=int, default=8, help="sessions opened at once (default 8)")
    parser.add_argument("--distinct", action="store_true", help="also: as many sessions, each its own prompt and seed")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a session may take")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    link = LINK.url("").lstrip("/")
    results = {"link": link, "one": run([link], 1, args.timeout), "shared": run([link] * args.sessions, args.wave, args.timeout)}
    if args.distinct:
        prompts = [story.split(". ")[0] + "." for story in corpus(args.sessions, seed=300)]  # one sentence each
        results["distinct"] = run(
            [Assignment("mask", prompt=p, seed=i).url("").lstrip("/") for i, p in enumerate(prompts)], args.wave, args.timeout
        )
    print(f"assignment link: /{link}")
    print(
        "| run | sessions | failed | server CPU s | script s | model passes | exercise sets | peak MiB (idle) | p50 s | max s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if name != "link":
            print(
                f"| {name} | {r['sessions']} | {r['failed']} | {r['server_cpu_s']} | {r['script_s']} | {r['passes']} "
                f"| {r['exercise_sets']} | {r['peak_rss_mib']} ({r['idle_rss_mib']}) | {r['p50_s']} | {r['max_s']} |"
            )
    one, shared = results["one"], results["shared"]
    if one["server_cpu_s"]:
        print(
            f"{shared['sessions']} sessions on one link: {shared['server_cpu_s'] / one['server_cpu_s']:.1f}× one "
            f"session's server CPU, {shared['passes']} model passes against {one['passes']}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["failed"] for n, r in results.items() if n != "link") else 0


if __name__ == "__main__":
    sys.exit(main())
