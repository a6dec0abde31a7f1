"""``glassbox bench --graph``: what an attribution graph costs against the prompt's length.

On the bundled default model with its shipped transcoders (default-transcoders), for prompts of
``LENGTHS`` tokens (bundled stories, up to the model's context) and the model's likeliest next
token as the target: the seconds to build the graph with ``BATCH`` targets per backward pass, and,
side by side up to ``ONE_BY_ONE_UP_TO`` tokens, with one target per pass (what the graph cost
before batching); the nodes, the dense edge matrix's size, the peak resident memory the build
added (bench.peak_increase: the process's VmHWM, or the GPU's allocator) and the completeness (|edges + bias − logit|).
It runs on the default device: a GPU where there is one (GLASSBOX_DEVICE chooses)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from glassbox.model.analysis.attribution_graph import BATCH, attribution_graph
from glassbox.model.engine.files import write_text
from glassbox.model.tools.bench import peak_increase

LENGTHS = (8, 16, 32, 64, 128)
ONE_BY_ONE_UP_TO = 32


def measure(loaded, transcoders, tokens: list[int], batch: int) -> dict:
    """One graph of the likeliest next token after ``tokens``: its seconds and sizes."""
    model = loaded.model
    with torch.no_grad():
        token = int(model(torch.tensor([tokens], device=model.device)).logits[0, -1].argmax())
    started = time.perf_counter()
    graph, peak = peak_increase(lambda: attribution_graph(model, tokens, transcoders, token, batch=batch), model.device)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "nodes": len(graph.nodes),
        "features": sum(n.kind == "feature" for n in graph.nodes),
        "edges_mb": graph.edges.numel() * graph.edges.element_size() / 2**20,
        "peak_added_mb": None if peak is None else peak / 2**20,  # the process's, or the GPU's
        "completeness": graph.completeness(),
    }


def run(json_path: Path | None) -> int:
    from glassbox.model.data.stories import corpus
    from glassbox.model.io.checkpoint import load
    from glassbox.model.io.sae import load_transcoders

    loaded = load("default")
    device = loaded.model.device.type
    transcoders = load_transcoders("default-transcoders", loaded.model.embed.W_E.dtype, loaded.model.device)
    stream = loaded.encode(" ".join(corpus(12)))
    lengths = [n for n in LENGTHS if n <= loaded.cfg.n_ctx]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}; default model, default-transcoders")
    print(f"{'tokens':>6} {'nodes':>6} {'features':>8} {f'batch {BATCH} s':>11} {'one by one s':>13} {'ratio':>6} "
          f"{'edges MB':>9} {'peak +MB':>9} {'|Σ−logit|':>10}")  # fmt: skip
    rows = []
    measure(loaded, transcoders, stream[:8], BATCH)  # warm-up
    for n in lengths:
        row = {"tokens": n, **measure(loaded, transcoders, stream[:n], BATCH)}
        if n <= ONE_BY_ONE_UP_TO:
            row["one_by_one_seconds"] = measure(loaded, transcoders, stream[:n], 1)["seconds"]
        rows.append(row)
        one, peak = row.get("one_by_one_seconds"), row["peak_added_mb"]
        one_text, ratio = ("", "") if one is None else (f"{one:.2f}", f"{one / row['seconds']:.1f}×")
        print(
            f"{n:>6} {row['nodes']:>6} {row['features']:>8} {row['seconds']:>11.2f} {one_text:>13} {ratio:>6} "
            f"{row['edges_mb']:>9.1f} {'' if peak is None else f'{peak:.0f}':>9} {row['completeness']:>10.1e}"
        )
    if json_path:
        write_text(json_path, json.dumps({"device": device, "threads": torch.get_num_threads(), "rows": rows}, indent=2))
        print(f"\nwrote {json_path}")
    return 0
