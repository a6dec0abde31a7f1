"""The scaling lesson: (a) models of six sizes, from a micro-model's width up to the default's
shape, trained here on the bundled stories for the same fixed budget (the same steps, batches and
learning-rate schedule) by ``glassbox course scaling --remeasure``, which ships their curves and
their final loss on held-out stories; (b) each size's non-embedding parameters N, counted from
its config and by the model itself; (c) a power law L(N) = (N_c / N)^α fitted to the shipped
losses by least squares in log space (and, as an alternative, L(N) = E + (N_c / N)^α with an
irreducible loss E); (d) Kaplan et al.'s published α_N and N_c beside it."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import ModelConfig, Transformer
from glassbox.model.engine.files import write_text
from glassbox.model.io.assets import asset
from glassbox.model.training.schedules import learning_rate_at

SLUG = "scaling"
# Kaplan et al. 2020, "Scaling Laws for Neural Language Models", eq. 1.1: L(N) = (N_c / N)^α_N,
# N the non-embedding parameters, L in nats per token on WebText2, models trained to convergence.
KAPLAN_ALPHA_N = 0.076
KAPLAN_N_C = 8.8e13
# (d_model, layers, heads): from the micro-models' width (16) to the default model's shape (128, 4 blocks)
SIZES = [(16, 1, 2), (32, 1, 2), (48, 2, 2), (64, 2, 4), (96, 3, 4), (128, 4, 4)]
# The one budget every size gets: the same steps, batches, schedule and data
TRAINING = {
    "steps": 400,
    "batch": 16,
    "context": 64,
    "peak_lr": 3e-3,
    "warmup": 40,
    "stories": 2000,
    "held_out": 200,
    "eval_every": 100,
    "seed": 0,
}
RUNS_FILE = asset("course") / "scaling-runs.json"
EMBEDDING_PARAMETERS = ("embed.W_E", "pos_embed.W_pos")  # Kaplan's N leaves out the token and position tables


def config(d_model: int, layers: int, heads: int, vocab: int, context: int) -> ModelConfig:
    """A GPT-2-shaped model of the default's kind (LayerNorm, GELU, learned positions, tied
    embeddings) at this size, its MLP 4·d_model wide."""
    return ModelConfig(vocab_size=vocab, n_ctx=context, d_model=d_model, n_layers=layers, n_heads=heads, d_ff=4 * d_model)


def non_embedding_by_hand(cfg: ModelConfig) -> int:
    """N counted from the config: per block two LayerNorms (2·2d), attention's Q, K, V and O
    (4d² and 4d biases), the MLP (2·d·d_ff, d_ff + d biases); then the final LayerNorm (2d).
    With d_ff = 4d that is 12d² + 13d per block, Kaplan's 12·layers·d² plus the small terms."""
    d, f = cfg.d_model, cfg.d_ff
    return cfg.n_layers * (4 * d + 4 * d * d + 4 * d + 2 * d * f + f + d) + 2 * d


def non_embedding_parameters(model: Transformer) -> int:
    """N as the model counts it: every parameter but the token and position tables."""
    return sum(p.numel() for name, p in model.named_parameters() if name not in EMBEDDING_PARAMETERS)


