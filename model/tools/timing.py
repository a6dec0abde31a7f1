"""Timing for the benchmarks: medians of interleaved runs, with the device synchronised around
each (model/tools/bench.py, peers_bench.py)."""

from __future__ import annotations

import statistics
import time

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fns: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Each function's median time in ms over ``repeats`` runs after one warm-up, interleaved:
    each run times every function once, so that drift hits them all alike."""
    times = {name: [] for name in fns}
    for run in range(repeats + 1):  # run 0 is the warm-up
        for name, fn in fns.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            if run:
                times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(ts) for name, ts in times.items()}
