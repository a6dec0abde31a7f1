"""``glassbox bench`` (``python -m model bench``): what full capture costs, in time and memory.

A GPT-2-small-shaped model (random weights, float32, eval) runs four variants per length:

  forward          ``model(ids)`` under no_grad, no capture active
  capture forward  ``run_trace(model, tokens)``: every named tensor recorded
  forward+backward ``model(ids, targets)`` then ``autograd.grad`` of the loss w.r.t. all parameters
  traced fwd+bwd   ``run_trace(..., backward=True)``: also the gradient of every activation

Full capture is not free: it materialises the attention pattern instead of the fused kernel,
each head's separate output, the log-probabilities and probabilities, and (backward) keeps
every activation's gradient. The report is the two ratios, capture ÷ plain, side by side
with the absolute medians. Absolute times depend on the machine, its threads and its load;
the ratio of two variants timed in the same process, interleaved run by run so that drift
(thermal, turbo, other processes) hits both alike, is what stays comparable across machines
and is what the targets are stated in. Medians of the repeats, after one warm-up of each.

Memory: the exact bytes the returned trace holds (sum of nbytes of its activations, plus its
gradients for the backward trace), and the peak increase of the process's memory during one
call: resident memory on CPU (Linux: VmHWM reset via /proc/self/clear_refs, after malloc_trim
so that heap freed by earlier runs does not hide it), allocated memory on CUDA.

On CPU the traced variants take ~1-3 GB of fresh memory per call at T = 512. Where the OS is
slow to hand out pages (page faults in a VM), that, not arithmetic, dominates the traced ratio;
an allocator that keeps freed memory (e.g. MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<large>,
or THP_MEM_ALLOC_ENABLE=1) shows the compute overhead alone. The `glassbox` command sets
THP_MEM_ALLOC_ENABLE=1 when its process starts, unless the environment already sets it
(model/api/cli/__init__.py); the report prints the value in force.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
from pathlib import Path

import torch

from glassbox.model.engine import GlassboxError, ModelConfig, Transformer, default_device, next_token_targets, run_trace
from glassbox.model.engine.files import write_text
from glassbox.model.tools.timing import median_ms

GPT2_SMALL = ModelConfig(vocab_size=50257, n_ctx=1024, d_model=768, n_layers=12, n_heads=12, d_ff=3072)
TINY = ModelConfig(vocab_size=64, n_ctx=32, d_model=32, n_layers=2, n_heads=4, d_ff=128)
TARGETS = {"capture_forward_ratio": 1.25, "traced_backward_ratio": 1.5}
SEED = 0


def add_arguments(parser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512], help="sequence lengths (default: 128 512)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant, medians reported (>= 5)")
    parser.add_argument("--small", action="store_true", help="a tiny config, for a smoke test")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    parser.add_argument(
        "--peers",
        action="store_true",
        help="instead: Glassbox beside transformers (and TransformerLens if installed) on the same weights",
    )
    parser.add_argument(
        "--families",
        nargs="*",
        metavar="HUB_ID",
        help="instead: each curated model's shape (or these), random weights: load, trace, generate",
    )
    parser.add_argument(
        "--tree",
        action="store_true",
        help="instead: a branch of the generation tree (KV cache reused) beside a fresh generation of the same prefix",
    )
    parser.add_argument(
        "--graph",
        action="store_true",
        help="instead: an attribution graph's seconds and memory against the prompt's length, batched beside one target at a time",
    )
    parser.add_argument(
        "--analyses",
        nargs="*",
        metavar="HUB_ID",
        help="instead: steering, the head catalog, path patching and verify on GPT-2 small's and Gemma "
        "3 270M's shapes (or these), random weights: seconds and peak memory per call",
    )


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_increase(fn, device: torch.device) -> tuple[object, int | None]:
    """fn()'s result and how many bytes the process's peak memory rose during it (None: n/a)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    try:  # hand freed heap back to the OS, or fn() reuses pages already resident and hides its peak
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
    except OSError:
        return fn(), None
    before = _status_kb("VmHWM")
    result = fn()
    peak = _status_kb("VmHWM")
    return result, None if before is None or peak is None else max(0, peak - before) * 1024


def trace_bytes(trace, model: Transformer) -> tuple[int, int]:
    """Sum of nbytes of the trace's tensors, and the bytes of the distinct storages behind them
    (less: the residual stream is hooked twice per block boundary, some gradients are expanded
    views)."""
    tensors = trace.held()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(t.nbytes for t in tensors), sum(n for ptr, n in storages.items() if ptr not in params)


