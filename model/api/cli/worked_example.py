"""`glassbox worked-example --json`: the article's numbers, computed by the engine."""

from __future__ import annotations

import json


def add_arguments(sub) -> None:
    p = sub.add_parser("worked-example", help="the article's weights, forward tensors, gradients and update as JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object (the contract in docs/worked-example.md)")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.core import load
    from glassbox.model.engine import GlassboxError
    from glassbox.model.worked_example.contract import article_json

    if not args.json:
        raise GlassboxError("Say --json: the worked example's numbers are printed as one JSON object")
    print(json.dumps(article_json(load("worked-example"))))
    return 0
