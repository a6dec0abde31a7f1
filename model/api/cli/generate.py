"""`glassbox generate`: continue a prompt, token by token (KV cache), with exact sampling."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, add_sampling_arguments, model_from, step_json


def add_arguments(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt, token by token (KV cache), with exact sampling")
    add_model_arguments(p)
    add_sampling_arguments(p)
    p.add_argument("--json", action="store_true", help='print {"prompt", "completion", "steps": [...]}')
    p.set_defaults(func=run)


def run(args) -> int:
    loaded = model_from(args)
    steps = []
    for token in loaded.stream(args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed):
        steps.append(step_json(token, loaded.pieces))
        if not args.json:
            print(token.token, end="", flush=True)
    completion = loaded.tokenizer.decode([s["token_id"] for s in steps])
    if args.json:
        print(json.dumps({"prompt": args.prompt, "completion": completion, "steps": steps}))
    else:
        print()
    return 0
