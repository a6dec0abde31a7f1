"""`glassbox train-transcoder`: a transcoder for every block of a model, trained here from nothing.

A transcoder reads an MLP's input (``blocks.L.ln2.hook_out``, the normed stream the MLP reads) and
predicts its output (``blocks.L.hook_mlp_out``) through a wide, sparse layer of ReLU features:
the MLP replaced by features that can be read (the attribution graph's replacement model). Each
is trained on the model's own story corpus, with Adam on the squared error plus an L1 penalty on
each feature's activation times its decoder row's norm (SAELens's standard sparsity loss), seeded
throughout. Written in SAELens's transcoder format (one folder per block: cfg.json +
sae_weights.safetensors), with training.json: per block the explained variance of the MLP's
output on held-out stories, the mean number of active features (L0), the features never active
there, and the replacement model's next-token loss (every MLP replaced) beside the real one."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from glassbox.model.data.stories import corpus
from glassbox.model.engine import run_trace
from glassbox.model.engine.edits import editing
from glassbox.model.engine.sae import SparseAutoencoder

SEED = 0
EXPANSION = 4  # features per MLP hidden unit's worth of d_model: d_sae = EXPANSION × d_model
L1 = 0.1
STEPS, BATCH, LR = 2000, 1024, 1e-3
N_STORIES = 400  # and a sixth as many held out


def reads(block: int) -> str:
    return f"blocks.{block}.ln2.hook_out"


def writes(block: int) -> str:
    return f"blocks.{block}.hook_mlp_out"


def pairs(loaded, texts: list[str]) -> tuple[list[torch.Tensor], list[torch.Tensor], list[list[int]]]:
    """Per block, every position's MLP input and output over ``texts`` (each cut to the context), and the texts' tokens."""
    n = loaded.cfg.n_layers
    names = [reads(i) for i in range(n)] + [writes(i) for i in range(n)]
    xs: list[list[torch.Tensor]] = [[] for _ in range(n)]
    ys: list[list[torch.Tensor]] = [[] for _ in range(n)]
    token_lists = []
    for text in texts:
        tokens = loaded.encode(text)[: loaded.cfg.n_ctx]
        if len(tokens) < 2:
            continue
        token_lists.append(tokens)
        trace = run_trace(loaded.model, tokens, names=names)
        for i in range(n):
            xs[i].append(trace[reads(i)].float())
            ys[i].append(trace[writes(i)].float())
    return [torch.cat(x) for x in xs], [torch.cat(y) for y in ys], token_lists


def fit(x: torch.Tensor, y: torch.Tensor, d_sae: int, block: int, steps: int = STEPS, seed: int = SEED) -> SparseAutoencoder:
    """A ReLU transcoder from rows ``x`` (positions × d_in) to rows ``y`` (positions × d_out)."""
    generator = torch.Generator().manual_seed(seed + block)
    d_in, d_out = x.shape[1], y.shape[1]
    W_dec = torch.randn(d_sae, d_out, generator=generator)
    W_dec = (W_dec / W_dec.norm(dim=-1, keepdim=True) * 0.1).requires_grad_()
    W_enc = (torch.randn(d_in, d_sae, generator=generator) / d_in**0.5).requires_grad_()
    b_enc = torch.zeros(d_sae, requires_grad=True)
    b_dec = y.mean(0).clone().requires_grad_()
    optimiser = torch.optim.Adam([W_enc, b_enc, W_dec, b_dec], lr=LR)
    spread = float((y - y.mean(0)).pow(2).sum(-1).mean().sqrt())  # the output's root-mean-square distance from its mean
    for step in range(1, steps + 1):
        rows = torch.randint(len(x), (BATCH,), generator=generator)
        acts = (x[rows] @ W_enc + b_enc).relu()
        error = (acts @ W_dec + b_dec - y[rows]).pow(2).sum(-1).mean()
        sparsity = (acts * W_dec.norm(dim=-1)).sum(-1).mean()
        loss = error / spread**2 + L1 * sparsity / spread  # both in units of the output's spread: one L1 for every block
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 200 == 0 or step == steps:
            sys.stderr.write(f"\rblock {block + 1}: step {step}/{steps} mse {error.item():.4f}")
    sys.stderr.write("\n")
    weights = (t.detach().clone() for t in (W_enc, b_enc, W_dec, b_dec))
    return SparseAutoencoder("transcoder", reads(block), writes(block), *weights, apply_b_dec_to_input=False)


def replacing(transcoders: list[SparseAutoencoder]) -> dict:
    """Edits that replace every MLP's output by its transcoder's prediction from the MLP input of
    the same pass (which earlier replacements have already changed)."""
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def kept(x: torch.Tensor) -> torch.Tensor:
            seen[name] = x
            return x

        return kept

    def predict(t: SparseAutoencoder):
        return lambda out: torch.stack([t(row.to(t.W_enc.dtype)) for row in seen[t.reads]]).to(out.dtype)

    return {t.reads: keep(t.reads) for t in transcoders} | {t.writes: predict(t) for t in transcoders}


def replacement_loss(loaded, transcoders: list[SparseAutoencoder], token_lists: list[list[int]]) -> tuple[float, float]:
    """(the real model's mean next-token loss, the replacement model's, every MLP replaced) over ``token_lists``."""
    real, replaced, count = 0.0, 0.0, 0
    for tokens in token_lists:
        ids = torch.tensor([tokens])
        targets = ids.roll(-1, 1).masked_fill(
            torch.arange(len(tokens)) == len(tokens) - 1, -1
        )  # the next token; none after the last
        with torch.no_grad():
            real += float(loaded.model(ids, targets).loss) * (len(tokens) - 1)
            with editing(replacing(transcoders)):
                replaced += float(loaded.model(ids, targets).loss) * (len(tokens) - 1)
        count += len(tokens) - 1
    return real / count, replaced / count


def train(loaded, path: Path, steps: int = STEPS, n_stories: int = N_STORIES, d_sae: int | None = None, log=print) -> dict:
    """Train, measure and write every block's transcoder under ``path`` (blocks.L/ each)."""
    torch.manual_seed(SEED)
    held_out = max(1, n_stories // 6)
    texts = corpus(n_stories + held_out)
    started = time.time()
    with torch.no_grad():
        xs, ys, _ = pairs(loaded, texts[:n_stories])
        held_xs, held_ys, held_tokens = pairs(loaded, texts[n_stories:])
    d_sae = d_sae or EXPANSION * loaded.cfg.d_model
    log(f"{len(xs[0]):,} training positions, {len(held_xs[0]):,} held out ({time.time() - started:.0f}s)")
    transcoders, blocks = [], []
    for i in range(loaded.cfg.n_layers):
        t = fit(xs[i], ys[i], d_sae, i, steps)
        with torch.no_grad():
            acts = t.encode(held_xs[i])
            residual = (held_ys[i] - t.decode(acts, held_xs[i])).pow(2).sum()
            explained = 1 - float(residual / (held_ys[i] - held_ys[i].mean(0)).pow(2).sum())
        blocks.append(
            {
                "block": i,
                "reads": t.reads,
                "writes": t.writes,
                "variance_explained_held_out": explained,
                "l0_held_out": float((acts > 0).sum(-1).float().mean()),
                "dead_features_held_out": int(((acts > 0).sum(0) == 0).sum()),
            }
        )
        log(
            f"block {i + 1}: variance explained {explained:.3f}, L0 {blocks[-1]['l0_held_out']:.1f}, {blocks[-1]['dead_features_held_out']} dead"
        )
        transcoders.append(t)
        save(path / f"blocks.{i}", t, loaded.name)
    real, replaced = replacement_loss(loaded, transcoders, held_tokens)
    log(f"next-token loss on held-out stories: {real:.4f} real, {replaced:.4f} with every MLP replaced")
    summary = {
        "model": loaded.name,
        "d_sae": d_sae,
        "l1": L1,
        "steps": steps,
        "batch": BATCH,
        "lr": LR,
        "seed": SEED,
        "training_positions": len(xs[0]),
        "held_out_positions": len(held_xs[0]),
        "blocks": blocks,
        "loss_held_out": real,
        "replacement_loss_held_out": replaced,
        "seconds": time.time() - started,
    }
    (path / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def save(path: Path, t: SparseAutoencoder, model_name: str) -> None:
    """SAELens's transcoder format: what its ``Transcoder.save_model`` writes."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architecture": "transcoder",
        "d_in": t.d_in,
        "d_sae": t.d_sae,
        "d_out": t.W_dec.shape[1],
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": False,
        "normalize_activations": "none",
        "metadata": {"model_name": model_name, "hook_name": t.reads, "hook_name_out": t.writes, "prepend_bos": False},
    }
    (path / "cfg.json").write_text(json.dumps(config, indent=1) + "\n")
    weights = {"W_enc": t.W_enc, "b_enc": t.b_enc, "W_dec": t.W_dec, "b_dec": t.b_dec}
    save_file({k: v.contiguous().float() for k, v in weights.items()}, str(path / "sae_weights.safetensors"))
