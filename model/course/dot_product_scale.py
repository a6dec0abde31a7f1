"""Lesson 2, why the scores are divided by √d_k: (a) q·k of random unit-variance vectors has
variance d_k; (b) the course's two softmaxes, exactly; (c) the softmax's Jacobian vanishing as the
scores grow; (d) the bundled model with its score scale removed (the engine's own attn_scale,
through variant()): each head's entropy and ‖∂L/∂scores‖; (e) the failure the scale prevents,
measured on the spot: one wide attention head (d_head = 256) learning to copy the previous token
trains far worse without the scale, while a narrow one (16) trains alike either way; (f) two
training runs of a model of the default's shape, with and without the scale, measured by
``glassbox course sqrt-dk --remeasure`` (at d_head = 32 they end alike)."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, Transformer, check_prompt, run_trace, variant
from glassbox.model.engine.files import write_text
from glassbox.model.io.assets import asset
from glassbox.model.training.schedules import learning_rate_at

PROMPT = "the cat sat on the mat"
D_KS = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
COURSE_SCORES = [8.0, 0.1, -0.3]  # the course's raw scores at d_k = 64
COURSE_SOFTMAX = {"raw": [0.9997, 0.0002, 0.0001], "scaled": [0.58, 0.21, 0.21]}  # as the course prints them
TRAINING_FILE = asset("course") / "sqrt-dk-training.json"
WIDE_FILE = asset("course") / "sqrt-dk-wide-head.json"  # the wide-head runs the page opens with
VARIANCES_FILE = asset("course") / "sqrt-dk-variances.json"  # sampled_variances(), as the page shows them
TRAINING = {"steps": 300, "batch": 16, "peak_lr": 3e-3, "warmup": 30, "stories": 2000, "seed": 0}
# the wide-head comparison, trained on the page: about a second or two per d_head on 2 CPU cores
WIDE = {"steps": 150, "batch": 16, "length": 16, "vocab": 32, "lr": 5e-3, "seed": 0}
WIDE_D_HEADS = (16, 64, 256)
TAIL = 20  # the comparison's figure: the mean loss of the last TAIL steps


def sampled_variances(d_ks: list[int] = D_KS, pairs: int = 20_000, seed: int = 0) -> list[dict]:
    """For each d_k, ``pairs`` q, k ~ N(0, 1)^d_k: the variance of q·k and of q·k/√d_k."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for d in d_ks:
        q = torch.randn(pairs, d, generator=generator, dtype=torch.float64)
        k = torch.randn(pairs, d, generator=generator, dtype=torch.float64)
        dots = (q * k).sum(dim=1)
        rows.append({"d_k": d, "variance": float(dots.var()), "scaled_variance": float((dots / math.sqrt(d)).var())})
    return rows


def softmax(scores: list[float]) -> list[float]:
    return torch.softmax(torch.tensor(scores, dtype=torch.float64), dim=0).tolist()


def jacobian_norm(scores: list[float], scale: float) -> float:
    """The Frobenius norm of ∂softmax(scale·s)/∂(scale·s) = diag(p) − p·pᵀ: how much the weights can
    still move when the scores do. It falls to 0 as the softmax saturates."""
    p = torch.softmax(scale * torch.tensor(scores, dtype=torch.float64), dim=0)
    return float((torch.diag(p) - torch.outer(p, p)).norm())


