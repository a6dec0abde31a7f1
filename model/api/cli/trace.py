"""`glassbox trace`: run a prompt and save every captured tensor (and gradient) to .npz."""

from __future__ import annotations

from pathlib import Path

from glassbox.cli.common import add_model_arguments, model_from, writable


def add_arguments(sub) -> None:
    p = sub.add_parser("trace", help="run a prompt and save every captured tensor (and gradient) to .npz")
    add_model_arguments(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--backward", action="store_true", help="also save grad:<name> for every tensor and parameter")
    p.add_argument("--target", help="loss = cross-entropy of this token (default: mean next-token loss); implies --backward")
    p.add_argument("--position", type=int, help="position predicting --target (default: the last)")
    p.add_argument("--names", nargs="+", metavar="PATTERN", help="capture only names matching these shell patterns")
    p.add_argument("--npz", required=True, type=Path)
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import GlassboxError

    writable(args.npz)
    if args.target is None and args.position is not None:
        raise GlassboxError("--position needs --target")
    loaded = model_from(args)
    tokens = loaded.tokens(args.prompt)
    target = None if args.target is None else (args.target, -1 if args.position is None else args.position)
    trace = loaded.trace(tokens, names=args.names, backward=args.backward or target is not None, target=target)
    trace.save_npz(args.npz)  # whole or not at all; a failed write is an error line
    pieces = [loaded.tokenizer.pieces[t] for t in tokens]
    print(f"tokens   {tokens}  {pieces}")
    if trace.loss is not None:
        print(f"loss     {trace.loss:.6f}  ({trace.loss_description})")
    print(f"wrote    {len(trace.activations)} activations, {len(trace.grads)} gradients to {args.npz}")
    return 0
