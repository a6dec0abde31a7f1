"""`glassbox patch`: activation patching, each site of a clean run put into a corrupted one,
with attribution patching's estimates beside it."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("patch", help="activation patching: each site of a clean run put into a corrupted one")
    add_model_arguments(p)
    p.add_argument("--clean", required=True, help="the prompt whose behaviour is measured")
    p.add_argument("--corrupt", required=True, help="a prompt of the same length in tokens that changes it")
    p.add_argument("--answer", required=True, help="the token the clean prompt should predict")
    p.add_argument("--wrong", required=True, help="the token it is compared with: metric = logit(answer) − logit(wrong)")
    # model.analysis.patching.SITES, written out (a test keeps them equal)
    p.add_argument("--site", default="resid_pre", choices=["resid_pre", "attn_out", "mlp_out", "head"])
    p.add_argument("--json", action="store_true", help='print {"metric_clean", "metric_corrupt", "results": [...]}')
    p.set_defaults(func=run)


def run(args) -> int:
    result = model_from(args).patch(args.clean, args.corrupt, args.answer, args.wrong, args.site)
    r, largest = result.agreement()
    if args.json:
        print(
            json.dumps(
                {
                    "metric_clean": result.metric_clean,
                    "metric_corrupt": result.metric_corrupt,
                    "results": result.results(),
                    "attribution_patching": {
                        "estimates": result.estimate.ravel().tolist(),
                        "correlation": r,
                        "largest_difference": largest,
                    },
                }
            )
        )
        return 0
    print(
        f"logit({args.answer!r}) − logit({args.wrong!r}) at the last position: clean {result.metric_clean:.4f}, "
        f"corrupted {result.metric_corrupt:.4f}"
    )
    print(f"patching {args.site} from the clean run into the corrupted one (fraction of the difference restored):")
    for row in result.results():
        where = "".join(f" {key} {row[key]}" for key in ("position", "head") if key in row)
        gap = result.metric_clean - result.metric_corrupt
        restored = f"{(row['metric'] - result.metric_corrupt) / gap:.2f}" if gap else "-"
        print(f"  block {row['block']}{where}: {row['metric']:.4f}  ({restored})")
    print(
        f"attribution patching beside it: correlation {'undefined' if r is None else f'{r:.3f}'}, "
        f"largest difference {largest:.3g}"
    )
    return 0
