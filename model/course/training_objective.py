"""The lesson on the training objective: (a) the loss of one prediction, −log p(correct); (b) teacher
forcing: one pass over a text gives every position's prediction of the next true token, and the
loss is their mean; (c) the learning-rate schedules Train it live offers (model/worked_example/training.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import GlassboxError, check_prompt, run_trace
from glassbox.model.training.schedules import SCHEDULES, learning_rate_at

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
            "positions": [
                {
                    "position": x.position,
                    "input": pieces[x.input_id],
                    "target": pieces[x.target_id],
                    "p_target": x.p_target,
                    "loss": x.loss,
                }
                for x in forced.positions
            ],
            "mean_loss": forced.mean,
            "model_loss": forced.model_loss,
        },
        "schedules": {
            "settings": {"steps": SCHEDULE_STEPS, "peak": SCHEDULE_PEAK, "warmup": SCHEDULE_WARMUP, "floor": SCHEDULE_FLOOR},
            **{
                schedule: {
                    str(step): learning_rate_at(schedule, step, SCHEDULE_STEPS, SCHEDULE_PEAK, SCHEDULE_WARMUP, SCHEDULE_FLOOR)
                    for step in checkpoints
                }
                for schedule in SCHEDULES
            },
        },
    }


# --- exercises ------------------------------------------------------------------------------


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """The loss at one probability, the mean loss of a few positions, the perplexity of a loss, and
    the learning rate of one step of warmup + cosine (loaded is not used)."""
    rng = draw("objective", seed)

    p = round(float(rng.uniform(0.02, 0.98)), 2)
    loss = loss_of(p)
    loss_ex = Exercise(
        "loss",
        f"The model gives the correct next token the probability {p:g}. What is the loss of that prediction "
        "(the cross-entropy, natural log)? Answer to 3 decimals.",
        loss,
        tolerance=1e-3,
        unit="nats",
        hint="The loss is −ln p(correct): 0 when p = 1, growing without bound as p falls to 0.",
        solution=f"−ln {p:g} = {loss:.4f} nats.",
        data={"p": p},
    )

    ps = [round(float(x), 2) for x in rng.uniform(0.05, 0.95, int(rng.integers(3, 6)))]
    losses = [loss_of(x) for x in ps]
    mean = sum(losses) / len(losses)
    mean_ex = Exercise(
        "mean_loss",
        f"One pass over a text gives, at its {len(ps)} positions, the probabilities "
        f"{', '.join(f'{x:g}' for x in ps)} for the true next token. What is the loss of the pass (the mean over "
        "positions, natural log)? Answer to 3 decimals.",
        mean,
        tolerance=1e-3,
        unit="nats",
        hint="Take −ln p at each position, then their mean.",
        solution=f"−ln p: {', '.join(f'{x:.4f}' for x in losses)}; their mean {sum(losses):.4f} / {len(ps)} = {mean:.4f} nats.",
        data={"p": ps},
    )

    mean_loss = round(float(rng.uniform(0.5, 5.0)), 2)
    perplexity = math.exp(mean_loss)
    perplexity_ex = Exercise(
        "perplexity",
        f"A model's mean loss on a text is {mean_loss:g} nats. What is its perplexity? Answer to 4 significant figures.",
        perplexity,
        tolerance=1e-3,
        relative=True,
        hint="Perplexity is e^loss: the number of equally likely tokens that would be as uncertain.",
        solution=f"e^{mean_loss:g} = {perplexity:.4g}: as unsure, on average, as a uniform choice among {perplexity:.4g} tokens.",
        data={"loss": mean_loss},
    )

    steps = int(rng.choice([1000, 2000, 5000, 10000]))
    warmup = int(rng.choice([50, 100, 200, 500]))
    peak = float(rng.choice([3e-4, 6e-4, 1e-3, 3e-3]))
    floor = float(rng.choice([0.0, 0.1]))
    step = int(rng.integers(0, warmup)) if rng.random() < 0.25 else int(rng.integers(warmup, steps))
    rate = learning_rate_at("warmup + cosine", step, steps, peak, warmup, floor)
    if step < warmup:
        worked = f"{step} < {warmup}: still warming up, lr = {peak:g} × {step + 1}/{warmup} = {rate:.4g}."
    else:
        t = (step - warmup) / (steps - warmup)
        cos = math.cos(math.pi * t)
        worked = (
            f"t = ({step} − {warmup})/({steps} − {warmup}) = {t:.4f}; cos(π·t) = {cos:.4f}; lr = {peak:g} × "
            f"({floor:g} + {1 - floor:g} × (1 {'−' if cos < 0 else '+'} {abs(cos):.4f})/2) = {rate:.4g}."
        )
    rate_ex = Exercise(
        "learning_rate",
        f"A warmup + cosine schedule runs {steps:,} steps (numbered 0 to {steps - 1:,}) with peak "
        f"{peak:g}, {warmup} warmup steps and floor {floor:g}: at step s < {warmup}, lr = peak·(s + 1)/{warmup}; "
        f"after it, t = (s − {warmup})/({steps:,} − {warmup}) and lr = peak·(floor + (1 − floor)·(1 + cos πt)/2). "
        f"What is the learning rate at step {step:,}? Answer to 4 significant figures.",
        rate,
        tolerance=5e-3,
        relative=True,
        hint="First decide whether the step is still in the warmup; the cosine part starts at the peak (t = 0).",
        solution=worked,
        data={"schedule": "warmup + cosine", "step": step, "steps": steps, "peak": peak, "warmup": warmup, "floor": floor},
    )
    return [loss_ex, mean_ex, perplexity_ex, rate_ex]
