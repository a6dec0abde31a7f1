"""`glassbox train-micro NAME`: train a micro-model that shows one mechanism, and print its figure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from glassbox.cli.common import count_between, make_model

# model.micro.MICRO's names, written out: torch is not imported before a command runs (a test keeps them equal)
MICRO_NAMES = ("bigram", "attention-only", "induction", "moe", "seq2seq")


def add_arguments(sub) -> None:
    p = sub.add_parser("train-micro", help="train a micro-model that shows one mechanism, and print its figure")
    p.add_argument(
        "name",
        choices=MICRO_NAMES,
        help="bigram (zero layers), attention-only (one block, skip-trigrams), "
        "induction (two blocks, induction heads), moe (8 experts, top-2; trained with and without the "
        "load-balancing loss, the second into OUT-unbalanced), seq2seq (an encoder-decoder that reverses its source)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="where to write the model (default: $GLASSBOX_HOME/models/micro-NAME; assets/micro-NAME refreshes the shipped one)",
    )
    p.add_argument("--json", action="store_true", help="print the figure as one JSON line")
    p.add_argument("--steps", type=count_between(1, 100_000), help=argparse.SUPPRESS)  # smaller runs for tests
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.core import load
    from glassbox.model.micro import micro

    chosen = micro(args.name)
    out = make_model(args.out, chosen.asset, lambda path, *others: chosen.train(path, args.steps, *others), chosen.siblings)
    figures = chosen.figures(load(str(out)))  # the proving figure, of the model just written
    print(f"wrote {out}", file=sys.stderr)
    print(json.dumps(figures, ensure_ascii=False, allow_nan=False, indent=None if args.json else 2))
    return 0
