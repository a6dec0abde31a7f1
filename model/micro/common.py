"""What the micro-models share: the story corpus as token ids under the default model's tokenizer,
one seeded training loop (AdamW, warm-up and cosine), and writing a trained model with its curve."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch

from glassbox.model.data.stories import corpus
from glassbox.model.engine import Transformer
from glassbox.model.io.assets import asset
from glassbox.model.io.checkpoint import save
from glassbox.model.io.guard import SIDE_FILE_BYTES, read_json
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.training.schedules import learning_rate_at

END = "<|endoftext|>"  # the default tokenizer's end-of-story token

# A step's loss: (model, inputs, targets) -> (the loss to minimise, numbers to record for this step)
StepLoss = Callable[[Transformer, torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict]]


def plain_loss(model: Transformer, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict]:
    return model(inputs, targets).loss, {}


@cache  # one corpus per process (lessons and figures ask again); read, never changed
def story_tokens(n_stories: int, seed: int) -> tuple[Tokenizer, torch.Tensor, torch.Tensor]:
    """The default model's tokenizer, and ``n_stories`` generated stories (model/data/stories.py)
    as one sequence of ids, each story followed by the end token: 95% for training, the rest
    for validation."""
    tokenizer = Tokenizer.from_dir(asset("default"))
    end = tokenizer.token_id(END)
    ids = []
    for text in corpus(n_stories, seed):
        ids += tokenizer.encode(text) + [end]
    data = torch.tensor(ids)
    split = int(len(data) * 0.95)
    return tokenizer, data[:split], data[split:]


def windows(source: torch.Tensor, batch: int, T: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random windows of T ids, and the same shifted by one (each position's next id)."""
    starts = torch.randint(len(source) - T - 1, (batch,), generator=generator)
    window = torch.stack([source[s : s + T + 1] for s in starts])
    return window[:, :-1], window[:, 1:]


def fit(
    model: Transformer,
    next_batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float,
    seed: int,
    warmup: int = 50,
    weight_decay: float = 0.0,
    step_loss: StepLoss = plain_loss,
    every: Callable[[int, Transformer], dict] | None = None,
    every_steps: int = 25,
    on_step: Callable[[int, int], None] | None = None,
) -> dict:
    """Train ``model`` in place for ``steps`` steps and return its curve: every step's batch loss
    (and whatever ``step_loss`` records), and at step 0, every ``every_steps`` steps and the end,
    what ``every(step, model)`` measures (scores on held-out data, checkpoints); ``on_step(done,
    steps)`` after each step (a progress bar). Deterministic: the same seed on the same machine
    gives the same weights."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return _fit(model, next_batch, steps, lr, seed, warmup, weight_decay, step_loss, every, every_steps, on_step)
    finally:
        torch.use_deterministic_algorithms(deterministic)


def _fit(model, next_batch, steps, lr, seed, warmup, weight_decay, step_loss, every, every_steps, on_step) -> dict:
    started = time.time()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    curve: dict[str, list] = {"step": [], "loss": []}

    def measure(step: int) -> None:
        if every is None:
            return
        model.eval()
        with torch.no_grad():
            for key, value in every(step, model).items():
                curve.setdefault(key, []).append(value)
        model.train()

    model.train()
    measure(0)  # before the first update
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate_at("warmup + cosine", step, steps, lr, warmup, floor=0.1)
        loss, recorded = step_loss(model, *next_batch(gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # a model of its own, being trained: never the shared one
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve["step"].append(step)
        curve["loss"].append(round(loss.item(), 5))
        for key, value in recorded.items():
            curve.setdefault(key, []).append(value)
        if (step + 1) % every_steps == 0 or step == steps - 1:
            measure(step + 1)  # after step + 1 updates
        if on_step is not None:
            on_step(step + 1, steps)
        if step % 50 == 0 or step == steps - 1:
            sys.stderr.write(f"\rstep {step + 1}/{steps} loss {loss.item():.3f} {time.time() - started:.0f}s ")
            sys.stderr.flush()
    sys.stderr.write("\n")
    model.eval()
    for p in model.parameters():
        p.grad = None
    curve["seconds"] = round(time.time() - started, 1)
    curve["threads"] = torch.get_num_threads()
    return curve


def write(path: Path, model: Transformer, tokenizer: Tokenizer, about: dict, curve: dict) -> None:
    """The model in Glassbox's format (float32), and its curve as training.json."""
    about = dict(
        about,
        card=dict(
            about.get("card", {}),
            parameters=sum(p.numel() for p in model.parameters()),
            seconds=curve["seconds"],
            threads=curve["threads"],
        ),
    )
    save(path, model, tokenizer, "float32", about)
    (Path(path) / "training.json").write_text(json.dumps(curve) + "\n")


def read_curve(path: Path) -> dict:
    """A micro-model's training.json (read like every side file: bounded, a regular file)."""
    return read_json(Path(path) / "training.json", SIDE_FILE_BYTES)
