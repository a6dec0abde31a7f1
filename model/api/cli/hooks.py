"""`glassbox hooks`: every captured name with its shape, on one prompt."""

from __future__ import annotations

from glassbox.cli.common import add_model_arguments, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("hooks", help="list every captured tensor's name and shape")
    add_model_arguments(p)
    p.add_argument("--prompt", help="prompt whose shapes to show (default: the model's sample prompt)")
    p.add_argument("--markdown", action="store_true", help="print the table of every name pattern (docs/engine.md's)")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import names

    if args.markdown:
        print(names.markdown_table())
        return 0
    loaded = model_from(args)
    prompt = args.prompt or loaded.about.get("sample_prompt", "Hello, world")
    tokens = loaded.tokens(prompt)
    trace = loaded.trace(tokens, backward=len(tokens) > 1)
    print(f"{loaded.name}: shapes for the prompt {prompt!r} (T = {len(tokens)} tokens)")
    width = max(len(n) for n in trace.activations)
    for name, tensor in trace.activations.items():
        entry = names.lookup(name)
        gradient = "" if names.GRAD + name in trace.grads else " (no gradient: off the loss path)"
        print(f"  {name:<{width}}  {list(tensor.shape)!s:<16} {' × '.join(entry.axes):<26} {entry.what}{gradient}")
    print("parameters (each has a gradient grad:<name>):")
    for name, param in loaded.model.named_parameters():
        entry = names.lookup(name)
        print(f"  {name:<{width}}  {list(param.shape)!s:<16} {' × '.join(entry.axes):<26} {entry.what}")
    return 0
