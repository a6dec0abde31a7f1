"""`glassbox lab [NAME]`: the lab's experiments (model/lab/): list them, train one and print its
figures with the paper's numbers beside ours, or print the shipped run's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from glassbox.cli.common import count_between, writable

# model.lab.LAB's names, written out: torch is not imported before a command runs (a test keeps them equal)
LAB_NAMES = ("induction", "grokking", "superposition", "sae")


def add_arguments(sub) -> None:
    p = sub.add_parser(
        "lab",
        help="the lab's experiments (induction, grokking, superposition, sae): train one and print its figures",
        description="Without NAME: list the experiments. With NAME: train it (deterministic for a seed) into "
        "$GLASSBOX_HOME/lab/NAME, or --out, and print its figures and the paper's numbers beside ours.",
    )
    p.add_argument("name", nargs="?", choices=LAB_NAMES, help="the experiment")
    p.add_argument("--json", action="store_true", help="print every figure as one JSON line")
    p.add_argument("--shipped", action="store_true", help="print the shipped run's figures (assets/lab/NAME): no training")
    p.add_argument("--steps", type=count_between(1, 1_000_000), help="training steps (default: the experiment's)")
    p.add_argument("--seed", type=count_between(0, 2**31 - 1), default=0, help="the seed (default 0)")
    p.add_argument("--live", action="store_true", help="the shorter variant the app trains on the spot")
    p.add_argument(
        "--out",
        type=Path,
        help="where to write the run (default: $GLASSBOX_HOME/lab/NAME; assets/lab/NAME refreshes the shipped one)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import GlassboxError
    from glassbox.model.engine.files import written_whole
    from glassbox.model.lab import EXPERIMENTS, experiment
    from glassbox.model.lab.runs import Run, user_run_folder

    if args.name is None:
        if args.json:
            print(json.dumps([{"name": e.name, "title": e.title, "paper": e.paper, "url": e.url} for e in EXPERIMENTS]))
        else:
            for e in EXPERIMENTS:
                print(f"{e.name:<14} {e.title}\n{'':<14} {e.paper}")
        return 0
    exp = experiment(args.name)
    if args.shipped:
        if args.steps or args.live or args.out or args.seed:
            raise GlassboxError("--shipped prints the shipped run: it takes no --steps, --seed, --live or --out")
        figures = Run.shipped(exp.name).figures
    else:
        out = args.out or user_run_folder(exp.name)
        if args.out is None:
            out.parent.mkdir(parents=True, exist_ok=True)
        out = writable(out, folder_ok=True)
        with written_whole(out) as staged:
            figures = exp.code.train(staged, steps=args.steps, seed=args.seed, live=args.live)
        print(f"wrote {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(figures, ensure_ascii=False, allow_nan=False))
        return 0
    for line in exp.code.summary(figures):
        print(line)
    print("\nThe paper's numbers beside ours:")
    for row in figures["comparison"]:
        print(f"- {row['what']}: paper {row['paper']}, ours {row['ours']}" + (f" ({row['note']})" if row.get("note") else ""))
    return 0
