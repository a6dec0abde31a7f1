"""Smoke test of `python -m model bench` on a tiny config: it runs and reports sane numbers.
Nothing here asserts on speed; the timings of a tiny model on a shared machine mean nothing."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def positive_finite(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.mark.subprocess
def test_bench_small_writes_ratios_and_memory(tmp_path):
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, "-m", "model", "bench", "--small", "--repeats", "5", "--lengths", "8", "16",
                          "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "capture ÷ forward" in run.stdout
    report = json.loads(out.read_text())
    assert [r["length"] for r in report["results"]] == [8, 16]
    for r in report["results"]:
        assert positive_finite(r["capture_forward_ratio"]) and positive_finite(r["traced_backward_ratio"])
        assert all(positive_finite(ms) for ms in r["median_ms"].values())
        # the trace's own bytes are exact; the backward trace adds every gradient on top
        assert r["capture_forward_trace_bytes"] >= r["capture_forward_trace_distinct_bytes"] > 0
        assert r["traced_backward_trace_bytes"] > r["capture_forward_trace_bytes"]
        # a tiny model's peak can hide inside pages the process already holds: 0 is legitimate
        for key in ("capture_forward_peak_bytes", "traced_backward_peak_bytes"):
            assert r[key] is None or (isinstance(r[key], int) and r[key] >= 0), key


@pytest.mark.subprocess
def test_bench_peers_runs_beside_transformers_on_the_same_weights():
    """Reference for the one assertion that is not a smoke check: transformers' own greedy
    `generate` on the same weights gives the same 64 tokens as Glassbox's (the bench exits 1 if not)."""
    pytest.importorskip("transformers")
    run = subprocess.run([sys.executable, "-m", "model", "bench", "--peers", "--small", "--repeats", "1", "--lengths",
                          "8", "16"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # two lengths × four rows, and two more rows per length where TransformerLens is installed
    rows = 12 if importlib.util.find_spec("transformer_lens") else 8
    assert "same tokens: True" in run.stdout and run.stdout.count("÷ transformers forward") == rows


@pytest.mark.subprocess
def test_bench_rejects_too_few_repeats():
    run = subprocess.run([sys.executable, "-m", "model", "bench", "--repeats", "2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "repeats" in run.stderr


@pytest.mark.browser
@pytest.mark.subprocess
def test_view_benchmark_opens_every_view_in_chromium(tmp_path):
    """Smoke test of python -m app.bench --small: every view is opened four times and timed."""
    out = tmp_path / "views.json"
    result = subprocess.run([sys.executable, "-m", "app.bench", "--small", "--json", str(out)], capture_output=True,
                            text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["n_tokens"] == 24
    assert set(report["views"]) == {"Overview", "Tokens & embeddings", "Attention", "LayerNorm", "FFN",
                                    "Residual stream", "Backward", "Ask why", "Circuits", "Export"}
    assert all(v["first_s"] > 0 and v["reopen_s"] > 0 for v in report["views"].values())
    assert all(len(v["reopens"]) == 3 for v in report["views"].values())


@pytest.mark.browser
@pytest.mark.subprocess
def test_load_script_drives_sessions_at_once_and_checks_their_losses():
    """Smoke test of python -m app.load --small --sessions 2. Reference for its one real check:
    each session's loss, as its page prints it, against `glassbox trace` on the same prompt
    (the script exits 1 on a mismatch or an error)."""
    result = subprocess.run([sys.executable, "-m", "app.load", "--small", "--sessions", "2", "--timeout", "300"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "errors: 0" in result.stdout and "in 2 of 2 sessions, 0 mismatched" in result.stdout
