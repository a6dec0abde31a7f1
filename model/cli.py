"""``python -m model COMMAND``: the engine from the shell.

  trace   --model M --prompt TEXT [--backward] [--target TOKEN] --npz FILE
  hooks   --model M                 every captured name with its shape
  bench                             capture overhead and memory, GPT-2-small shape
  worked-example --json             the article's numbers, computed by the engine
  build-worked-example              reconstruct and write assets/worked-example
  generate --model M --prompt TEXT --max-new-tokens N --temperature T --top-k K --top-p P --seed S [--json]
  train-default                     regenerate the story corpus and train assets/default

A problem with the input is reported in one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import GlassboxError


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="default", help="a model name (default, worked-example) or a directory")
    parser.add_argument("--dtype", choices=["float32", "float64"], help="default: the model's own")


def cmd_trace(args) -> int:
    from .checkpoint import load
    from .trace import Target, run_trace

    loaded = load(args.model, dtype=args.dtype)
    tokens = loaded.encode(args.prompt)
    target = None
    if args.target is not None:
        position = -1 if args.position is None else args.position
        target = Target(loaded.tokenizer.token_id(args.target), position)
    elif args.position is not None:
        raise GlassboxError("--position needs --target")
    trace = run_trace(loaded.model, tokens, names=args.names, backward=args.backward or target is not None, target=target)
    trace.save_npz(args.npz)
    pieces = [loaded.tokenizer.pieces[t] for t in tokens]
    print(f"tokens   {tokens}  {pieces}")
    if trace.loss is not None:
        print(f"loss     {trace.loss:.6f}  ({trace.loss_description})")
    print(f"wrote    {len(trace.activations)} activations, {len(trace.grads)} gradients to {args.npz}")
    return 0


def cmd_hooks(args) -> int:
    from .checkpoint import load
    from .trace import run_trace

    loaded = load(args.model, dtype=args.dtype)
    prompt = args.prompt or loaded.about.get("sample_prompt", "Hello, world")
    tokens = loaded.encode(prompt)
    trace = run_trace(loaded.model, tokens, backward=len(tokens) > 1)
    print(f"{loaded.name}: shapes for the prompt {prompt!r} (T = {len(tokens)} tokens)")
    width = max(len(n) for n in trace.activations)
    for name, tensor in trace.activations.items():
        has_grad = "grad:" + name in trace.grads
        print(f"  {name:<{width}}  {str(list(tensor.shape)):<16} {'' if has_grad else '(no gradient: off the loss path)'}")
    print("parameters (each has a gradient grad:<name>):")
    for name, param in loaded.model.named_parameters():
        print(f"  {name:<{width}}  {list(param.shape)}")
    return 0


def cmd_bench(args) -> int:
    from . import bench

    return bench.run(args)


def cmd_build_worked_example(args) -> int:
    from .worked_example import DIR, build

    build()
    print(f"wrote {DIR}")
    return 0


def cmd_worked_example(args) -> int:
    import json

    from .checkpoint import load
    from .worked_example import article_json

    if not args.json:
        raise GlassboxError("Say --json: the worked example's numbers are printed as one JSON object")
    print(json.dumps(article_json(load("worked-example"))))
    return 0


def cmd_generate(args) -> int:
    import json

    from .checkpoint import load
    from .sampling import Sampling, generate, top

    loaded = load(args.model, dtype=args.dtype)
    sampling = Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    steps = []
    for token in generate(loaded, args.prompt, args.max_new_tokens, sampling):
        steps.append({"token": token.token, "token_id": token.token_id, "p": token.p,
                      "top": [{"token": t["token"], "p": t["p"]} for t in top(token.after, loaded.tokenizer.pieces)]})
        if not args.json:
            print(token.token, end="", flush=True)
    completion = loaded.tokenizer.decode([s["token_id"] for s in steps])
    if args.json:
        print(json.dumps({"prompt": args.prompt, "completion": completion, "steps": steps}))
    else:
        print()
    return 0


def cmd_train_default(args) -> int:
    from .train_default import train

    train(path=args.out, steps=args.steps, n_stories=args.stories)
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m model", description="Glassbox's transformer engine")
    sub = root.add_subparsers(dest="command", required=True)

    p = sub.add_parser("trace", help="run a prompt and save every captured tensor (and gradient) to .npz")
    _model_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--backward", action="store_true", help="also save grad:<name> for every tensor and parameter")
    p.add_argument("--target", help="loss = cross-entropy of this token (default: mean next-token loss); implies --backward")
    p.add_argument("--position", type=int, help="position predicting --target (default: the last)")
    p.add_argument("--names", nargs="+", metavar="PATTERN", help="capture only names matching these shell patterns")
    p.add_argument("--npz", required=True, type=Path)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("hooks", help="list every captured tensor's name and shape")
    _model_args(p)
    p.add_argument("--prompt", help="prompt whose shapes to show (default: the model's sample prompt)")
    p.set_defaults(func=cmd_hooks)

    p = sub.add_parser("bench", help="capture overhead and memory for a GPT-2-small-shaped model")
    from . import bench

    bench.add_arguments(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("worked-example", help="the article's weights, forward tensors, gradients and update as JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object (the contract in the README)")
    p.set_defaults(func=cmd_worked_example)

    p = sub.add_parser("build-worked-example", help="reconstruct the unprinted weights and write assets/worked-example")
    p.set_defaults(func=cmd_build_worked_example)

    p = sub.add_parser("generate", help="continue a prompt, token by token (KV cache), with exact sampling")
    _model_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    p.add_argument("--top-k", type=int, help="keep the k most likely tokens (default: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="keep the smallest set with this much probability")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help='print {"prompt", "completion", "steps": [...]}')
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("train-default", help="regenerate the story corpus and train the default model (assets/default)")
    from .train_default import DIR, N_STORIES, STEPS

    p.add_argument("--out", type=Path, default=DIR, help="where to write the model (default: assets/default)")
    p.add_argument("--steps", type=int, default=STEPS, help=argparse.SUPPRESS)  # smaller runs for tests
    p.add_argument("--stories", type=int, default=N_STORIES, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_train_default)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except GlassboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
