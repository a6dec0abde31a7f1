"""`glassbox train-default`: regenerate the story corpus and train the default model."""

from __future__ import annotations

import argparse
from pathlib import Path

from glassbox.cli.common import count_between, make_model


def add_arguments(sub) -> None:
    # the training's own defaults, read when the parser is built (after main() has configured the process)
    from glassbox.model.tools.train_default import N_STORIES, STEPS

    p = sub.add_parser("train-default", help="regenerate the story corpus and train the default model")
    p.add_argument(
        "--out",
        type=Path,
        help="where to write the model (default: $GLASSBOX_HOME/models/default; assets/default refreshes the shipped one)",
    )
    p.add_argument("--steps", type=count_between(1, 1_000_000), default=STEPS, help=argparse.SUPPRESS)  # smaller runs for tests
    p.add_argument("--stories", type=count_between(1, 1_000_000), default=N_STORIES, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.tools.train_default import train

    print(f"wrote {make_model(args.out, 'default', lambda path: train(path, args.steps, args.stories))}")
    return 0
