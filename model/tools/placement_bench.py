"""``python -m glassbox.model.tools.placement_bench [HUB_ID]``: a model split across devices
beside the same model on one, side by side in one process.

The model (default GPT-2 small's shape, random weights, as ``bench --families`` builds it) is
loaded twice: whole on this machine's device, and split with half its blocks held elsewhere
(beside a GPU: on the CPU, offloaded to the GPU for their forward; on a CPU: on the disk). A
traced backward of 128 tokens runs on each. Printed: the largest difference over every tensor
and every gradient (the offloaded weights' included), each placement's seconds, and the memory
the GPU holds after the load and at the trace's peak (on a CPU, the process's peak RSS).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time

import torch


def main(hub_id: str = "openai-community/gpt2") -> dict:
    from glassbox.model.engine import default_device, run_trace
    from glassbox.model.engine.placement import parts
    from glassbox.model.io.checkpoint import load

    gpu = default_device().type == "cuda"
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [sys.executable, "-m", "glassbox.model.tools.family_bench", "build", hub_id, folder], check=True, capture_output=True
        )
        tokens = torch.randint(0, 1000, (128,), generator=torch.Generator().manual_seed(0)).tolist()
        results = {"model": hub_id, "device": str(default_device()), "tokens": len(tokens)}
        traces = {}
        for name in ("whole", "split"):
            if gpu:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            if name == "whole":
                loaded = load(folder, dtype="float32")
            else:
                probe = load(folder, dtype="float32", device="cpu")
                n = probe.cfg.n_layers
                elsewhere = "cpu" if gpu else "disk"
                mapping = {part: (0 if gpu else "cpu") for part in parts(probe.model)}
                mapping |= {f"blocks.{i}": elsewhere for i in range(n // 2, n)}
                del probe
                loaded = load(folder, dtype="float32", device_map=mapping)
            held = torch.cuda.memory_allocated() if gpu else None
            started = time.perf_counter()
            trace = run_trace(loaded.model, tokens, backward=True)
            if gpu:
                torch.cuda.synchronize()
            results[name] = {
                "seconds": time.perf_counter() - started,
                "gpu_bytes_after_load": held,
                "gpu_peak_bytes": torch.cuda.max_memory_allocated() if gpu else None,
            }
            traces[name] = {n: trace[n].cpu() for n in trace.names()}  # off the GPU: the next load is measured alone
            del loaded, trace
        whole, split = traces["whole"], traces["split"]
        results["largest_difference"] = max(float((whole[n] - split[n]).abs().nan_to_num().max()) for n in whole)
        results["names_compared"] = len(whole)
        results["same_names"] = list(whole) == list(split)
    results["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return results


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:2])))
