"""``python -m app.bench``: how long each explorer view takes to open, in a real browser.

A GPT-2-small-shaped model (random weights, float32, 124M parameters, written to a temporary
directory with the default model's tokenizer) and a 512-token prompt from the story grammar.
The app is started with Streamlit and driven by Chromium (Playwright, /usr/bin/chromium). Each
view is opened by clicking it, and timed from the click until the script is idle and the
view's chart (or download button) is on screen: first visit (cold: its trace is computed; for
the Overview, where the page opens, from loading the page) and second visit (warm: the trace
comes from the cache). The report states each time also as a
multiple of one plain forward pass of the same prompt, measured in this process just before
(median of 5), since absolute seconds depend on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import torch

from model.data.stories import corpus
from model.engine import Transformer
from model.io.checkpoint import load, save
from model.tools.bench import GPT2_SMALL, TINY

# what marks each view as drawn: a chart title, or for Export its download button
VIEWS = {"Overview": "Parameters per part", "Tokens & embeddings": "PCA of embed.W_E", "Attention": "Every head's pattern",
         "LayerNorm": "Per position", "FFN": "Fraction of neurons active", "Residual stream": "Top token after each block",
         "Backward": "Input saliency", "Export": None}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


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


def serve(port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "model", "app", "--server.port", str(port), "--server.headless", "true",
                               "--browser.gatherUsageStats", "false"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(240):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("the app did not start")


def time_views(url: str, rounds: int = 2) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    times = {view: [] for view in VIEWS}
    idle = "[data-testid='stApp'][data-test-script-state='notRunning']"

    def drawn(view: str) -> None:
        page.wait_for_selector(idle, timeout=600_000)
        title = VIEWS[view]
        marker = (page.get_by_role("button", name="Download the trace as .npz") if title is None
                  else page.locator(".gtitle", has_text=title).first)
        marker.wait_for(timeout=600_000)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        start = time.perf_counter()  # the page opens on the Overview: its first open includes loading the page
        page.goto(url)
        page.wait_for_timeout(500)
        drawn("Overview")
        times["Overview"].append(time.perf_counter() - start)
        for round_ in range(rounds):
            for view in list(VIEWS)[1 - min(round_, 1):]:  # the first round starts after the Overview
                start = time.perf_counter()
                page.get_by_role("radio", name=view, exact=True).click()
                page.wait_for_function("v => new URLSearchParams(location.search).get('view') === v", arg=view,
                                       timeout=600_000)
                drawn(view)
                times[view].append(time.perf_counter() - start)
        browser.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="a tiny model and a 24-token prompt, for a smoke test")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        path, prompt = checkpoint(Path(tmp) / "model", args.small)
        n_tokens = len(load(str(path)).encode(prompt))
        forward = forward_seconds(path, prompt)
        server = serve(port)
        try:
            query = urllib.parse.urlencode({"model": str(path), "prompt": prompt, "view": "Overview"})
            times = time_views(f"http://127.0.0.1:{port}/explore?{query}")
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
    cfg = config(args.small)
    print(f"model    {'tiny (--small)' if args.small else 'GPT-2-small shape'}, random weights, float32, "
          f"{cfg.n_layers} layers × {cfg.n_heads} heads, d_model {cfg.d_model}, vocab {cfg.vocab_size}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"prompt   {n_tokens} tokens; one plain forward pass: {forward * 1000:.0f} ms (median of 5)")
    print(f"\n{'view':<22}{'first open':>12}{'reopen':>10}{'first ÷ fwd':>14}{'reopen ÷ fwd':>14}")
    for view, (cold, warm) in times.items():
        print(f"{view:<22}{cold:>11.2f}s{warm:>9.2f}s{cold / forward:>14.1f}{warm / forward:>14.1f}")
    if args.json:
        args.json.write_text(json.dumps({"n_tokens": n_tokens, "forward_s": forward, "config": cfg.to_dict(),
                                         "views": {v: {"first_s": c, "reopen_s": w} for v, (c, w) in times.items()}},
                                        indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
