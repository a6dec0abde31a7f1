"""`glassbox generate`: continue a prompt, token by token (KV cache), with exact sampling; show the
alternatives at each new position (``--alternatives K``) and force a token at one
(``--force POSITION:TOKEN``: a branch of the generation tree, the cache reused up to it)."""

from __future__ import annotations

import argparse
import json

from glassbox.cli.common import add_model_arguments, add_sampling_arguments, model_from, step_json


def forced(text: str) -> tuple[int, str]:
    """An argparse type: POSITION:TOKEN, a 0-based sequence position and a token's text (the rest of
    the argument, colons and spaces kept), else the parser's one-line error."""
    position, colon, token = text.partition(":")
    if not colon or not token:
        raise argparse.ArgumentTypeError(f"{text!r} is not POSITION:TOKEN (for example 7:' old')")
    try:
        return int(position), token
    except ValueError:
        raise argparse.ArgumentTypeError(f"{position!r} is not a whole number (the position)") from None


def add_arguments(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt, token by token (KV cache), with exact sampling")
    add_model_arguments(p)
    add_sampling_arguments(p)
    p.add_argument(
        "--alternatives",
        type=int,
        default=0,
        metavar="K",
        help="also show each new position's K most likely tokens under the sampler, with their probabilities",
    )
    p.add_argument(
        "--force",
        type=forced,
        action="append",
        default=[],
        metavar="POSITION:TOKEN",
        help="put TOKEN (its text, as the tokenizer writes it: ' old') at sequence POSITION (0-based, a new "
        "token's) and draw the rest again with the same settings and seed; repeat to force several, in order",
    )
    p.add_argument("--json", action="store_true", help='print {"prompt", "completion", "steps": [...]}')
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import GlassboxError

    loaded = model_from(args)
    if args.alternatives < 0:
        raise GlassboxError(f"--alternatives takes a number of tokens, 0 or more, not {args.alternatives}")
    if args.force or args.alternatives:
        return run_tree(loaded, args)
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


def run_tree(loaded, args) -> int:
    """The generation as a tree: the first sample, then each --force a branch of the path before it;
    the last path printed, each of its positions with its alternatives."""
    tree = loaded.generate(args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed, tree=True)
    path = 0
    for position, token in args.force:
        path = tree.branch(position, token, path).index
    steps = []
    for step in tree.paths[path].steps:
        steps.append(
            step_json(step, loaded.pieces)
            | {"position": step.position, "p_model": step.p_model, "forced": step.forced}
            | ({"alternatives": tree.alternatives(step.position, path, args.alternatives)} if args.alternatives else {})
        )
    paths = [
        {"completion": tree.text(p.index), "parent": p.parent, "position": p.position, "positions_computed": p.computed}
        for p in tree.paths
    ]
    if args.json:
        print(json.dumps({"prompt": args.prompt, "completion": tree.text(path), "steps": steps, "paths": paths}))
        return 0
    for p in paths[1:]:
        print(f"forced at position {p['position']} (of the path before it): {p['positions_computed']} positions computed")
    print(args.prompt + tree.text(path))
    for s in steps if args.alternatives else []:
        alternatives = ", ".join(f"{a['token']!r} {a['p']:.3f}" for a in s["alternatives"])
        print(f"{s['position']:>5}  {s['token']!r} p={s['p']:.3f}{' (forced)' if s['forced'] else ''}  |  {alternatives}")
    return 0