def head_table(model, tokens: list[int]) -> list[dict]:
    """Per block and head, with the model's scale and without it (variant(attn_scale=1.0)): the
    pattern's entropy (nats, mean over query positions) and ‖∂L/∂scores‖ for the mean next-token loss."""
    check_prompt(model.cfg, tokens)
    if len(tokens) < 2:
        raise GlassboxError("A one-token prompt has no next token to predict: give at least two tokens.")
    names = ["blocks.*.attn.hook_pattern", "blocks.*.attn.hook_scores"]
    traces = {
        "scaled": run_trace(model, tokens, names=names, backward=True),
        "unscaled": run_trace(variant(model, attn_scale=1.0), tokens, names=names, backward=True),
    }
    rows = []
    for b in range(model.cfg.n_layers):
        for h in range(model.cfg.n_heads):
            row = {"block": b, "head": h}
            for kind, trace in traces.items():
                pattern = trace[f"blocks.{b}.attn.hook_pattern"][h].double()
                entropy = -(pattern * pattern.clamp_min(1e-300).log()).sum(-1).mean()
                row[f"entropy_{kind}"] = float(entropy)
                row[f"grad_norm_{kind}"] = float(trace[f"{GRAD}blocks.{b}.attn.hook_scores"][h].double().norm())
            rows.append(row)
    return rows


def training_curves(steps: int, batch: int, peak_lr: float, warmup: int, stories: int, seed: int) -> dict:
    """The default model's shape trained from the same start on the same batches, once with the
    1/√d_head scale and once without (the engine's attn_scale = 1): each step's batch loss."""
    from glassbox.model.data.stories import corpus
    from glassbox.model.io.checkpoint import load

    default = load("default")  # its shape and tokenizer; its stories, as it was trained on them
    end = default.tokenizer.token_id("<|endoftext|>")
    data = torch.tensor([i for story in corpus(stories, seed) for i in default.tokenizer.encode(story) + [end]])
    cfg = default.cfg
    curves = {}
    for kind, scale in (("scaled", None), ("unscaled", 1.0)):
        torch.manual_seed(seed)
        model = Transformer(dataclasses.replace(cfg, attn_scale=scale)).init_weights(seed).train()
        opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
        generator, losses = torch.Generator().manual_seed(seed), []
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = learning_rate_at("warmup + cosine", step, steps, peak_lr, warmup, 0.1)
            starts = torch.randint(len(data) - cfg.n_ctx - 1, (batch,), generator=generator)
            window = torch.stack([data[s : s + cfg.n_ctx + 1] for s in starts])
            loss = model(window[:, :-1], window[:, 1:]).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves[kind] = losses
    return curves


def previous_token_model(d_head: int, scale: float | None, vocab: int, length: int, seed: int) -> Transformer:
    """One block, one attention head of width ``d_head`` (d_model = d_head), no MLP, learned
    positions: the engine's own model, its score scale ``scale`` (None: 1/√d_head)."""
    cfg = ModelConfig(
        vocab_size=vocab,
        n_ctx=length,
        d_model=d_head,
        n_layers=1,
        n_heads=1,
        d_ff=1,
        attn_only=True,
        positional="table",
        tie_embeddings=False,
        attn_scale=scale,
    )
    torch.manual_seed(seed)
    return Transformer(cfg).init_weights(seed).train()


