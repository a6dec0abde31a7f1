"""`glassbox dla`: direct logit attribution, a logit split into what each part wrote."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("dla", help="direct logit attribution: a logit split into what each part wrote")
    add_model_arguments(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--token", required=True, help="the token whose logit is split")
    p.add_argument("--wrong", help="split logit(token) − logit(wrong) instead")
    p.add_argument("--position", type=int, default=-1, help="the position (default: the last)")
    p.add_argument("--json", action="store_true", help='print {"logit", "components": [{"name", "value"}, ...]}')
    p.set_defaults(func=run)


def run(args) -> int:
    result = model_from(args).dla(args.prompt, args.token, args.wrong, args.position)
    components = [{"name": n, "value": float(v)} for n, v in zip(result.names, result.values)]
    if args.json:
        print(json.dumps({"logit": result.logit, "position": result.position, "components": components}))
        return 0
    what = f"logit({args.token!r})" + (f" − logit({args.wrong!r})" if args.wrong is not None else "")
    print(f"{what} at position {result.position}: {result.logit:.6g}, the sum of")
    for c in sorted(components, key=lambda c: -abs(c["value"])):
        print(f"  {c['name']:<32} {c['value']: .6g}")
    return 0
