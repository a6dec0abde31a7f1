"""Smoke test of `python -m model bench` on a tiny config: it runs and reports sane numbers.
Nothing here asserts on speed; the timings of a tiny model on a shared machine mean nothing."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import require

ROOT = Path(__file__).resolve().parent.parent


def positive_finite(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.mark.subprocess
def test_bench_small_writes_ratios_and_memory(tmp_path):
    out = tmp_path / "out.json"
    run = subprocess.run(
        [sys.executable, "-m", "glassbox", "bench", "--small", "--repeats", "5", "--lengths", "8", "16", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    require("transformers")
    run = subprocess.run(
        [sys.executable, "-m", "glassbox", "bench", "--peers", "--small", "--repeats", "1", "--lengths", "8", "16"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # two lengths × four rows, and two more rows per length where TransformerLens is installed
    rows = 12 if importlib.util.find_spec("transformer_lens") else 8
    assert "same tokens: True" in run.stdout and run.stdout.count("÷ transformers forward") == rows


@pytest.mark.subprocess
def test_bench_rejects_too_few_repeats():
    run = subprocess.run(
        [sys.executable, "-m", "glassbox", "bench", "--repeats", "2"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2 and "repeats" in run.stderr


@pytest.mark.long
@pytest.mark.browser
@pytest.mark.subprocess
def test_view_benchmark_times_views_and_interactions_in_chromium(tmp_path):
    """Smoke test of python -m app.bench --small: two views and the Overview opened twice,
    each interaction timed twice (tests/test_browser.py opens every view)."""
    out = tmp_path / "views.json"
    result = subprocess.run(
        [sys.executable, "-m", "glassbox.app.bench", "--small", "--views", "Backward,Export", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["n_tokens"] == 24
    assert set(report["views"]) == {"Overview", "Backward", "Export"}
    assert all(v["first_s"] > 0 and v["reopen_s"] > 0 for v in report["views"].values())
    assert all(len(v["reopens"]) == 1 for v in report["views"].values())
    assert len(report["step_changes"]["Backward step change"]) == 1
    assert report["step_changes"]["Attention head change"] == []  # 24 tokens: the page draws the head, timed below
    worked = report["in_the_page"]  # the worked example and the sliders: each step, click and slide waited on in Chromium
    assert (
        len(worked["first open"]) == len(worked["first open (streamlit run)"]) == 1
        and len(worked["step change"]) == len(worked["cell click"]) == 2
    )
    assert len(worked["playground slider"]) == len(worked["playground step"]) == 2
    assert len(worked["Attention head, 24 tokens, in the page"]) == len(worked["Attention query, 24 tokens, in the page"]) == 2
    assert len(worked["Attention block, 24 tokens, in the page"]) >= 1  # a tiny model: every block is sent
    assert all(t["drawn_s"] > 0 for runs in worked.values() for t in runs)


@pytest.mark.browser
@pytest.mark.subprocess
def test_load_script_drives_sessions_at_once_and_checks_their_losses():
    """Smoke test of python -m app.bench.load --small --sessions 2. Reference for its one real check:
    each session's loss, as its page prints it, against `glassbox trace` on the same prompt
    (the script exits 1 on a mismatch or an error)."""
    result = subprocess.run(
        [sys.executable, "-m", "glassbox.app.bench.load", "--small", "--sessions", "2", "--timeout", "300"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "errors: 0" in result.stdout and "in 2 of 2 sessions, 0 mismatched" in result.stdout


TINY_SHAPES = {  # the curated entries' config.json with tiny sizes: their keys, their model classes
    "google-bert/bert-base-uncased": dict(
        vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    ),
    "google-t5/t5-small": dict(vocab_size=320, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4),
}


@pytest.mark.parametrize("hub_id", list(TINY_SHAPES))
def test_family_bench_builds_loads_traces_an_encoder_and_an_encoder_decoder(hub_id, tmp_path):
    """The family bench's two halves (family_bench.write, as build does, then measure) on tiny shapes of the
    curated BERT and T5, in this process (the bench runs each half in one of its own; a tiny model needs no
    isolation). Reference for the counts: transformers' BertForMaskedLM / T5ForConditionalGeneration of the same
    config, parameters counted on the meta device; the rest are sanity checks (the timings of a tiny model mean
    nothing)."""
    transformers = require("transformers")
    import torch

    from glassbox.model.io.catalog import entry
    from glassbox.model.tools import family_bench

    config = dict(entry(hub_id).config, **TINY_SHAPES[hub_id])
    family_bench.write(config, tmp_path)
    with torch.device("meta"):
        hf = family_bench.auto_class(config["model_type"]).from_config(transformers.AutoConfig.for_model(**config))
    assert type(hf).__name__ == {"bert": "BertForMaskedLM", "t5": "T5ForConditionalGeneration"}[config["model_type"]]
    r = family_bench.measure(hub_id, tmp_path)
    assert r["parameters"] == family_bench.parameters(config) == sum(p.numel() for p in hf.parameters())
    assert r["kind"] == {"bert": "encoder", "t5": "encoder-decoder"}[config["model_type"]]
    assert all(positive_finite(r[k]) for k in ("load_s", "trace_s"))
    assert r["stored_bytes"] > 4 * r["parameters"] and r["trace_bytes"] > 4 * r["parameters"]  # weights, gradients
    assert r["peak_rss_bytes"] > r["trace_bytes"] and r["trace_tensors"] > 0
    if r["kind"] == "encoder":  # nothing to generate
        assert r["generate_tokens_per_s"] is None and "n/a (encoder)" in family_bench.row(r)
    else:
        assert positive_finite(r["generate_tokens_per_s"])
    assert family_bench.row(r).split()[:2] == [hub_id, f"{r['parameters'] / 1e6:.0f}M"]


@pytest.mark.parametrize("analysis", ["steer", "heads", "path-patch", "path-patch-all", "verify"])
def test_the_analyses_bench_times_each_call(gpt2_dir, analysis):
    """Smoke test of `bench --analyses`' measuring half (model/tools/analyses_bench.py), in this
    process on the tests' tiny GPT-2 folder: each call runs and is timed."""
    from glassbox.model.tools.analyses_bench import measure

    r = measure(analysis, gpt2_dir)
    assert r["analysis"] == analysis and positive_finite(r["seconds"]) and r["peak_rss_bytes"] > 0


def test_view_benchmark_rejects_a_view_it_does_not_time():
    run = subprocess.run(
        [sys.executable, "-m", "glassbox.app.bench", "--views", "Atention"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (
        run.returncode == 2 and "no view Atention" in run.stderr and run.stderr.count("\n") <= 3
    )  # argparse's usage, then the line