def previous_token_curve(
    d_head: int, scale: float | None, steps: int, batch: int, length: int, vocab: int, lr: float, seed: int
) -> list[float]:
    """Each step's loss of ``previous_token_model`` learning to output the token before each position
    (random tokens, positions 1 … length − 1: a task only attention can do, by looking one back),
    AdamW at a constant ``lr``. The same start and batches for any ``scale``."""
    model = previous_token_model(d_head, scale, vocab, length, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    generator, losses = torch.Generator().manual_seed(seed), []
    for _ in range(steps):
        tokens = torch.randint(vocab, (batch, length), generator=generator)
        logits = model(tokens).logits[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, :-1].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def wide_head(d_head: int, settings: dict | None = None) -> dict:
    """``previous_token_curve`` with the 1/√d_head scale and without it (the engine's attn_scale = 1),
    and the mean of each curve's last TAIL steps. The same for a seed and a number of torch threads
    (a sum's rounding depends on its threads; the thread count is the process's, never changed here:
    it is shared by every session of a server), recorded beside the curves."""
    settings = settings or WIDE
    started = time.time()
    with torch.inference_mode(False), torch.enable_grad():
        curves = {kind: previous_token_curve(d_head, scale, **settings) for kind, scale in (("scaled", None), ("unscaled", 1.0))}
    return {
        "d_head": d_head,
        "settings": settings,
        **curves,
        "threads": torch.get_num_threads(),
        "tail_scaled": float(np.mean(curves["scaled"][-TAIL:])),
        "tail_unscaled": float(np.mean(curves["unscaled"][-TAIL:])),
        "seconds": round(time.time() - started, 2),
    }


def remeasure_wide_heads() -> str:
    """The wide-head comparison at every d_head of WIDE_D_HEADS, as the page trains it, shipped so that
    the page opens on it without training (its button trains one again on the spot). On one thread
    (this command's process, not a server's): the same curves on any machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {str(d): wide_head(d) for d in WIDE_D_HEADS}
    finally:
        torch.set_num_threads(threads)
    record = {"runs": runs, "torch": torch.__version__, "command": "glassbox course sqrt-dk --remeasure"}
    write_text(WIDE_FILE, json.dumps(record) + "\n")
    return f"wrote {WIDE_FILE}"


def remeasure_variances() -> str:
    """sampled_variances() (seed 0), shipped: 41 million samples take the page's first open 1–2 s."""
    record = {"rows": sampled_variances(), "command": "glassbox course sqrt-dk --remeasure"}
    write_text(VARIANCES_FILE, json.dumps(record) + "\n")
    return f"wrote {VARIANCES_FILE}"


def shipped_variances() -> dict:
    return json.loads(VARIANCES_FILE.read_text())


def shipped_wide_head(d_head: int) -> dict:
    """The shipped wide-head run at ``d_head`` (``wide_head``'s record), with the command and torch that made it."""
    record = json.loads(WIDE_FILE.read_text())
    return {**record["runs"][str(d_head)], "command": record["command"], "torch": record["torch"]}


def remeasure() -> str:
    wide = f"{remeasure_variances()}; {remeasure_wide_heads()}"
    started = time.time()
    curves = training_curves(**TRAINING)
    record = {
        "settings": TRAINING,
        "scaled": curves["scaled"],
        "unscaled": curves["unscaled"],
        "seconds": round(time.time() - started, 1),
        "torch": torch.__version__,
        "command": "glassbox course sqrt-dk --remeasure",
    }
    TRAINING_FILE.parent.mkdir(parents=True, exist_ok=True)
    write_text(TRAINING_FILE, json.dumps(record) + "\n")
    return f"{wide}; wrote {TRAINING_FILE} ({record['seconds']} s)"


def shipped_curves() -> dict:
    return json.loads(TRAINING_FILE.read_text())


def figures(loaded) -> dict:
    curves = shipped_curves()
    scales = [0.25, 1.0, 4.0, 8.0, 16.0]
    return {
        "sampled_variances": sampled_variances(),
        "softmax_raw": softmax(COURSE_SCORES),
        "softmax_scaled": softmax([s / 8 for s in COURSE_SCORES]),
        "course_prints": COURSE_SOFTMAX,
        "jacobian_norm": {str(c): jacobian_norm([s / 8 for s in COURSE_SCORES], c) for c in scales},
        "heads": head_table(loaded.model, loaded.encode(PROMPT)),
        "wide_head": {
            str(d): {k: v for k, v in wide_head(d).items() if k not in ("scaled", "unscaled")}
            for d in (WIDE_D_HEADS[0], WIDE_D_HEADS[-1])
        },
        "training": {
            "settings": curves["settings"],
            "final_scaled": curves["scaled"][-1],
            "final_unscaled": curves["unscaled"][-1],
            "mean_last_50_scaled": float(np.mean(curves["scaled"][-50:])),
            "mean_last_50_unscaled": float(np.mean(curves["unscaled"][-50:])),
        },
    }


# --- exercises ------------------------------------------------------------------------------


def listed_scores(scores: list[float]) -> str:
    return ", ".join(f"{s:g}" for s in scores)


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """The variance of q·k, one scaled score, and the largest softmax weight of three scores without
    the scale and with it (loaded is not used)."""
    rng = draw("sqrt-dk", seed)

    d_k = int(rng.choice([16, 32, 64, 128, 256]))
    var_q, var_k = (float(rng.choice([0.5, 1.0, 2.0, 4.0])) for _ in range(2))
    variance = d_k * var_q * var_k
    variance_ex = Exercise(
        "variance",
        f"q and k have d_k = {d_k} entries each, all independent with mean 0; q's entries have variance "
        f"{var_q:g} and k's variance {var_k:g}. What is the variance of the score q·k (before any scale)?",
        variance,
        hint="Each product q_i·k_i of independent mean-0 numbers has variance Var(q_i)·Var(k_i); the "
        "variances of independent terms add.",
        solution=f"Each q_i·k_i has variance {var_q:g} × {var_k:g} = {var_q * var_k:g}; {d_k} of them add up to "
        f"{d_k} × {var_q * var_k:g} = {variance:g}. Divided by √{d_k}, the variance is {variance / d_k:g}.",
        data={"d_k": d_k, "var_q": var_q, "var_k": var_k},
    )

    d_k = int(rng.choice([16, 64, 144, 256, 576]))
    raw = round(float(rng.uniform(-30.0, 30.0)), 1) + 0.0  # + 0.0: never −0
    scaled = raw / math.sqrt(d_k)
    scaled_ex = Exercise(
        "scaled_score",
        f"At d_k = {d_k}, q·k = {raw:g}. What score does the softmax receive after the scale 1/√d_k? Answer to 3 decimals.",
        scaled,
        tolerance=1e-3,
        hint="Divide by the square root of d_k.",
        solution=f"√{d_k} = {math.sqrt(d_k):g}; {raw:g} / {math.sqrt(d_k):g} = {scaled:.4f}.",
        data={"d_k": d_k, "score": raw},
    )

    d_k = int(rng.choice([16, 64, 256]))
    scores = [round(float(x), 1) + 0.0 for x in [rng.uniform(5.0, 12.0), *rng.uniform(-2.0, 3.0, 2)]]
    scores = [scores[i] for i in rng.permutation(3)]
    root = math.sqrt(d_k)
    raw_weights, scaled_weights = softmax(scores), softmax([s / root for s in scores])
    asked = f"The raw scores q·k of one query with three keys are {listed_scores(scores)}, at d_k = {d_k}."
    unscaled_ex = Exercise(
        "largest_unscaled",
        f"{asked} What is the largest softmax weight without the scale (the softmax of the raw scores)? Answer to 3 decimals.",
        max(raw_weights),
        tolerance=1e-3,
        hint="The largest weight belongs to the largest score: e^(largest) / Σ e^(score).",
        solution=f"softmax({listed_scores(scores)}) = {', '.join(f'{w:.4f}' for w in raw_weights)}: the largest "
        f"score takes {max(raw_weights):.3f} of the weight.",
        data={"d_k": d_k, "scores": scores},
    )
    scaled_scores = ", ".join(f"{s / root:.4g}" for s in scores)
    largest_scaled_ex = Exercise(
        "largest_scaled",
        f"{asked} What is the largest softmax weight with the scale (the softmax of q·k/√{d_k})? Answer to 3 decimals.",
        max(scaled_weights),
        tolerance=1e-3,
        hint=f"Divide every score by √{d_k} = {root:g} first, then take the softmax.",
        solution=f"÷ {root:g}: {scaled_scores}; their softmax {', '.join(f'{w:.4f}' for w in scaled_weights)}: "
        f"the largest weight is {max(scaled_weights):.3f} (without the scale {max(raw_weights):.3f}).",
        data={"d_k": d_k, "scores": scores},
    )
    return [variance_ex, scaled_ex, unscaled_ex, largest_scaled_ex]
