"""``python -m glassbox.model.tools.capture_kernels [T]``: where full capture's GPU time goes.

On a GPU a small model's pass is launch-bound: its time follows the number of kernels, not
their arithmetic. For a GPT-2-small-shaped model (random weights, float32) at T tokens (default
128) this counts, with torch.profiler, the CUDA kernels of a plain forward and of a full capture
(``run_trace``), and lists the kernels capture adds, most frequent first: what a reduction of
launches (fused statistics, a shared causal mask, CUDA graphs) has to remove. On a CPU it counts
the top-level aten operations instead (each a launch on a GPU).
"""

from __future__ import annotations

import collections
import json
import sys

import torch


def census(fn, cuda: bool) -> collections.Counter:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    counts = collections.Counter()
    for event in prof.events():
        if cuda and event.device_type == torch.autograd.DeviceType.CUDA:
            counts[event.name[:60]] += 1
        elif (
            not cuda
            and event.name.startswith("aten::")
            and (event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::"))
        ):
            counts[event.name] += 1
    return counts


def main(n_tokens: int = 128) -> dict:
    from glassbox.model.engine import build_model, default_device, run_trace
    from glassbox.model.io.catalog import entry

    device = default_device()
    cfg = entry("openai-community/gpt2").model_config
    model = build_model(cfg).init_weights(0).to(device).eval()
    tokens = list(range(n_tokens))
    ids = torch.tensor([tokens], device=device)
    cuda = device.type == "cuda"
    with torch.no_grad():
        for _ in range(2):  # warm-up: the first calls pick kernels and allocate
            model(ids)
            run_trace(model, tokens)
        plain = census(lambda: model(ids), cuda)
        captured = census(lambda: run_trace(model, tokens), cuda)
    added = captured - plain
    return {
        "device": str(device),
        "tokens": n_tokens,
        "counted": "CUDA kernels" if cuda else "top-level aten ops",
        "forward": sum(plain.values()),
        "capture": sum(captured.values()),
        "added_by_capture": added.most_common(20),
    }


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:2])), indent=1))
