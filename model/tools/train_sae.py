"""`glassbox train-sae`: a sparse autoencoder for the default model, trained here from nothing.

It reads the residual stream entering block 3 (``blocks.2.hook_resid_pre``) of the bundled
default model over its own training stories, and learns 1,024 features (8 × d_model) of which
exactly k = 16 are active at each position (a TopK SAE: no sparsity penalty to tune). The
decoder's rows are kept at unit norm, so a feature's activation is the length it adds along
its direction. Written in SAELens's format (cfg.json + sae_weights.safetensors; SAELens's
``SAE.load_from_disk`` reads it), with training.json: the loss curve, the fraction of variance
explained on held-out stories, and the features that never fired there. The shipped one is
assets/default-sae. Seeded throughout. The loop itself is ``fit``, for any rows: the lab's sae
(model/lab/sae.py) trains it on features planted on purpose.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Collection
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


def sae_of(W_enc, b_enc, W_dec, b_dec, k: int = K, hook: str = HOOK) -> SparseAutoencoder:
    return SparseAutoencoder("topk", hook, hook, W_enc, b_enc, W_dec, b_dec, k=k)


def fit(
    train_x: torch.Tensor,
    d_sae: int = D_SAE,
    k: int = K,
    steps: int = STEPS,
    batch: int = BATCH,
    lr: float = LR,
    seed: int = SEED,
    hook: str = HOOK,
    watch: Callable[[int, SparseAutoencoder], None] | None = None,
    watch_at: Collection[int] = (),
    on_step: Callable[[int, int], None] | None = None,
    progress: bool = True,
) -> tuple[SparseAutoencoder, list[dict]]:
    """The training loop of `glassbox train-sae`, for any rows ``train_x`` (positions × d_in): a TopK
    SAE of ``d_sae`` features, ``k`` active, its decoder rows random unit vectors and its encoder their
    transpose, b_dec the data's mean; Adam on the summed squared error, mean over a batch of ``batch``
    rows drawn with replacement; the decoder's rows put back at unit norm after every step. Seeded by
    ``seed`` alone. ``watch(step, sae)`` at each step in ``watch_at`` (0: before the first update),
    ``on_step(done, steps)`` after each step. Returns the SAE and its loss curve (every 100 steps)."""
    d_in = train_x.shape[1]
    generator = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(d_sae, d_in, generator=generator)
    W_dec = (W_dec / W_dec.norm(dim=-1, keepdim=True)).requires_grad_()
    W_enc = W_dec.detach().T.clone().requires_grad_()
    b_enc = torch.zeros(d_sae, requires_grad=True)
    b_dec = train_x.mean(0).clone().requires_grad_()  # the data's centre: the features describe what is left
    optimiser = torch.optim.Adam([W_enc, b_enc, W_dec, b_dec], lr=lr)

    def now() -> SparseAutoencoder:
        return sae_of(*(t.detach().clone() for t in (W_enc, b_enc, W_dec, b_dec)), k=k, hook=hook)

    if watch is not None and 0 in watch_at:
        watch(0, now())
    curve = []
    for step in range(1, steps + 1):
        rows = train_x[torch.randint(len(train_x), (batch,), generator=generator)]
        loss = (sae_of(W_enc, b_enc, W_dec, b_dec, k=k, hook=hook)(rows) - rows).pow(2).sum(-1).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=-1, keepdim=True)
        if step % 100 == 0 or step == steps:
            curve.append({"step": step, "mse": loss.item()})
            if progress:
                sys.stderr.write(f"\rstep {step}/{steps} mse {curve[-1]['mse']:.4f}")
        if watch is not None and step in watch_at:
            watch(step, now())
        if on_step is not None:
            on_step(step, steps)
    if progress:
        sys.stderr.write("\n")
    return now(), curve


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
    sae, curve = fit(train_x, steps=steps)
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
