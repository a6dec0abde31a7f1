"""``glassbox bench --analyses [HUB_ID ...]``: the newer analyses' cost on real model shapes.

Each model (default: GPT-2 small and Gemma 3 270M) is laid out as ``bench --families`` lays it
out (its curated hub config, random weights, a small tokenizer), then each analysis runs in a
process of its own, after loading the model there (float32, this machine's default device), so
that its peak memory is its own: steering (16 new tokens, both completions), the head catalog
(4 texts of 128 random tokens), path patching into the queries (a 16-token pair differing at its
last position, "path-patch", and at every position, "path-patch-all": nothing shared), verify
beside transformers' own class (a 32-token prompt, with gradients), and sparse-autoencoder
features at the curated SAEs' widths (model/io/sae.py; random weights, built in the process:
GPT-2's 24,576 ReLU features at blocks.8.hook_resid_pre, Gemma's 16,384 JumpReLU ones at
blocks.12.hook_resid_post) on 128 tokens: the features, one feature's logit effect and its
ablation. Reported: the seconds of
the call (the load not counted) and the process's peak resident memory (the load counted).
Needs transformers, as ``bench --families`` does.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("openai-community/gpt2", "google/gemma-3-270m")
ANALYSES = ("steer", "heads", "path-patch", "path-patch-all", "verify", "features")
BENCH_HOOKS = ("blocks.8.hook_resid_pre", "blocks.12.hook_resid_post")  # the curated SAEs measured (GPT-2, Gemma)


def measure(analysis: str, path: Path) -> dict:
    """One analysis on the model in ``path``, in this (fresh) process."""
    import torch

    from glassbox.model.analysis.features import ablate_feature, features, logit_effect
    from glassbox.model.analysis.head_catalog import head_catalog
    from glassbox.model.analysis.path_patching import path_patching
    from glassbox.model.analysis.steering import Steering, contrastive_vector, steered
    from glassbox.model.engine import default_device
    from glassbox.model.engine.sampling import Sampling
    from glassbox.model.io.checkpoint import load
    from glassbox.model.io.verify import verify

    loaded = load(str(path), dtype="float32")
    n = loaded.tokenizer.vocab_size
    length = min(128, loaded.cfg.n_ctx)  # a test's tiny model has a shorter context
    draw = torch.randint(0, n, (4, length), generator=torch.Generator().manual_seed(0)).tolist()
    model, block = loaded.model, loaded.cfg.n_layers // 2
    started = time.perf_counter()
    if analysis == "steer":
        vector = contrastive_vector(model, draw[0][:8], draw[1][:8], block)
        steered(loaded, loaded.tokenizer.decode(draw[2][:16]), 16, Sampling(seed=0), Steering(block, vector, 4.0))
    elif analysis == "heads":
        head_catalog(model, draw)
    elif analysis.startswith("path-patch"):  # the positions before the first difference run once
        clean, corrupt = draw[0][:16], (draw[1][:16] if analysis == "path-patch-all" else draw[0][:15] + draw[1][:1])
        path_patching(model, clean, corrupt, draw[2][0], draw[2][1], "q")
    elif analysis == "features":
        sae = random_sae(loaded)
        started = time.perf_counter()  # the SAE's random weights are not what is measured
        features(model, draw[0], sae)
        logit_effect(model, draw[0], sae, 0)
        ablate_feature(model, draw[0], sae, 0)
    else:
        verify(loaded, draw[0][:32], gradients=True)
    if default_device().type == "cuda":
        torch.cuda.synchronize()
    return {
        "analysis": analysis,
        "seconds": time.perf_counter() - started,
        "device": str(default_device()),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
    }


def random_sae(loaded):
    """An SAE of a curated one's width and hook for this model's shape (BENCH_HOOKS; a model no
    curated SAE reads gets 8 × d_model features), random weights."""
    import torch

    from glassbox.model.engine.sae import SparseAutoencoder
    from glassbox.model.io.sae import curated

    d = loaded.cfg.d_model
    entry = next((e for e in curated() if e.d_in == d and e.hook in BENCH_HOOKS), None)
    if entry is None:  # a test's tiny model
        d_sae, hook, jumprelu = 8 * d, f"blocks.{min(8, loaded.cfg.n_layers - 1)}.hook_resid_pre", False
    else:
        d_sae, hook, jumprelu = entry.d_sae, entry.hook, "gemma-scope" in entry.source
    g = torch.Generator().manual_seed(0)
    W_enc = torch.randn(d, d_sae, generator=g) / d**0.5
    return SparseAutoencoder(
        "jumprelu" if jumprelu else "standard",
        hook,
        hook,
        W_enc,
        torch.zeros(d_sae),
        W_enc.T.contiguous(),
        torch.zeros(d),
        threshold=torch.full((d_sae,), 0.1) if jumprelu else None,
    ).to(loaded.model.embed.W_E.dtype, loaded.model.device)


def run(models: list[str] | None = None, json_path: Path | None = None) -> int:
    results = []
    print("random weights at each model's real shape, float32: seconds per call (load excluded), peak memory")
    print(f"{'model':<30} {'analysis':<14} {'seconds':>8} {'peak RSS GB':>12} {'peak GPU GB':>12}")
    for hub_id in models or MODELS:
        with tempfile.TemporaryDirectory() as folder:
            built = subprocess.run(
                [sys.executable, "-m", "glassbox.model.tools.family_bench", "build", hub_id, folder],
                capture_output=True,
                text=True,
            )
            if built.returncode != 0:
                print(f"{hub_id:<30} failed to build: {built.stderr.strip().splitlines()[-1:]}")
                continue
            for analysis in ANALYSES:
                done = subprocess.run(
                    [sys.executable, "-m", "glassbox.model.tools.analyses_bench", analysis, folder],
                    capture_output=True,
                    text=True,
                )
                if done.returncode != 0:
                    print(f"{hub_id:<30} {analysis:<14} failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                r = {"model": hub_id, **json.loads(done.stdout.strip().splitlines()[-1])}
                results.append(r)
                gpu = "-" if r["peak_gpu_bytes"] is None else f"{r['peak_gpu_bytes'] / 1e9:.2f}"
                print(f"{hub_id:<30} {analysis:<14} {r['seconds']:>8.2f} {r['peak_rss_bytes'] / 1e9:>12.2f} {gpu:>12}")
    if json_path:
        from glassbox.model.engine.files import write_text

        write_text(json_path, json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":  # one analysis, in a process of its own
    print(json.dumps(measure(sys.argv[1], Path(sys.argv[2]))))
