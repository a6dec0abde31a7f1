"""`glassbox assign LESSON|VIEW`: a teacher's assignment link (a lesson or explorer view, a
model, a prompt, a seed)."""

from __future__ import annotations


def add_arguments(sub) -> None:
    p = sub.add_parser("assign", help="print an assignment link: a lesson or explorer view, a model, a prompt, a seed")
    p.add_argument("target", help="a lesson's name (`glassbox course` lists them) or an explorer view's (such as Attention)")
    p.add_argument("--model", default="default", help="the model the page opens (default: the bundled one)")
    p.add_argument("--prompt", help="the prompt the page opens with")
    p.add_argument("--seed", help="the exercises' seed (lessons)")
    p.add_argument("--base", default="http://localhost:8501", help="the server's address (default %(default)s)")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.course.assignments import Assignment

    print(Assignment(args.target, model=args.model, prompt=args.prompt, seed=args.seed).url(args.base))
    return 0
