"""The two-layer attention-only model that learns induction heads. Its training text is random
syllables in which, after a short random lead, a random span of random length repeats to the end:
the first copy is unpredictable, the repeats are predictable only by finding the earlier occurrence
of the current token and copying what followed it (the span's length varies, so no fixed offset
works). That takes two heads in two blocks: a previous-token head in
block 1 writes "the token before me was x" into each position, and an induction head in block 2
attends from the current token x to the position after x's earlier occurrence and copies it.

Measured as the head scores of model/analysis/circuits.py on held-out repeated random sequences:
the induction score (mean attention from each token of the repeat to the token after its earlier
occurrence) and the previous-token score. Checkpoints saved during training show when the
mechanism forms: the score jumps within a few hundred steps (the phase change).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from glassbox.model.analysis.circuits import head_scores, random_tokens
from glassbox.model.engine import ModelConfig, Transformer
from glassbox.model.io.guard import regular_file
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.micro.common import fit, write

SEED, STEPS, BATCH, LR = 0, 2000, 32, 0.003
T = 64
SPAN = (8, 24)  # the repeated span's length, inclusive
LEAD = 10  # at most this many random tokens before the span
HALF = 20  # the held-out score's random sequence, repeated once: 2 × 20 tokens
SCORED_SEQUENCES = 16
CHECKPOINTS = (0, 50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1500)  # and the last step


def syllables() -> list[str]:
    """64 pronounceable tokens: 16 consonants × 4 vowels (ba, be, bi, bo, da, …)."""
    return [c + v for c in "bdfghjklmnprstvz" for v in "aeio"]


def config(vocab_size: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab_size,
        n_ctx=T,
        d_model=64,
        n_layers=2,
        n_heads=2,
        d_ff=1,
        attn_only=True,
        positional="table",
        tie_embeddings=False,
    )


def sequences(batch: int, vocab_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens; in each row, after a random lead of 0 to LEAD tokens, one random span
    repeated to the end. Inputs and next-token targets."""
    rows = torch.randint(vocab_size, (batch, T + 1), generator=generator)
    for row in rows:
        length = int(torch.randint(SPAN[0], SPAN[1] + 1, (1,), generator=generator))
        lead = int(torch.randint(LEAD + 1, (1,), generator=generator))
        span = row[lead : lead + length].clone()
        for start in range(lead + length, T + 1, length):
            row[start : start + length] = span[: T + 1 - start]
    return rows[:, :-1], rows[:, 1:]


def held_out_scores(model: Transformer, n: int = SCORED_SEQUENCES) -> tuple[np.ndarray, np.ndarray]:
    """Induction and previous-token scores per block and head, averaged over ``n`` held-out random
    sequences of HALF tokens repeated once (a generator seeded apart from training's)."""
    rng = np.random.default_rng(SEED + 1000)
    scores = [head_scores(model, random_tokens(model.cfg.vocab_size, HALF, rng)) for _ in range(n)]
    return np.mean([s[0] for s in scores], axis=0), np.mean([s[1] for s in scores], axis=0)


def train(path: Path, steps: int = STEPS) -> None:
    torch.manual_seed(SEED)
    path = Path(path)
    tokenizer = Tokenizer.from_words(syllables())
    model = Transformer(config(tokenizer.vocab_size)).init_weights(SEED)
    (path / "checkpoints").mkdir(parents=True, exist_ok=True)

    def every(step: int, m: Transformer) -> dict:
        induction, previous = held_out_scores(m)
        if step in CHECKPOINTS or step == steps:
            save_file(
                {k: v.detach().contiguous() for k, v in m.state_dict().items()},
                str(path / "checkpoints" / f"step-{step:05d}.safetensors"),
            )
        return {
            "score_step": step,
            "induction_score": round(float(induction[-1].max()), 4),
            "previous_token_score": round(float(previous[0].max()), 4),
        }

    curve = fit(model, lambda gen: sequences(BATCH, tokenizer.vocab_size, gen), steps, LR, SEED, every=every, every_steps=50)
    about = {
        "source": "trained by `glassbox train-micro induction` on random syllables with repeated spans",
        "sample_prompt": "ba ko mi to ze li ba ko mi to",
        "card": {
            "architecture": f"two attention-only blocks of {model.cfg.n_heads} heads, d_model "
            f"{model.cfg.d_model}, learned positions, context {T}, no MLP",
            "data": f"{T + 1} random syllables of {tokenizer.vocab_size}: up to {LEAD}, then a span of "
            f"{SPAN[0]}–{SPAN[1]} repeated to the end",
            "training": {"steps": steps, "batch": BATCH, "optimizer": f"AdamW lr {LR:g}"},
        },
    }
    write(path, model, tokenizer, about, curve)


def checkpoints(path: Path, cfg: ModelConfig) -> list[tuple[int, Transformer]]:
    """The models saved during training, by step (step 0: the random start)."""
    out = []
    for file in sorted(Path(path, "checkpoints").glob("step-*.safetensors")):
        model = Transformer(cfg)
        model.load_state_dict(load_file(str(regular_file(file))))
        out.append((int(file.stem.split("-")[1]), model.eval()))
    return out


def figures(loaded) -> dict:
    """Per block and head, the held-out induction and previous-token scores of the trained model;
    the heads that carry the mechanism; and the best induction score of block 2 at each checkpoint."""
    induction, previous = held_out_scores(loaded.model)
    prev_head, ind_head = int(previous[0].argmax()), int(induction[-1].argmax())
    return {
        "induction_scores": induction.round(4).tolist(),
        "previous_token_scores": previous.round(4).tolist(),
        "previous_token_head": {"block": 0, "head": prev_head, "score": round(float(previous[0, prev_head]), 4)},
        "induction_head": {"block": loaded.cfg.n_layers - 1, "head": ind_head, "score": round(float(induction[-1, ind_head]), 4)},
        "over_training": [
            {"step": step, "induction_score": round(float(held_out_scores(m)[0][-1].max()), 4)}
            for step, m in checkpoints(loaded.path, loaded.cfg)
        ],
    }
