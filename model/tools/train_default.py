"""`glassbox train-default` (`python -m model train-default`): the default model, trained here from nothing.

Regenerates the story corpus (model/data/stories.py), trains a byte-level BPE tokenizer on it,
then a small GPT (GPT-2's architecture, about 1M parameters) with AdamW, and writes the
weights, tokenizer, loss curve and model card to assets/default. Seeded throughout; on the
same machine and thread count the result is the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer

from model.data.stories import corpus
from model.engine import ModelConfig, Transformer
from model.io.assets import asset
from model.io.checkpoint import save
from model.io.tokenizer import Tokenizer

DIR = asset("default")
SEED = 0
N_STORIES = 20_000
VOCAB = 1024
END = "<|endoftext|>"
CONFIG = ModelConfig(vocab_size=VOCAB, n_ctx=128, d_model=128, n_layers=4, n_heads=4, d_ff=512, norm="layernorm",
                     activation="gelu_tanh", positional="table", attn_bias=True, mlp_bias=True, final_norm=True,
                     tie_embeddings=True)
STEPS, BATCH, LR, WARMUP = 5000, 16, 3e-3, 100


def build_tokenizer(texts: list[str]) -> Tokenizer:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=VOCAB, min_frequency=2, special_tokens=[END], show_progress=False)
    return Tokenizer(bpe._tokenizer)


def progress(step: int, total: int, loss: float, started: float, out=sys.stderr) -> None:
    done = step / total
    bar = "#" * int(30 * done) + "-" * (30 - int(30 * done))
    elapsed = time.time() - started
    out.write(f"\r[{bar}] step {step}/{total} loss {loss:.3f} {elapsed:.0f}s, ~{elapsed / done - elapsed:.0f}s left ")
    out.flush()


def learning_rate(step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(STEPS - WARMUP, 1)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(path: Path = DIR, steps: int = STEPS, n_stories: int = N_STORIES, log=print) -> None:
    # CPU kernels that accumulate in parallel (the embedding's backward) may otherwise add
    # in a different order each run, and the weights would differ in their last bits
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        _train(path, steps, n_stories, log)
    finally:
        torch.use_deterministic_algorithms(deterministic)


def _train(path: Path, steps: int, n_stories: int, log) -> None:
    started = time.time()
    torch.manual_seed(SEED)
    texts = corpus(n_stories, SEED)
    tokenizer = build_tokenizer(texts)
    end_id = tokenizer.token_id(END)
    ids = []
    for text in texts:
        ids += tokenizer.encode(text) + [end_id]
    data = torch.tensor(ids)
    split = int(len(data) * 0.95)
    train_data, val_data = data[:split], data[split:]
    log(f"corpus: {len(texts)} stories, {sum(map(len, texts)):,} characters, {len(data):,} tokens "
        f"(validation {len(val_data):,})")

    cfg = dataclasses.replace(CONFIG, vocab_size=tokenizer.vocab_size)  # a small corpus may give fewer merges
    model = Transformer(cfg).init_weights(SEED)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params:,} parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(SEED)
    T = cfg.n_ctx

    def batch(source: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(source) - T - 1, (BATCH,), generator=generator)
        window = torch.stack([source[s:s + T + 1] for s in starts])
        return window[:, :-1], window[:, 1:]

    def validation_loss() -> float:
        val_gen = torch.Generator().manual_seed(SEED + 1)  # the same batches every time
        model.eval()
        with torch.no_grad():
            losses = [model(*batch(val_data, val_gen)).loss.item() for _ in range(10)]
        model.train()
        return sum(losses) / len(losses)

    curve = {"step": [], "train_loss": [], "val_step": [], "val_loss": []}
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step)
        loss = model(*batch(train_data, gen)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve["step"].append(step)
        curve["train_loss"].append(loss.item())
        if step % 10 == 0 or step == steps - 1:
            progress(step + 1, steps, loss.item(), started)
        if step % 250 == 0 or step == steps - 1:  # (train_loss below: the last 50 batches)
            curve["val_step"].append(step)
            curve["val_loss"].append(validation_loss())
    sys.stderr.write("\n")
    model.eval()
    for p in model.parameters():
        p.grad = None
    minutes = (time.time() - started) / 60
    log(f"trained {steps} steps in {minutes:.1f} min: validation loss {curve['val_loss'][-1]:.3f}")
    about = {
        "source": "trained by `python -m model train-default` on stories generated by model/data/stories.py",
        "sample_prompt": "the cat sat on the",
        "card": {
            "parameters": n_params,
            "architecture": f"GPT-2 style: {cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads, "
                            f"d_ff {cfg.d_ff}, context {cfg.n_ctx}, byte-level BPE vocabulary {cfg.vocab_size}",
            "corpus": {"stories": len(texts), "characters": sum(map(len, texts)), "tokens": len(data),
                       "validation_tokens": len(val_data), "seed": SEED},
            "training": {"steps": steps, "batch": BATCH, "tokens_seen": steps * BATCH * T, "optimizer":
                         f"AdamW lr {LR:g} (warm-up {WARMUP}, cosine to {LR / 10:g}), weight decay 0.1",
                         "minutes": round(minutes, 1), "threads": torch.get_num_threads()},
            "train_loss": round(sum(curve["train_loss"][-50:]) / len(curve["train_loss"][-50:]), 4),
            "validation_loss": round(curve["val_loss"][-1], 4),
        },
    }
    save(path, model, tokenizer, "float32", about)
    (path / "training.json").write_text(json.dumps(curve) + "\n")
    add_samples(path)
    log(f"wrote {path}")


SAMPLE_PROMPTS = [("the cat sat on the", 0.0, 0), ("Once upon a time,", 1.0, 1), ("Lily had a", 1.0, 2),
                  ('"Hello, Tom!" said', 1.0, 3), ("The dogs", 1.0, 4)]


def add_samples(path: Path = DIR) -> None:
    """Put sample continuations in the model card (config.json's about.samples)."""
    from model.io.checkpoint import load
    from model.engine.sampling import Sampling, generate

    loaded = load(str(path))
    samples = []
    for prompt, temperature, seed in SAMPLE_PROMPTS:
        new = [t.token_id for t in generate(loaded, prompt, 40 if temperature else 3, Sampling(temperature, seed=seed))]
        text = loaded.tokenizer.decode(new).split(END)[0]
        samples.append({"prompt": prompt, "completion": text,
                        "settings": "greedy" if temperature == 0 else f"temperature {temperature:g}, seed {seed}"})
    config = json.loads((path / "config.json").read_text())
    config["about"]["samples"] = samples
    (path / "config.json").write_text(json.dumps(config, indent=1) + "\n")
