"""Lesson 5, the training objective: (a) the loss of one prediction, −log p(correct); (b) teacher
forcing: one pass over a text gives every position's prediction of the next true token, and the
loss is their mean; (c) the learning-rate schedules Train it live offers (model/lesson/training.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from glassbox.model.engine import GlassboxError, check_prompt, run_trace
from glassbox.model.lesson.training import SCHEDULES, learning_rate_at

PROMPT = "the cat sat on the mat and the dog"
PROBABILITIES = (0.9, 0.5, 0.1, 0.01, 0.001)  # the few p the figures list
# the schedules' figures: the default model's own settings (model/tools/train_default.py)
SCHEDULE_STEPS, SCHEDULE_PEAK, SCHEDULE_WARMUP, SCHEDULE_FLOOR = 5000, 3e-3, 100, 0.1


def loss_of(p: float) -> float:
    """The cross-entropy of one prediction that gave the correct token probability p."""
    return -math.log(p) + 0.0  # + 0.0: at p = 1, 0 and not −0.0


@dataclass
class Position:
    position: int
    input_id: int
    target_id: int
    p_target: float
    loss: float


@dataclass
class TeacherForcing:
    positions: list[Position]  # every position that has a next token
    model_loss: float  # the loss the forward pass itself computed (its mean)

    @property
    def mean(self) -> float:
        return sum(p.loss for p in self.positions) / len(self.positions)


def teacher_forcing(model, tokens: list[int]) -> TeacherForcing:
    """One pass over ``tokens``: at each position the model's probability of the true next token
    and its loss (the engine's hook_loss), the last position having no next token."""
    check_prompt(model.cfg, tokens, "The text")
    if len(tokens) < 2:
        raise GlassboxError("A one-token text has no next token to predict: give at least two tokens.")
    trace = run_trace(model, tokens, names=["hook_loss"])
    losses = trace["hook_loss"].double().tolist()
    positions = [Position(i, tokens[i], tokens[i + 1], math.exp(-losses[i]), losses[i]) for i in range(len(tokens) - 1)]
    return TeacherForcing(positions, trace.loss)


def schedule_curve(schedule: str, steps: int, peak: float, warmup: int, floor: float) -> list[float]:
    """The learning rate of every step, as Train it live applies it."""
    return [learning_rate_at(schedule, step, steps, peak, warmup, floor) for step in range(steps)]


def figures(loaded) -> dict:
    tokens = loaded.encode(PROMPT)
    forced = teacher_forcing(loaded.model, tokens)
    pieces = loaded.pieces
    checkpoints = [0, SCHEDULE_WARMUP // 2, SCHEDULE_WARMUP - 1, SCHEDULE_WARMUP, SCHEDULE_STEPS // 2, SCHEDULE_STEPS - 1]
    return {
        "loss_at_p": [{"p": p, "loss": loss_of(p)} for p in PROBABILITIES],
        "teacher_forcing": {
            "prompt": PROMPT,
            "positions": [{"position": x.position, "input": pieces[x.input_id], "target": pieces[x.target_id],
                           "p_target": x.p_target, "loss": x.loss} for x in forced.positions],
            "mean_loss": forced.mean,
            "model_loss": forced.model_loss,
        },
        "schedules": {
            "settings": {"steps": SCHEDULE_STEPS, "peak": SCHEDULE_PEAK, "warmup": SCHEDULE_WARMUP,
                         "floor": SCHEDULE_FLOOR},
            **{schedule: {str(step): learning_rate_at(schedule, step, SCHEDULE_STEPS, SCHEDULE_PEAK, SCHEDULE_WARMUP,
                                                      SCHEDULE_FLOOR) for step in checkpoints}
               for schedule in SCHEDULES},
        },
    }
