"""Training a copy of the worked-example model for a few steps, recording what moved.

The shared model is never touched: training works on a deep copy. LayerNorm's gamma and beta
stay at 1 and 0 (the article's convention), so the step-through's arithmetic still applies
to the trained weights.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from glassbox.model.engine import GlassboxError, Target, Transformer, loss_targets, next_token_targets
from glassbox.model.engine.names import is_norm_parameter
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.training.schedules import SCHEDULES, learning_rate_at

OPTIMIZERS = ("SGD", "AdamW")
# Each optimizer's own learning rate: the article's for SGD; torch's default for AdamW, read from
# its signature (η = 0.5 makes AdamW's first steps ±0.5 on every weight, and the toy diverges).
DEFAULT_LEARNING_RATE = {"SGD": 0.5, "AdamW": inspect.signature(torch.optim.AdamW).parameters["lr"].default}
DATASETS = ("the example", "the example + corpus")


def toy_corpus() -> list[str]:
    """Six-word sentences in the worked example's eight-word world. After "… on the" comes
    "mat"; after "… and the" comes an animal, so the model has to read the context."""
    animals, verbs = ("cat", "dog"), ("sat", "ran")
    sentences = [f"the {a} {v} on the mat" for a in animals for v in verbs]
    sentences += [f"the {a} {v} and the {b}" for a in animals for b in animals if a != b for v in verbs]
    sentences += [f"the {a} and the {b} {v}" for a in animals for b in animals if a != b for v in verbs]
    return sentences


def training_batch(tokenizer: Tokenizer, example: list[int], target_id: int, dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) for full-batch training; -1 marks a position without a target.
    "the example" is the article's loss alone: -log p(target) at the last position."""
    if dataset not in DATASETS:
        raise GlassboxError(f"Unknown dataset {dataset!r}: choose one of {', '.join(DATASETS)}")
    inputs = torch.tensor([example])
    targets, _ = loss_targets(inputs, Target(target_id), len(tokenizer.pieces))
    if dataset == "the example":
        return inputs, targets
    sentences = torch.tensor([tokenizer.encode(s) for s in toy_corpus()])
    corpus_targets = next_token_targets(sentences)[:, :-1]
    width = inputs.shape[1]
    return torch.cat([inputs, sentences[:, :width]]), torch.cat([targets, corpus_targets[:, :width]])


@dataclass
class TrainingRun:
    model: Transformer  # the trained copy
    optimizer: str
    learning_rate: float
    dataset: str
    # one entry per state: before training, then after each step
    loss: list[float] = field(default_factory=list)  # the training objective
    p_target: list[float] = field(default_factory=list)  # p(target | example)
    target_embedding: list[list[float]] = field(default_factory=list)  # W_E[target]
    schedule: str = "constant"
    learning_rates: list[float] = field(default_factory=list)  # the rate each step used

    @property
    def steps(self) -> int:
        return len(self.loss) - 1


def train_copy(
    model: Transformer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    example: list[int],
    target_id: int,
    optimizer: str = "SGD",
    learning_rate: float | None = None,
    steps: int = 100,
    on_step: Callable[[int, int], None] | None = None,
    dataset: str = "",
    schedule: str = "constant",
) -> TrainingRun:
    """Full-batch training of a copy of ``model``. ``learning_rate``: the peak of ``schedule``
    (None: the optimizer's own, DEFAULT_LEARNING_RATE). "warmup + cosine" warms up over the first
    tenth of the steps and decays to a tenth of the peak. ``on_step(done, total)`` reports progress."""
    if optimizer not in OPTIMIZERS:
        raise GlassboxError(f"Unknown optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
    if learning_rate is None:
        learning_rate = DEFAULT_LEARNING_RATE[optimizer]
    if schedule not in SCHEDULES:
        raise GlassboxError(f"Unknown schedule {schedule!r}: choose one of {', '.join(SCHEDULES)}")
    if not learning_rate > 0:
        raise GlassboxError(f"The learning rate must be positive, not {learning_rate}")
    if steps < 1:
        raise GlassboxError(f"Train for at least one step, not {steps}")
    trained = copy.deepcopy(model).train()
    params = []
    for name, p in trained.named_parameters():
        p.requires_grad_(not is_norm_parameter(name))  # LayerNorm stays gamma = 1, beta = 0
        if p.requires_grad:
            params.append(p)
    # plain SGD is written out: torch.optim's first use imports torch._dynamo (about 1 s), which the
    # worked example's first open (its one update) would otherwise wait on
    opt = None if optimizer == "SGD" else torch.optim.AdamW(params, lr=learning_rate)
    device = next(trained.parameters()).device
    inputs, targets = inputs.to(device), targets.to(device)
    example_ids = torch.tensor([example], device=device)
    run = TrainingRun(trained, optimizer, learning_rate, dataset, schedule=schedule)
    warmup = steps // 10

    def record(loss: float):
        """The state before the next update (or after the last)."""
        with torch.no_grad():
            logits = trained(example_ids).logits[0, -1]
            run.loss.append(loss)
            run.p_target.append(torch.softmax(logits.double(), -1)[target_id].item())
            run.target_embedding.append(trained.embed.W_E[target_id].double().tolist())

    for step in range(steps):
        for p in params:
            p.grad = None
        loss = trained(inputs, targets).loss  # also the loss after the previous update: computed once
        record(loss.item())
        loss.backward()
        rate = learning_rate_at(schedule, step, steps, learning_rate, warmup, floor=0.1)
        run.learning_rates.append(rate)
        if opt is None:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:  # as torch's SGD: a weight the loss did not reach stays
                        p -= rate * p.grad  # W_new = W - η ∂L/∂W
        else:
            for group in opt.param_groups:
                group["lr"] = rate
            opt.step()
        if on_step is not None:
            on_step(step + 1, steps)
    with torch.no_grad():
        record(trained(inputs, targets).loss.item())
    for p in trained.parameters():
        p.grad = None
        p.requires_grad_(True)
    trained.eval()
    return run


@dataclass
class AfterUpdate:
    """The forward pass run again after one step of plain gradient descent on the example's loss:
    the loss and the next-word distribution at the last position, before and after."""

    loss: tuple[float, float]
    probs: tuple[list[float], list[float]]
    target_id: int

    @property
    def p_target(self) -> tuple[float, float]:
        return self.probs[0][self.target_id], self.probs[1][self.target_id]


def after_one_update(
    model: Transformer, tokenizer: Tokenizer, example: list[int], target_id: int, learning_rate: float
) -> AfterUpdate:
    """What the worked example's update buys: one SGD step on -log p(target) (norms held, as in
    the update step), then the example's forward pass again. ``model`` is not touched."""
    inputs, targets = training_batch(tokenizer, example, target_id, "the example")
    run = train_copy(model, inputs, targets, example, target_id, "SGD", learning_rate, steps=1)
    ids = torch.tensor([example], device=next(model.parameters()).device)
    with torch.no_grad():
        probs = [torch.softmax(m(ids).logits[0, -1].double(), -1).tolist() for m in (model, run.model)]
    return AfterUpdate((run.loss[0], run.loss[1]), (probs[0], probs[1]), target_id)
