"""`glassbox build-worked-example`: reconstruct the worked example's model."""

from __future__ import annotations

from pathlib import Path

from glassbox.cli.common import make_model


def add_arguments(sub) -> None:
    p = sub.add_parser("build-worked-example", help="reconstruct the unprinted weights and write the worked example's model")
    p.add_argument(
        "--out",
        type=Path,
        help="where to write it (default: $GLASSBOX_HOME/models/worked-example; assets/worked-example refreshes the shipped one)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.worked_example.reconstruct import build

    print(f"wrote {make_model(args.out, 'worked-example', build)}")
    return 0
