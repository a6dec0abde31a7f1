"""The lab: the field's best-known training phenomena, trained here and measured beside the
papers' own numbers. One module per experiment (induction, grokking, superposition, sae); each has

- ``train(out, steps=None, seed=0, live=False, on_step=None) -> dict``: train, write the run into
  ``out`` (run.json with every figure, and checkpoints/step-NNNNNN/ as model folders where the
  experiment's model is a transformer) and return the figures. Deterministic for a seed.
  ``live=True``: the shorter variant the app trains on the spot, where the full run is too long.
- ``compare(figures) -> list[dict]``: the paper's published numbers beside ours, one row each:
  {"what", "paper", "ours", "note"}; ``summary(figures) -> list[str]``: what the CLI prints.
- ``LIVE_STEPS``: the app's live run's steps; ``STEPS``: the shipped run's; ``LIVE_STEP_COST`` (or
  ``live_step_cost(settings)``): a live step's cost against a shipped one, for the page's estimate.

The shipped runs are in assets/lab/NAME, made by ``glassbox lab NAME --out assets/lab/NAME``;
``glassbox lab NAME`` writes to $GLASSBOX_HOME/lab/NAME. runs.py holds the run folder's format.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from glassbox.model.engine import GlassboxError


@dataclass(frozen=True)
class Experiment:
    name: str  # `glassbox lab NAME`, its folder in assets/lab, its page's URL (lab-NAME)
    title: str  # what it shows, in a line
    paper: str  # the paper it reproduces
    url: str  # where the paper is

    @property
    def code(self) -> ModuleType:
        """Its module: model/lab/NAME.py (imported when first asked: torch comes with it)."""
        return importlib.import_module(f"glassbox.model.lab.{self.name}")


EXPERIMENTS = [
    Experiment(
        "induction",
        "Induction heads form at a phase change, with a bump in the loss",
        "Olsson et al. (2022), In-context Learning and Induction Heads",
        "https://transformer-circuits.pub/2022/in-context-learning-and-induction-heads/index.html",
    ),
    Experiment(
        "grokking",
        "Grokking modular addition: memorise, form a Fourier circuit, clean up",
        "Nanda et al. (2023), Progress measures for grokking via mechanistic interpretability",
        "https://arxiv.org/abs/2301.05217",
    ),
    Experiment(
        "superposition",
        "Features in superposition: more features than dimensions, once they are sparse",
        "Elhage et al. (2022), Toy Models of Superposition",
        "https://transformer-circuits.pub/2022/toy_model/index.html",
    ),
    Experiment(
        "sae",
        "A sparse autoencoder recovers features planted on purpose",
        "Bricken et al. (2023), Towards Monosemanticity; Sharkey et al. (2022), Taking features out of superposition",
        "https://transformer-circuits.pub/2023/monosemantic-features/index.html",
    ),
]
LAB = {e.name: e for e in EXPERIMENTS}


def experiment(name: str) -> Experiment:
    if name not in LAB:
        raise GlassboxError(f"No lab experiment {name!r}: choose one of {', '.join(LAB)}")
    return LAB[name]