def bench_length(model: Transformer, length: int, repeats: int, device: torch.device) -> dict:
    gen = torch.Generator().manual_seed(SEED + length)
    tokens = torch.randint(model.cfg.vocab_size, (length,), generator=gen).tolist()
    ids = torch.tensor([tokens], device=device)
    params = list(model.parameters())

    def forward():
        with torch.no_grad():
            return model(ids)

    def forward_backward():
        loss = model(ids, next_token_targets(ids)).loss
        return torch.autograd.grad(loss, params)

    variants = {
        "forward": forward,
        "capture_forward": lambda: run_trace(model, tokens),
        "forward_backward": forward_backward,
        "traced_forward_backward": lambda: run_trace(model, tokens, backward=True),
    }
    ms = median_ms(variants, repeats, device)

    fwd_trace, fwd_peak = peak_increase(variants["capture_forward"], device)
    fwd_bytes, fwd_distinct = trace_bytes(fwd_trace, model)
    del fwd_trace
    bwd_trace, bwd_peak = peak_increase(variants["traced_forward_backward"], device)
    bwd_bytes, bwd_distinct = trace_bytes(bwd_trace, model)
    return {
        "length": length,
        "median_ms": ms,
        "capture_forward_ratio": ms["capture_forward"] / ms["forward"],
        "traced_backward_ratio": ms["traced_forward_backward"] / ms["forward_backward"],
        "capture_forward_trace_bytes": fwd_bytes,
        "capture_forward_trace_distinct_bytes": fwd_distinct,
        "capture_forward_peak_bytes": fwd_peak,
        "traced_backward_trace_bytes": bwd_bytes,
        "traced_backward_trace_distinct_bytes": bwd_distinct,
        "traced_backward_peak_bytes": bwd_peak,
    }


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.1f} MiB"


def _verdict(ratio: float, target: float) -> str:
    return f"{ratio:.3f}  (target <= {target}: {'PASS' if ratio <= target else 'MISS'})"


def run(args) -> int:
    if args.tree:
        from glassbox.model.tools import tree_bench

        return tree_bench.run(args.json, max(args.repeats, 1))
    if args.graph:
        from glassbox.model.tools import graph_bench

        return graph_bench.run(args.json)
    if args.analyses is not None:
        from glassbox.model.tools import analyses_bench

        return analyses_bench.run(args.analyses, args.json)
    if args.families is not None:
        from glassbox.model.tools import family_bench

        return family_bench.run(args.families, args.json)
    if args.peers:
        from glassbox.model.tools import peers_bench

        return peers_bench.run(args.lengths, args.repeats, args.small)
    cfg = TINY if args.small else GPT2_SMALL
    if args.repeats < 5 and not args.small:
        raise GlassboxError("--repeats must be at least 5 for the report (medians of few runs are noise)")
    if args.repeats < 1 or any(not 2 <= n <= cfg.n_ctx for n in args.lengths):
        raise GlassboxError(f"--repeats must be >= 1 and each length in 2..{cfg.n_ctx}")
    torch.manual_seed(SEED)
    device = default_device()
    model = Transformer(cfg).init_weights(SEED).to(device=device, dtype=torch.float32).eval()
    n_params = sum(p.numel() for p in model.parameters())

    print(f"device   {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}")
    print(
        f"torch    {torch.__version__}, {torch.get_num_threads()} threads, "
        f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}"
    )
    print(
        f"model    {'tiny (--small)' if args.small else 'GPT-2-small shape'}, random weights, float32: "
        f"{cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads, d_ff {cfg.d_ff}, "
        f"vocab {cfg.vocab_size}, {n_params / 1e6:.1f}M parameters"
    )
    print(f"timing   median of {args.repeats} interleaved runs after one warm-up, seed {SEED}")
    results = []
    for length in args.lengths:
        r = bench_length(model, length, args.repeats, device)
        results.append(r)
        ms = r["median_ms"]
        print(f"\nT = {length}")
        for name, value in ms.items():
            print(f"  {name.replace('_backward', '+backward').replace('_', ' '):<24} {value:10.1f} ms")
        print(f"  capture ÷ forward                   {_verdict(r['capture_forward_ratio'], TARGETS['capture_forward_ratio'])}")
        print(f"  traced ÷ forward+backward           {_verdict(r['traced_backward_ratio'], TARGETS['traced_backward_ratio'])}")
        for label, key in (("capture forward:", "capture_forward"), ("traced fwd+bwd: ", "traced_backward")):
            print(
                f"  {label} trace {_mib(r[key + '_trace_bytes'])} (distinct storage "
                f"{_mib(r[key + '_trace_distinct_bytes'])}), peak memory rise {_mib(r[key + '_peak_bytes'])}"
            )

    if args.json:
        report = {
            "device": str(device),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "config": cfg.to_dict(),
            "small": args.small,
            "repeats": args.repeats,
            "seed": SEED,
            "targets": TARGETS,
            "results": results,
        }
        write_text(args.json, json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")
    return 0
