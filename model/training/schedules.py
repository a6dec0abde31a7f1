"""Learning-rate schedules, one function for every training loop in the project."""

from __future__ import annotations

import math

from glassbox.model.engine import GlassboxError

SCHEDULES = ("constant", "warmup + cosine")


def learning_rate_at(schedule: str, step: int, steps: int, peak: float, warmup: int = 0, floor: float = 0.0) -> float:
    """The learning rate of step ``step`` (0, 1, …) of ``steps``. "constant": ``peak`` throughout.
    "warmup + cosine": up in a straight line over the first ``warmup`` steps (peak/warmup, 2·peak/warmup,
    …, peak), then half a cosine from peak down to ``floor`` × peak at the last step: large steps while
    the loss is far from a minimum, small ones near it, and no large first steps from a random start."""
    if schedule not in SCHEDULES:
        raise GlassboxError(f"Unknown schedule {schedule!r}: choose one of {', '.join(SCHEDULES)}")
    if schedule == "constant":
        return peak
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(steps - warmup, 1)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))
