"""Micro-models: small models trained here, each to show one mechanism the course teaches, each
shipped in assets/ with its training curve and reproduced by `glassbox train-micro NAME` (seeded).

Each module has ``train(path, steps)`` (writes the model, its tokenizer and training.json) and
``figures(loaded) -> dict``: the figure that proves its mechanism, computed from the model at hand.
The course's lessons and `glassbox train-micro NAME --json` print the same figures.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from glassbox.model.engine import GlassboxError


@dataclass(frozen=True)
class Micro:
    name: str  # `glassbox train-micro <name>`
    module: str  # model.micro.<module>
    what: str  # the mechanism, in a line
    siblings: tuple[str, ...] = ()  # the other folders its training writes beside the model: its name + each

    @property
    def asset(self) -> str:
        """The shipped model's name (``load("micro-bigram")``), also its folder in assets/."""
        return f"micro-{self.name}"

    def train(self, path: Path, steps: int | None = None, *siblings: Path) -> None:
        """Train it into ``path``; ``siblings``, where given, are where its other folders go
        (by default beside ``path``, named as ``self.siblings`` says)."""
        module = importlib.import_module(f"glassbox.model.micro.{self.module}")
        module.train(Path(path), *siblings, **({} if steps is None else {"steps": steps}))

    def figures(self, loaded) -> dict:
        return importlib.import_module(f"glassbox.model.micro.{self.module}").figures(loaded)


MICROS = [
    Micro("bigram", "bigram", "zero layers: logits = W_E·W_U, the corpus's bigram table"),
    Micro("attention-only", "attention_only", "one attention-only block: skip-trigrams from its QK and OV circuits"),
    Micro("induction", "induction", "two attention-only blocks: a previous-token head and an induction head"),
    Micro("moe", "moe", "8 experts behind a top-2 router, trained with and without the load-balancing loss", ("-unbalanced",)),
    Micro("seq2seq", "seq2seq", "a tiny T5 that reverses its source: cross-attention reads it back to front"),
]
MICRO = {m.name: m for m in MICROS}


def micro(name: str) -> Micro:
    if name not in MICRO:
        raise GlassboxError(f"No micro-model {name!r}: choose one of {', '.join(MICRO)}")
    return MICRO[name]
