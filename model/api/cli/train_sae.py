"""`glassbox train-sae`: train the default model's sparse autoencoder."""

from __future__ import annotations

import argparse
from pathlib import Path

from glassbox.cli.common import count_between, make_model


def add_arguments(sub) -> None:
    # the training's own defaults, read when the parser is built (after main() has configured the process)
    from glassbox.model.tools.train_sae import N_STORIES, STEPS

    p = sub.add_parser("train-sae", help="train the default model's sparse autoencoder (blocks.2.hook_resid_pre)")
    p.add_argument(
        "--out",
        type=Path,
        help="where to write it (default: $GLASSBOX_HOME/models/default-sae; assets/default-sae refreshes the shipped one)",
    )
    p.add_argument("--steps", type=count_between(1, 100_000), default=STEPS, help=argparse.SUPPRESS)
    p.add_argument("--stories", type=count_between(1, 100_000), default=N_STORIES, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.tools.train_sae import train

    print(f"wrote {make_model(args.out, 'default-sae', lambda path: train(path, args.steps, args.stories))}")
    return 0
