"""`glassbox plan MODEL --gpus N`: where each block of a model would live across N GPUs, and the
memory of a traced backward on each (accelerate's device map, the model on the meta device)."""

from __future__ import annotations

import json
from pathlib import Path

from glassbox.cli.common import count_between, positive_number, print_table


def add_arguments(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="where each block of a model would live across N GPUs, and the memory of a "
        "traced backward on each (accelerate's device map, the model on the meta device)",
    )
    p.add_argument(
        "model", help="a curated hub id, meta-llama/Meta-Llama-3-70B, mistralai/Mixtral-8x7B-v0.1, or a folder with a config.json"
    )
    p.add_argument("--gpus", type=count_between(0, 1024), required=True)
    p.add_argument("--gpu-gb", type=positive_number, default=80.0, help="each GPU's memory (default 80)")
    p.add_argument("--cpu-gb", type=positive_number, default=256.0, help="the CPU memory offered before the disk (default 256)")
    p.add_argument("--tokens", type=count_between(1, 1_000_000), default=512, help="the traced prompt's length")
    p.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "float16"], help="default: the config's torch_dtype")
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"device_map", "devices": [{"device", "blocks", "weights_bytes", "gradient_bytes", "trace_bytes", "fits"}]}',
    )
    p.set_defaults(func=run)


def run(args) -> int:
    """A model's blocks across N GPUs of G GB (then the CPU, then the disk), and per device the
    weights, their gradients and a traced backward's tensors; the model built on the meta device."""
    import torch

    from glassbox.model.engine import DTYPES, GlassboxError, build_model
    from glassbox.model.engine.names import block_runs
    from glassbox.model.engine.placement import total, traced_plan
    from glassbox.model.io.catalog import PLAN_SHAPES, curated
    from glassbox.model.io.convert import CONVERTERS
    from glassbox.model.io.guard import read_json

    shapes = PLAN_SHAPES | {entry.hub_id: entry.config for entry in curated()}
    if args.model in shapes:
        config = shapes[args.model]
    elif Path(args.model, "config.json").is_file():
        config = read_json(Path(args.model, "config.json"))
    else:
        raise GlassboxError(
            f"No shape for {args.model!r}: give a folder with a config.json, or one of {', '.join(sorted(shapes))}"
        )
    if config.get("model_type") not in CONVERTERS or config.get("is_encoder_decoder"):
        raise GlassboxError(f"plan places a decoder-only model of a family Glassbox opens, not {config.get('model_type')!r}")
    cfg = CONVERTERS[config["model_type"]].config(config)
    dtype = args.dtype or config.get("torch_dtype") or "float32"
    with torch.device("meta"):
        model = build_model(cfg).in_precision(DTYPES[dtype])
    mapping, rows = traced_plan(model, args.gpus, int(args.gpu_gb * 2**30), int(args.cpu_gb * 2**30), args.tokens)
    if args.json:
        print(json.dumps({"model": args.model, "dtype": dtype, "tokens": args.tokens, "device_map": mapping, "devices": rows}))
        return 0
    print(
        f"{args.model} in {dtype}: {args.gpus} GPU(s) of {args.gpu_gb:g} GB, then {args.cpu_gb:g} GB of CPU memory, "
        f"then the disk; a traced backward of {args.tokens} tokens"
    )
    table = [
        (
            r["device"],
            block_runs(r["blocks"]) or "-",
            ", ".join(r["parts"]) or "-",
            f"{r['weights_bytes'] / 2**30:,.1f}",
            f"{r['gradient_bytes'] / 2**30:,.1f}",
            f"{r['trace_bytes'] / 2**30:,.1f}",
            f"{total(r) / 2**30:,.1f}",
            "yes" if r["fits"] else "NO",
        )
        for r in rows
    ]
    print_table(("device", "blocks", "also", "weights GB", "gradients GB", "trace GB", "total GB", "fits"), table)
    print(
        "Blocks on the disk, or on the CPU beside GPUs, are offloaded: they compute on the first device, where their trace lands."
    )
    return 0
