"""``python -m app.bench.load --sessions N``: N real Chromium sessions at once on one server.

A GPT-2-small-shaped model (random weights; ``--small``: a tiny one) and a prompt of
``--tokens`` tokens (300 by default), as in app/bench/views.py. The app is started on 127.0.0.1 with
that model's folder allowed (GLASSBOX_MODEL_DIRS); N pages open the explorer's Backward view on
the same model at the same moment, each with its own prompt (the story grammar with a different
seed, so no two share a trace). Reported: each session's time until its saliency chart is drawn
(percentiles), the sessions that showed an error, the server's peak resident memory (polled
from /proc every 0.1 s, the server and its children) and the trace budget it ran under.
Each session's loss, as the page prints it, is checked against `glassbox trace` on the same
prompt. Bounded: at most 32 sessions, 127.0.0.1 only, ``--timeout`` seconds in all.

With ``--replicas N`` the sessions go to N app processes behind nginx (app/replicas.py), each
browser kept on one replica by its route cookie; reported too: how many sessions each replica
served, and the replicas' peak memory together.

This is a measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from glassbox.app.bench.views import CHROMIUM_ARGS, TITLES, VIEWS, checkpoint, serve
from glassbox.app.replicas import free_port
from glassbox.model.data.stories import corpus

MAX_SESSIONS = 32


def tree_pids(pid: int) -> list[int]:
    """A process and its children (the Streamlit server under `glassbox app`)."""
    try:
        return [pid, *(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    except OSError:
        return [pid]


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and its children (the Streamlit server under `glassbox app`)."""
    total = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _prompts(n: int, n_tokens: int) -> list[str]:
    from glassbox.model.io.checkpoint import load

    tokenizer = load("default").tokenizer
    return [tokenizer.decode(tokenizer.encode(" ".join(corpus(40, seed=100 + i)))[:n_tokens]) for i in range(n)]


def _cli_loss(model: str, prompt: str) -> float:
    with tempfile.NamedTemporaryFile(suffix=".npz") as npz:
        out = subprocess.run(
            [sys.executable, "-m", "glassbox", "trace", "--model", model, "--prompt", prompt, "--backward", "--npz", npz.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return float(re.search(r"loss\s+([0-9.]+)", out).group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.load", description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=4, help=f"browser sessions at once (1..{MAX_SESSIONS})")
    parser.add_argument("--tokens", type=int, default=300, help="prompt length in tokens")
    parser.add_argument("--small", action="store_true", help="a tiny model, for a smoke run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    parser.add_argument("--replicas", type=int, default=0, help="app processes behind nginx (default 0: one server alone)")
    args = parser.parse_args(argv)
    if not 1 <= args.sessions <= MAX_SESSIONS:
        parser.error(f"--sessions must be 1..{MAX_SESSIONS}")
    from playwright.sync_api import sync_playwright

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        folder, _ = checkpoint(Path(tmp) / "model", args.small)
        prompts = _prompts(args.sessions, 24 if args.small else args.tokens)
        os.environ["GLASSBOX_MODEL_DIRS"] = tmp
        from glassbox.model.engine import default_device
        from glassbox.model.serving.admission import default_budget

        budget = default_budget(default_device())  # as the server computes it at its start
        if args.replicas:
            from glassbox.app.replicas import start

            deployment = start(args.replicas, port, Path(tmp) / "nginx")
            servers = deployment.replicas
        else:
            deployment, servers = None, [serve(port)]
        peak, stop = [0], threading.Event()

        def rss() -> int:
            return sum(_tree_rss(server.pid) for server in servers)

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], rss())
                time.sleep(0.1)

        threading.Thread(target=watch, daemon=True).start()
        base_rss = rss()
        url = f"http://127.0.0.1:{port}/explore"
        served_by = [None] * args.sessions
        times, errors, losses = [None] * args.sessions, [], [None] * args.sessions
        deadline = time.perf_counter() + args.timeout
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                pages = [browser.new_page(viewport={"width": 1280, "height": 1400}) for _ in prompts]
                start = time.perf_counter()
                for i, (page, prompt) in enumerate(zip(pages, prompts)):
                    from urllib.parse import urlencode

                    response = page.goto(
                        f"{url}?{urlencode({'model': str(folder), 'prompt': prompt, 'view': 'Backward'})}", wait_until="commit"
                    )
                    served_by[i] = response.headers.get("x-glassbox-replica") if response else None
                for i, page in enumerate(pages):
                    left = max(1.0, deadline - time.perf_counter())
                    try:
                        page.locator(TITLES, has_text=VIEWS["Backward"]).first.wait_for(timeout=left * 1000)
                        times[i] = time.perf_counter() - start
                        body = page.inner_text("body")
                        if "Something went wrong" in body:
                            errors.append(i)
                        found = re.search(r"loss[^0-9]{0,40}([0-9]+\.[0-9]{3,})", body)
                        losses[i] = float(found.group(1)) if found else None
                    except Exception as exc:  # noqa: BLE001 (a timeout: reported, the run goes on)
                        errors.append(i)
                        print(f"session {i}: {type(exc).__name__}")
                browser.close()
        finally:
            stop.set()
            if deployment:
                deployment.stop()
            else:
                os.killpg(servers[0].pid, 15)
        done = sorted(t for t in times if t is not None)
        print(
            f"{args.sessions} sessions, Backward view, {len(prompts[0].split())}-word prompts "
            f"({'tiny model' if args.small else 'GPT-2-small shape'}), on 127.0.0.1"
        )
        if args.replicas:
            counts = {r: served_by.count(r) for r in sorted(set(served_by), key=str)}
            print(f"{args.replicas} replicas behind nginx; sessions per replica: {counts}")
        if done:
            q = statistics.quantiles(done, n=10) if len(done) > 1 else [done[0]] * 9
            print(f"seconds to drawn: p50 {statistics.median(done):.1f}, p90 {q[8]:.1f}, max {done[-1]:.1f}")
        print(f"errors: {len(errors)} {errors if errors else ''}")
        print(
            f"server memory{' (the replicas together)' if args.replicas else ''}: {base_rss / 2**30:.2f} GiB idle, "
            f"peak {peak[0] / 2**30:.2f} GiB; trace budget about {budget / 2**30:.2f} GiB" + (" each" if args.replicas else "")
        )
        checked = [(i, losses[i]) for i in range(args.sessions) if losses[i] is not None]
        mismatched = [i for i, shown in checked if abs(shown - _cli_loss(str(folder), prompts[i])) > 5e-4]
        print(
            f"loss checked against `glassbox trace` in {len(checked)} of {args.sessions} sessions, {len(mismatched)} mismatched"
        )
        return 1 if errors or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
