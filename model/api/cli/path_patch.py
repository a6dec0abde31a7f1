"""`glassbox path-patch`: each head's and MLP's direct effect through a later head's input."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, json_grid, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("path-patch", help="path patching: each head's and MLP's direct effect through a later head's input")
    add_model_arguments(p)
    p.add_argument("--clean", required=True)
    p.add_argument("--corrupt", required=True, help="as many tokens as --clean")
    p.add_argument("--answer", required=True, help="the metric is logit(answer) − logit(wrong) at the last position")
    p.add_argument("--wrong", required=True)
    p.add_argument("--input", choices=["q", "k", "v"], default="q", help="the receiver's input patched (default q)")
    p.add_argument(
        "--json", action="store_true", help='print {"metric_clean", "metric_corrupt", "input", "senders", "receivers", "metric"}'
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    result = model_from(args).path_patch(args.clean, args.corrupt, args.answer, args.wrong, args.input)
    senders = [result.label(*s) for s in result.senders]
    receivers = [result.label(*r) for r in result.receivers]
    if args.json:
        print(
            json.dumps(
                {
                    "metric_clean": result.metric_clean,
                    "metric_corrupt": result.metric_corrupt,
                    "input": args.input,
                    "senders": senders,
                    "receivers": receivers,
                    "metric": json_grid(result.metric),
                },  # NaN (no path): null
                allow_nan=False,
            )
        )
        return 0
    print(
        f"logit({args.answer!r}) − logit({args.wrong!r}): clean {result.metric_clean:.4f}, corrupted {result.metric_corrupt:.4f}"
    )
    restored = result.restored()
    cells = sorted(((abs(v), i, j) for (i, j), v in np.ndenumerate(restored) if v == v), reverse=True)[:15]
    print(f"the paths sender → receiver's {args.input} that restore the most (fraction of the difference):")
    for _, i, j in cells:
        print(f"  {senders[i]:>8} → {receivers[j]:<6} {result.metric[i, j]:.4f}  ({restored[i, j]:+.3f})")
    return 0
