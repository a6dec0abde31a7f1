"""`glassbox train-sae`: a sparse autoencoder for the default model, trained here from nothing.

It reads the residual stream entering block 3 (``blocks.2.hook_resid_pre``) of the bundled
default model over its own training stories, and learns 1,024 features (8 × d_model) of which
exactly k = 16 are active at each position (a TopK SAE: no sparsity penalty to tune). The
decoder's rows are kept at unit norm, so a feature's activation is the length it adds along
its direction. Written in SAELens's format (cfg.json + sae_weights.safetensors; SAELens's
``SAE.load_from_disk`` reads it), with training.json: the loss curve, the fraction of variance
explained on held-out stories, and the features that never fired there. The shipped one is
assets/default-sae. Seeded throughout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from glassbox.model.data.stories import corpus
from glassbox.model.engine import run_trace
from glassbox.model.engine.sae import SparseAutoencoder
from glassbox.model.io.checkpoint import load

SEED = 0
HOOK = "blocks.2.hook_resid_pre"
D_SAE, K = 1024, 16
N_STORIES = 1200  # and a sixth as many held out
STEPS, BATCH, LR = 3000, 2048, 2e-3


def activations(loaded, texts: list[str]) -> torch.Tensor:
    """Every position's residual stream at HOOK over ``texts`` (each cut to the context)."""
    rows = [run_trace(loaded.model, loaded.encode(text)[: loaded.cfg.n_ctx], names=[HOOK])[HOOK] for text in texts]
    return torch.cat(rows).float()


def sae_of(W_enc, b_enc, W_dec, b_dec) -> SparseAutoencoder:
    return SparseAutoencoder("topk", HOOK, HOOK, W_enc, b_enc, W_dec, b_dec, k=K)


def train(path: Path, steps: int = STEPS, n_stories: int = N_STORIES, log=print) -> dict:
    torch.manual_seed(SEED)
    loaded = load("default", dtype="float32", device="cpu")
    held_out = max(1, n_stories // 6)
    texts = corpus(n_stories + held_out)
    started = time.time()
    with torch.no_grad():
        train_x, held_x = activations(loaded, texts[:n_stories]), activations(loaded, texts[n_stories:])
    log(f"{len(train_x):,} training positions, {len(held_x):,} held out ({time.time() - started:.0f}s)")
    d_in = train_x.shape[1]
    generator = torch.Generator().manual_seed(SEED)
    W_dec = torch.randn(D_SAE, d_in, generator=generator)
    W_dec = (W_dec / W_dec.norm(dim=-1, keepdim=True)).requires_grad_()
    W_enc = W_dec.detach().T.clone().requires_grad_()
    b_enc = torch.zeros(D_SAE, requires_grad=True)
    b_dec = train_x.mean(0).clone().requires_grad_()  # the data's centre: the features describe what is left
    optimiser = torch.optim.Adam([W_enc, b_enc, W_dec, b_dec], lr=LR)
    curve = []
    for step in range(1, steps + 1):
        batch = train_x[torch.randint(len(train_x), (BATCH,), generator=generator)]
        loss = (sae_of(W_enc, b_enc, W_dec, b_dec)(batch) - batch).pow(2).sum(-1).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=-1, keepdim=True)
        if step % 100 == 0 or step == steps:
            curve.append({"step": step, "mse": loss.item()})
            sys.stderr.write(f"\rstep {step}/{steps} mse {curve[-1]['mse']:.4f}")
    sys.stderr.write("\n")
    sae = sae_of(*(t.detach() for t in (W_enc, b_enc, W_dec, b_dec)))
    with torch.no_grad():
        acts = sae.encode(held_x)
        residual = (held_x - sae.decode(acts, held_x)).pow(2).sum()
        explained = 1 - float(residual / (held_x - held_x.mean(0)).pow(2).sum())
        dead = int(((acts > 0).sum(0) == 0).sum())
    summary = {
        "hook": HOOK,
        "d_sae": D_SAE,
        "k": K,
        "steps": steps,
        "batch": BATCH,
        "lr": LR,
        "seed": SEED,
        "training_positions": len(train_x),
        "held_out_positions": len(held_x),
        "variance_explained_held_out": explained,
        "dead_features_held_out": dead,
        "curve": curve,
    }
    save(path, sae, d_in)
    (path / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    log(f"variance explained {explained:.3f} on held-out stories, {dead} features never active there")
    return summary


def save(path: Path, sae: SparseAutoencoder, d_in: int) -> None:
    """SAELens's format: what its ``SAE.save_model`` writes for a TopK SAE."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architecture": "topk",
        "d_in": d_in,
        "d_sae": sae.d_sae,
        "k": K,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "rescale_acts_by_decoder_norm": False,
        "metadata": {
            "model_name": "default",
            "hook_name": HOOK,
            "dataset_path": "Glassbox's story corpus",
            "context_size": 128,
            "prepend_bos": False,
        },
    }
    (path / "cfg.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file(
        {"W_enc": sae.W_enc.contiguous(), "b_enc": sae.b_enc, "W_dec": sae.W_dec.contiguous(), "b_dec": sae.b_dec},
        str(path / "sae_weights.safetensors"),
    )
