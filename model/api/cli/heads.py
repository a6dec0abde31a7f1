"""`glassbox heads`: the head catalog (previous-token, self, duplicate-token, induction, entropy)."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, count_between, json_grid, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("heads", help="the head catalog: previous-token, self, duplicate-token, induction, entropy")
    add_model_arguments(p)
    p.add_argument("--text", action="append", help="a text to score on (repeatable; default: the bundled stories)")
    p.add_argument("--stories", type=count_between(1, 1000), default=16, help="how many bundled stories (default 16)")
    p.add_argument("--find", help='list the heads past a threshold, as SCORE=VALUE (such as "induction=0.5")')
    p.add_argument("--json", action="store_true", help='print {"n_texts", "n_queries", "n_repeats", "scores", "found"}')
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import GlassboxError

    score = above = None
    if args.find is not None:
        score, _, value = args.find.partition("=")
        try:
            above = float(value)
        except ValueError:
            raise GlassboxError(f"--find takes SCORE=VALUE (such as induction=0.5), not {args.find!r}") from None
    loaded = model_from(args)
    catalog = loaded.heads(args.text, args.stories)
    found = [] if score is None else catalog.find(score, above)
    if args.json:
        grids = {name: json_grid(grid) for name, grid in catalog.scores.items()}  # NaN (no repeats): null
        print(
            json.dumps(
                {
                    "n_texts": catalog.n_texts,
                    "n_queries": catalog.n_queries,
                    "n_repeats": catalog.n_repeats,
                    "scores": grids,
                    "found": [{"block": b, "head": h, "value": v} for b, h, v in found],
                },
                allow_nan=False,
            )
        )
        return 0
    print(f"{catalog.n_texts} texts, {catalog.n_queries} queries, {catalog.n_repeats} whose token came earlier")
    for name, grid in catalog.scores.items():
        print(f"{name} (rows: blocks; columns: heads)")
        for b, row in enumerate(grid):
            print(f"  {b:>3}  " + " ".join(f"{v:6.3f}" for v in row))
    if score is not None:
        print(f"heads with {score} > {above:g}: " + (", ".join(f"{b}.{h} ({v:.3f})" for b, h, v in found) or "none"))
    return 0
