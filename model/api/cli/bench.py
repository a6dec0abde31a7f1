"""`glassbox bench`: capture overhead and memory for a GPT-2-small-shaped model
(model/tools/bench.py holds its options and its report)."""

from __future__ import annotations


def add_arguments(sub) -> None:
    from glassbox.model.tools import bench as benchmark

    p = sub.add_parser("bench", help="capture overhead and memory for a GPT-2-small-shaped model")
    benchmark.add_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.tools import bench as benchmark

    return benchmark.run(args)
