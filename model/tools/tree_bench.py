"""``glassbox bench --tree``: what a branch of the generation tree costs beside a fresh generation.

For prompts of ``PROMPTS`` tokens and ``NEW`` new tokens, on the bundled default model and on a
GPT-2-small-shaped one (random weights, float32), a token is forced at new token ``j`` (the start,
the middle, the last) two ways, timed interleaved (medians after a warm-up):

  branch  ``tree.branch(position, token)``: the path's KV cache up to ``j`` reused, only the forced
          token and the ones after it go through the model
  fresh   the same continuation generated from scratch: the prompt, the path up to ``j`` and the
          forced token prefilled, then the rest drawn (what a tool without a tree does)

Both give the same tokens (checked: the bench exits 1 if not). Reported: the milliseconds, the
positions each computed, and branch ÷ fresh. A fresh generation computes its prefix in one batched
pass, so what a branch saves grows with the prefix: about one step's time for a short prompt, most
of the time for a long one."""

from __future__ import annotations

import copy
import json
import statistics
import time
from pathlib import Path

import torch

from glassbox.model.engine import ModelConfig, Transformer
from glassbox.model.engine.files import write_text
from glassbox.model.engine.generation_tree import GenerationTree
from glassbox.model.engine.sampling import Sampling, generate

PROMPTS, NEW = (32, 480), 32  # prompt lengths (the default model's context, 128, caps them), new tokens
GPT2_SMALL = ModelConfig(vocab_size=50257, n_ctx=1024, d_model=768, n_layers=12, n_heads=12, d_ff=3072)


class RandomTextModel:
    """A model with random weights and token ids for text: what generation needs of a loaded one."""

    def __init__(self, cfg: ModelConfig):
        self.model, self.cfg = Transformer(cfg).init_weights(0).float().eval(), cfg
        self.pieces = [f"<{i}>" for i in range(cfg.vocab_size)]
        self.tokenizer = None

    def encode(self, prompt: str) -> list[int]:
        raise NotImplementedError("the bench passes token ids")


def measure(loaded, n_prompt: int, n_new: int = NEW, repeats: int = 5) -> list[dict]:
    """For a branch at the start, the middle and the last new token: the median ms of a branch and of
    a fresh generation of the same forced prefix, and the positions each computed."""
    prompt = torch.randint(0, loaded.cfg.vocab_size, (n_prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    sampling = Sampling(temperature=1.0, seed=0)
    tree = GenerationTree(loaded, prompt, n_new, sampling)
    rows = []
    for step in (0, n_new // 2, n_new - 1):
        position = n_prompt + step
        token = (tree.paths[0].token_ids[step] + 1) % loaded.cfg.vocab_size
        prefix = tree.tokens(0)[:position] + [token]
        times: dict[str, list[float]] = {"branch": [], "fresh": []}
        for repeat in range(repeats + 1):  # the first of each is a warm-up
            again = copy.copy(tree)  # the same first path and cache, without the branch made last time
            again.paths = tree.paths[:1]
            started = time.perf_counter()
            branch = again.branch(position, token)
            branch_ms = (time.perf_counter() - started) * 1e3
            started = time.perf_counter()
            fresh = list(generate(loaded, prefix, n_new - step - 1, sampling)) if step < n_new - 1 else []
            fresh_ms = (time.perf_counter() - started) * 1e3
            if branch.token_ids[step + 1 :] != [t.token_id for t in fresh]:
                raise SystemExit(f"a branch at new token {step} differs from the fresh generation")
            if repeat:
                times["branch"].append(branch_ms)
                times["fresh"].append(fresh_ms)
        branch_ms, fresh_ms = statistics.median(times["branch"]), statistics.median(times["fresh"])
        rows.append(
            {
                "new_token": step,
                "branch_ms": branch_ms,
                "fresh_ms": fresh_ms,
                "branch_positions": branch.computed,
                "fresh_positions": position + 1 + max(n_new - step - 2, 0) if step < n_new - 1 else 0,
                "ratio": branch_ms / fresh_ms if step < n_new - 1 else None,  # the last: nothing to compute either way
            }
        )
    return rows


def run(json_path: Path | None, repeats: int = 5) -> int:
    from glassbox.model.io.checkpoint import load

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {NEW} new tokens, float32, CPU")
    report: dict = {}
    with torch.no_grad():
        for label, loaded in (("default", load("default")), ("gpt2-small shape", RandomTextModel(GPT2_SMALL))):
            for n_prompt in sorted({min(n, loaded.cfg.n_ctx - NEW) for n in PROMPTS}):
                rows = report[f"{label}, prompt {n_prompt}"] = measure(loaded, n_prompt, repeats=repeats)
                print(f"\n{label}, prompt {n_prompt} tokens")
                print(f"  {'branch at new token':<20} {'branch ms':>10} {'fresh ms':>10} {'positions':>12} {'ratio':>7}")
                for r in rows:
                    ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
                    positions = f"{r['branch_positions']}/{r['fresh_positions']}"
                    print(f"  {r['new_token'] + 1:<20} {r['branch_ms']:10.1f} {r['fresh_ms']:10.1f} {positions:>12} {ratio:>7}")
    if json_path:
        write_text(json_path, json.dumps({"new": NEW, "threads": torch.get_num_threads(), **report}, indent=2))
        print(f"\nwrote {json_path}")
    return 0