def story_tokens(tokenizer, stories: int, held_out: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The bundled stories as one token stream each (every story ended by <|endoftext|>), as the
    default model was trained: the first ``stories`` for training, the next ``held_out`` drawn by
    the same generator for the held-out loss, leaving out any that also occur among the training ones."""
    from glassbox.model.data.stories import corpus

    texts = corpus(stories + held_out, seed)
    train, seen = texts[:stories], set(texts[:stories])
    held = [t for t in texts[stories:] if t not in seen]
    end = tokenizer.token_id("<|endoftext|>")

    def stream(part: list[str]) -> torch.Tensor:
        return torch.tensor([i for story in part for i in tokenizer.encode(story) + [end]])

    return stream(train), stream(held)


def held_out_loss(model: Transformer, data: torch.Tensor, context: int) -> float:
    """The mean next-token loss over the held-out stream cut into windows of ``context`` + 1 tokens
    (every held-out token predicted once; the same windows for every model)."""
    windows = data[: len(data) // (context + 1) * (context + 1)].view(-1, context + 1)
    model.eval()
    with torch.no_grad():
        losses = [model(w[:, :-1], w[:, 1:]).loss.item() * len(w) for w in windows.split(64)]
    model.train()
    return sum(losses) / len(windows)


def train_one(
    size: tuple[int, int, int],
    train: torch.Tensor,
    held: torch.Tensor,
    vocab: int,
    steps: int,
    batch: int,
    context: int,
    peak_lr: float,
    warmup: int,
    eval_every: int,
    seed: int,
    **_,
) -> dict:
    """One size trained for the budget: AdamW, warmup then cosine, the same batches for every size."""
    d_model, layers, heads = size
    cfg = config(d_model, layers, heads, vocab, context)
    torch.manual_seed(seed)
    model = Transformer(cfg).init_weights(seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    generator, losses, evals = torch.Generator().manual_seed(seed), [], []
    started = time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate_at("warmup + cosine", step, steps, peak_lr, warmup, 0.1)
        starts = torch.randint(len(train) - context - 1, (batch,), generator=generator)
        window = torch.stack([train[s : s + context + 1] for s in starts])
        loss = model(window[:, :-1], window[:, 1:]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            evals.append({"step": step + 1, "loss": held_out_loss(model, held, context)})
    return {
        "d_model": d_model,
        "layers": layers,
        "heads": heads,
        "d_ff": cfg.d_ff,
        "non_embedding": non_embedding_parameters(model),
        "all_parameters": sum(p.numel() for p in model.parameters()),
        "train_losses": losses,
        "held_out": evals,
        "final_held_out": evals[-1]["loss"],
        "seconds": round(time.time() - started, 1),
    }


def remeasure() -> str:
    from glassbox.model.io.checkpoint import load

    started = time.time()
    tokenizer = load("default").tokenizer  # the default model's tokenizer, as it reads the stories
    s = TRAINING
    train, held = story_tokens(tokenizer, s["stories"], s["held_out"], s["seed"])
    # one thread: on a shared 2-core machine two threads wait on each other (about 4 times slower
    # under load), and one thread's sums round the same on any machine. A command, never a server's
    # process, runs this; the count is put back afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            runs = [train_one(size, train, held, tokenizer.vocab_size, **s) for size in SIZES]
    finally:
        torch.set_num_threads(threads)
    record = {
        "settings": TRAINING,
        "sizes": [list(x) for x in SIZES],
        "vocab": tokenizer.vocab_size,
        "train_tokens": len(train),
        "held_out_tokens": len(held),
        "runs": runs,
        "seconds": round(time.time() - started, 1),
        "torch": torch.__version__,
        "threads": 1,
        "command": "glassbox course scaling --remeasure",
    }
    RUNS_FILE.parent.mkdir(parents=True, exist_ok=True)
    write_text(RUNS_FILE, json.dumps(record) + "\n")
    return f"wrote {RUNS_FILE} ({record['seconds']} s)"


def shipped_runs() -> dict:
    return json.loads(RUNS_FILE.read_text())


def fit_power_law(n: list[float], loss: list[float]) -> dict:
    """L = (N_c / N)^α as a straight line in log space, log L = α·log N_c − α·log N, fitted by
    least squares (closed form: slope = cov(x, y) / var(x)). R² of the line in log space."""
    x, y = np.log(np.asarray(n, float)), np.log(np.asarray(loss, float))
    if len(x) < 2:
        raise ValueError("a power law needs at least two models")
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    intercept = float(y.mean() - slope * x.mean())
    alpha = -slope
    residual = y - (intercept + slope * x)
    r2 = 1 - float((residual**2).sum() / ((y - y.mean()) ** 2).sum())
    return {"alpha": alpha, "n_c": math.exp(intercept / alpha) if alpha else math.inf, "log_intercept": intercept, "r2": r2}


def power_law(n, alpha: float, n_c: float):
    return (n_c / np.asarray(n, float)) ** alpha


def fit_with_floor(n: list[float], loss: list[float], points: int = 400) -> dict:
    """L = E + (N_c / N)^α: for each irreducible loss E on a grid below the smallest loss, the power
    law fitted to L − E in log space; the E whose curve misses the losses least (squares, in nats)."""
    n, loss = np.asarray(n, float), np.asarray(loss, float)
    best = None
    for e in np.linspace(0, loss.min(), points, endpoint=False):
        fit = fit_power_law(n, loss - e)
        miss = float(((e + power_law(n, fit["alpha"], fit["n_c"]) - loss) ** 2).sum())
        if best is None or miss < best["squared_error"]:
            best = {"floor": float(e), "alpha": fit["alpha"], "n_c": fit["n_c"], "squared_error": miss}
    return best


def figures(loaded=None) -> dict:
    shipped = shipped_runs()
    n = [r["non_embedding"] for r in shipped["runs"]]
    loss = [r["final_held_out"] for r in shipped["runs"]]
    return {
        "settings": shipped["settings"],
        "command": shipped["command"],
        "seconds": shipped["seconds"],
        "torch": shipped["torch"],
        "models": [
            {k: r[k] for k in ("d_model", "layers", "heads", "non_embedding", "all_parameters", "final_held_out")}
            for r in shipped["runs"]
        ],
        "fit": fit_power_law(n, loss),
        "fit_with_floor": fit_with_floor(n, loss),
        "kaplan": {"alpha_n": KAPLAN_ALPHA_N, "n_c": KAPLAN_N_C},
    }


def exercises(seed: int, loaded=None) -> list[Exercise]:
    rng = draw(SLUG, seed)
    alpha = round(float(rng.uniform(0.05, 0.3)), 3)
    n_c = float(f"{10 ** float(rng.uniform(8, 14)):.3g}")  # as the question writes it
    n = float(10 ** int(rng.integers(5, 10)))
    predicted = float(power_law(n, alpha, n_c))
    n1 = float(10 ** int(rng.integers(4, 7)))
    n2 = n1 * int(rng.choice([10, 100, 1000]))
    l1 = round(float(rng.uniform(2.5, 5.0)), 2)
    l2 = round(l1 * float(rng.uniform(0.55, 0.9)), 2)
    fitted = math.log(l1 / l2) / math.log(n2 / n1)
    halving = 2 ** (1 / alpha)
    return [
        Exercise(
            "predict",
            f"A power law L(N) = (N_c / N)^α with α = {alpha} and N_c = {n_c:.3g}. What loss does it "
            f"predict for N = {n:.0e} parameters? Answer in nats to 3 decimals.",
            round(predicted, 6),
            tolerance=1e-3,
            unit="nats",
            hint="Divide N_c by N, then raise to the power α.",
            solution=f"N_c / N = {n_c:.3g} / {n:.0e} = {n_c / n:.4g}; ({n_c / n:.4g})^{alpha} = {predicted:.4f}.",
            data={"alpha": alpha, "n_c": n_c, "n": n},
        ),
        Exercise(
            "alpha",
            f"A model of {n1:.0e} parameters reaches a loss of {l1} nats; one of {n2:.0e} reaches {l2}. "
            "If L = (N_c / N)^α, what is α? Answer to 3 decimals.",
            round(fitted, 6),
            tolerance=1e-3,
            hint="Divide the two laws: L1 / L2 = (N2 / N1)^α, then take logarithms.",
            solution=f"α = ln(L1 / L2) / ln(N2 / N1) = ln({l1} / {l2}) / ln({n2 / n1:.0f}) = "
            f"{math.log(l1 / l2):.4f} / {math.log(n2 / n1):.4f} = {fitted:.4f}.",
            data={"n1": n1, "l1": l1, "n2": n2, "l2": l2},
        ),
        Exercise(
            "halve",
            f"With L = (N_c / N)^α and α = {alpha}, how many times more parameters halve the loss? Answer within 1%.",
            halving,
            tolerance=0.01,
            relative=True,
            unit="times",
            hint="Halving L means (N_c / N')^α = ½ (N_c / N)^α: solve for N' / N.",
            solution=f"(N / N')^α = 1/2, so N' / N = 2^(1/α) = 2^(1/{alpha}) = 2^{1 / alpha:.3f} = "
            f"{halving:.4g}. With Kaplan's α_N = {KAPLAN_ALPHA_N} it would be "
            f"{2 ** (1 / KAPLAN_ALPHA_N):.3g}.",
            data={"alpha": alpha},
        ),
    ]
