"""The lab's grokking: a one-layer transformer learns (a + b) mod 113 from 30% of the pairs; it
memorises them first, forms a Fourier circuit, then cleans up the memorisation, and only then
does the test loss fall (Nanda et al. 2023, "Progress measures for grokking via mechanistic
interpretability", ICLR; arXiv 2301.05217).

The setup is the paper's (its Section 3 and Appendix A): inputs "a b =" (vocabulary: the numbers
0..112 and "="), one block of d_model 128, 4 heads of 32, a ReLU MLP of 512 with biases, no
LayerNorm (the engine's norm "none"), learned positions, untied embedding and unembedding, no
attention biases. The loss is the cross-entropy of the logits at "=" over the 113 numbers (the
paper's d_vocab_out = p: the "=" column of W_U is outside the loss). 30% of the 113² pairs train
(a seeded split), full batch, AdamW lr 1e-3, weight decay 1, betas (0.9, 0.98), a linear warmup
over 10 steps. Initialisation as the paper's code: N(0, 1/d_model) for every matrix but W_U's N(0, 1/(P + 1)).

Training runs ``fast_logits``, a functional forward on the engine model's own parameters that
computes only what the loss reads (the last position's query, attention and MLP): the model
saved at a checkpoint is the engine's Transformer. Every MEASURE_EVERY steps the weights are kept
(in memory, float32), and measured after training, on all 113² pairs:
- train and test loss and accuracy;
- the embedding's Fourier spectrum: W_E's 113 number rows in the Fourier basis of Z_113, the norm
  per frequency k = 1..56 (its cos and sin components together);
- the key frequencies (``key_frequencies``): the fewest frequencies, largest first, that hold
  KEY_SHARE of the spectrum's squared norm; those of the final model are the run's key frequencies;
- restricted loss (the paper's Section 5.1, as its code computes it): the test loss of logits made
  from the MLP neurons' activations kept only along cos(w_k(a+b)) and sin(w_k(a+b)) for the key
  frequencies (and their mean), through W_out and W_U, shifted so their mean over the pairs is the
  model's; excluded loss: the train loss with exactly those components taken out of the neurons'
  activations (the rest of the stream kept);
- the total sum of squared weights.
Phases (``phases``): memorisation ends when train accuracy first reaches MEMORISED; cleanup starts
when the test loss, past its peak after memorisation, falls below half of it; cleanup ends when the
embedding holds only the final key frequencies (and test accuracy is at least GROKKED).
Checkpoints (Glassbox model folders) at step 0, those boundaries, mid circuit formation, and the
final step.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from glassbox.model.lab.runs import save_checkpoint, write_run

NAME = "grokking"
P = 113
FRACTION = 0.3  # of the P² pairs that train (the paper's)
D_MODEL, N_HEADS, D_FF = 128, 4, 512
LR, WEIGHT_DECAY, BETAS, WARMUP = 1e-3, 1.0, (0.9, 0.98), 10
STEPS = 15_000  # past the paper's end of cleanup (13.3k): 40k steps take too long here (docs/lab-grokking.md)
# The live run (the page's Train): 40% of the pairs and a learning rate of 3e-3 grok in 500 steps
# (tried here: test accuracy 99.5% at step 450); 30% at 1e-3 takes over 10,000.
LIVE_STEPS, LIVE_FRACTION, LIVE_LR = 500, 0.4, 3e-3
LIVE_STEP_COST = LIVE_FRACTION / FRACTION  # a step's cost grows with the pairs it trains on
MEASURE_EVERY, LIVE_MEASURE_EVERY = 100, 25
KEY_SHARE = 0.8  # the key frequencies hold this share of the embedding spectrum's squared norm
MEMORISED, GROKKED = 0.99, 0.99  # train accuracy that ends memorisation; test accuracy that ends cleanup
DIGITS = 6
SPLIT_SEED = 1_000_003  # the split's seed is this + the run's seed

# The paper's published numbers (Nanda et al. 2023)
PAPER = {
    "key_frequencies": [14, 35, 41, 42, 52],  # Section 4.1 and Figure 3: the mainline model's key frequencies
    "memorisation_end": 1_400,  # Section 5.2 and Figure 7: memorisation, epochs 0-1.4k
    "cleanup_start": 9_400,  # circuit formation 1.4k-9.4k
    "cleanup_end": 13_300,  # cleanup 9.4k-13.3k
    "steps": 40_000,  # Appendix A: 40k epochs of full-batch training
}


def live_step_cost(settings: dict) -> float:
    """A live step's cost against a shipped one, for the page's estimate: its share of the pairs."""
    return float(settings.get("fraction") or LIVE_FRACTION) / FRACTION


def config():
    from glassbox.model.engine import ModelConfig

    return ModelConfig(
        vocab_size=P + 1,
        n_ctx=3,
        d_model=D_MODEL,
        n_layers=1,
        n_heads=N_HEADS,
        d_ff=D_FF,
        norm="none",
        final_norm=False,
        activation="relu",
        attn_bias=False,
        mlp_bias=True,
        tie_embeddings=False,
    )


def tokenizer():
    from glassbox.model.io.tokenizer import Tokenizer

    return Tokenizer.from_words([str(i) for i in range(P)] + ["="])


def new_model(seed: int):
    """The engine's Transformer, initialised as the paper's code does: every matrix N(0, 1/d_model)
    but W_U, N(0, 1/vocabulary); biases 0."""
    from glassbox.model.engine import Transformer

    model = Transformer(config())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.split(".")[-1].startswith("b"):
                param.zero_()
                continue
            fan_in = P + 1 if name == "unembed.W_U" else D_MODEL
            param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
    return model


def pairs() -> tuple[torch.Tensor, torch.Tensor]:
    """Every (a, b) as a prompt "a b =" (ids, P² × 3) and its answer (a + b) mod P."""
    a, b = torch.arange(P).repeat_interleave(P), torch.arange(P).repeat(P)
    return torch.stack([a, b, torch.full_like(a, P)], dim=1), (a + b) % P


def split(seed: int, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The indices (into ``pairs``) of the training pairs and of the test pairs: a seeded shuffle."""
    order = torch.randperm(P * P, generator=torch.Generator().manual_seed(SPLIT_SEED + seed))
    cut = int(P * P * fraction)
    return order[:cut].sort().values, order[cut:].sort().values


def fast_logits(params: dict[str, torch.Tensor], tokens: torch.Tensor, inside: bool = False):
    """The logits at the last position ("="), batch × (P + 1), from the engine's parameters: the
    same sums as the engine's forward, computed only where the loss reads them. A position's
    stream before the block is W_E[token] + W_pos[position], one of (P + 1) × 3 rows, so the
    queries, keys and values are computed once per row and looked up per pair. With ``inside``,
    also the MLP's activations there (batch × d_ff) and the stream before the MLP (batch × d_model)."""
    N, T = tokens.shape
    rows = params["embed.W_E"][None] + params["pos_embed.W_pos"][:T, None]  # position, token, d_model
    W_Q, W_K, W_V, W_O = (params[f"blocks.0.attn.W_{m}"] for m in "QKVO")  # head, d_model, d_head (W_O: head, d_head, d_model)
    H, e = W_Q.shape[0], W_Q.shape[-1]
    at = torch.arange(T)
    q = torch.einsum("vd,hde->vhe", rows[-1], W_Q)[tokens[:, -1]]  # pair, head, d_head: the last position's query
    k = torch.einsum("tvd,hde->tvhe", rows, W_K)[at, tokens]  # pair, position, head, d_head
    v = torch.einsum("tvd,hde->tvhe", rows, W_V)[at, tokens]
    pattern = ((q[:, None] * k).sum(-1) / math.sqrt(e)).softmax(1)  # pair, position, head: "=" sees every position
    z = (pattern[..., None] * v).sum(1)  # pair, head, d_head
    mid = rows[-1][tokens[:, -1]] + z.reshape(N, H * e) @ W_O.reshape(H * e, -1)
    post = F.relu(mid @ params["blocks.0.mlp.W_in"] + params["blocks.0.mlp.b_in"])
    logits = (mid + post @ params["blocks.0.mlp.W_out"] + params["blocks.0.mlp.b_out"]) @ params["unembed.W_U"]
    return (logits, post, mid) if inside else logits


def loss_of(logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the P numbers (the "=" logit is no answer), in float64 as the paper's."""
    return F.cross_entropy(logits[:, :P].double(), answers)


def fit(model, tokens, answers, steps: int, keep_every: int, on_step=None, lr: float = LR) -> list[tuple[int, torch.Tensor]]:
    """Full-batch AdamW on (tokens, answers) for ``steps`` steps; returns (step, weights) every
    ``keep_every`` steps and at the last, the weights flattened (float32, in parameters' order)."""
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY, betas=BETAS)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: min((s + 1) / WARMUP, 1.0))
    kept = [(0, flat(params, names))]
    for step in range(1, steps + 1):
        loss = loss_of(fast_logits(params, tokens), answers)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % keep_every == 0 or step == steps:
            kept.append((step, flat(params, names)))
        if on_step is not None:
            on_step(step, steps)
    return kept


def flat(params: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([params[n].detach().reshape(-1) for n in names]).clone()


def unflat(model, weights: torch.Tensor) -> dict[str, torch.Tensor]:
    out, at = {}, 0
    for name, param in model.named_parameters():
        out[name] = weights[at : at + param.numel()].view(param.shape)
        at += param.numel()
    return out


def fourier_basis() -> torch.Tensor:
    """The Fourier basis of Z_P as rows (P × P, float64, orthonormal): the constant, then cos(w_k x)
    and sin(w_k x) for k = 1..(P-1)/2, w_k = 2πk/P."""
    x = torch.arange(P, dtype=torch.float64)
    rows = [torch.ones(P, dtype=torch.float64)]
    for k in range(1, P // 2 + 1):
        rows += [torch.cos(2 * math.pi * k * x / P), torch.sin(2 * math.pi * k * x / P)]
    basis = torch.stack(rows)
    return basis / basis.norm(dim=1, keepdim=True)


def spectrum(W_E: torch.Tensor) -> torch.Tensor:
    """The norm of W_E's number rows along each frequency k = 1..(P-1)/2: sqrt(|cos_k·W_E|² + |sin_k·W_E|²)."""
    coefficients = fourier_basis() @ W_E[:P].double()  # P × d_model
    return coefficients[1:].pow(2).sum(-1).view(-1, 2).sum(-1).sqrt()


def key_frequencies(norms: torch.Tensor, share: float = KEY_SHARE) -> list[int]:
    """The fewest frequencies, largest first, whose squared norms hold ``share`` of the total (ascending)."""
    squared = norms.pow(2)
    order = squared.argsort(descending=True)
    count = int((squared[order].cumsum(0) < share * squared.sum()).sum()) + 1
    return sorted(int(k) + 1 for k in order[:count])


def sum_directions(keys: list[int]) -> torch.Tensor:
    """cos(w_k(a+b)) and sin(w_k(a+b)) for each key frequency, as unit vectors over the P² pairs
    (in ``pairs``' order): 2·len(keys) × P²."""
    total = (torch.arange(P).repeat_interleave(P) + torch.arange(P).repeat(P)).double()
    rows = [f(2 * math.pi * k * total / P) for k in keys for f in (torch.cos, torch.sin)]
    directions = torch.stack(rows) if rows else torch.zeros(0, P * P, dtype=torch.float64)
    return directions / directions.norm(dim=1, keepdim=True).clamp(min=1e-300)


def restricted_and_excluded(params, tokens, answers, train, test, keys) -> tuple[float, float]:
    """The paper's restricted loss (test pairs) and excluded loss (train pairs) for key frequencies
    ``keys``, on all P² pairs ``tokens`` (see the module's docstring)."""
    logits, post, mid = fast_logits(params, tokens, inside=True)
    post, directions = post.double(), sum_directions(keys)
    along = directions.T @ (directions @ post)  # the activations' components along the key directions
    W_logit = params["blocks.0.mlp.W_out"].double() @ params["unembed.W_U"].double()
    restricted = (post.mean(0) + along) @ W_logit
    restricted = restricted + logits.double().mean(0) - restricted.mean(0)
    excluded = (mid.double() + (post - along) @ params["blocks.0.mlp.W_out"].double() + params["blocks.0.mlp.b_out"].double()) @ (
        params["unembed.W_U"].double()
    )
    return float(loss_of(restricted[test], answers[test])), float(loss_of(excluded[train], answers[train]))


def measure(model, kept, tokens, answers, train, test, keys) -> dict:
    """Every curve at the kept steps (see the module's docstring)."""
    curves: dict[str, list] = {
        k: [] for k in ("steps", "train_loss", "test_loss", "train_accuracy", "test_accuracy", "restricted_loss", "excluded_loss")
    }
    curves |= {"weight_norm": [], "spectrum": [], "key_frequencies": []}
    with torch.no_grad():
        for step, weights in kept:
            params = unflat(model, weights)
            logits = fast_logits(params, tokens)
            right = logits[:, :P].argmax(-1) == answers
            norms = spectrum(params["embed.W_E"])
            restricted, excluded = restricted_and_excluded(params, tokens, answers, train, test, keys)
            curves["steps"].append(step)
            curves["train_loss"].append(float(loss_of(logits[train], answers[train])))
            curves["test_loss"].append(float(loss_of(logits[test], answers[test])))
            curves["train_accuracy"].append(float(right[train].float().mean()))
            curves["test_accuracy"].append(float(right[test].float().mean()))
            curves["restricted_loss"].append(restricted)
            curves["excluded_loss"].append(excluded)
            curves["weight_norm"].append(float(weights.double().pow(2).sum()))
            curves["spectrum"].append([round(float(n), 4) for n in norms])
            curves["key_frequencies"].append(key_frequencies(norms))
    for name, values in curves.items():
        if name not in ("steps", "spectrum", "key_frequencies"):
            curves[name] = [float(f"{v:.{DIGITS}g}") for v in values]
    return curves


def first(steps: list[int], flags: list[bool], after: int = -1) -> int | None:
    """The first step after ``after`` where the flag holds."""
    return next((s for s, f in zip(steps, flags) if f and s > after), None)


def phases(curves: dict) -> dict:
    """Our phase boundaries, each by a stated rule (None where the run never got there):
    - memorisation ends: train accuracy first ≥ MEMORISED;
    - cleanup starts (circuit formation ends): the test loss, after its peak past memorisation,
      first falls below half of it (the paper: test loss falls sharply in cleanup);
    - cleanup ends: the embedding holds only the final key frequencies: from this step on, the
      frequencies holding KEY_SHARE of its spectrum are the last step's (and the test accuracy is
      at least GROKKED); a step before the last, else the run is still cleaning up (None)."""
    steps = curves["steps"]
    memorised = first(steps, [a >= MEMORISED for a in curves["train_accuracy"]])
    cleanup_start = cleanup_end = None
    if memorised is not None:
        after = [(s, loss) for s, loss in zip(steps, curves["test_loss"]) if s >= memorised]
        peak_at, peak = max(after, key=lambda sl: sl[1])
        cleanup_start = first(steps, [loss < peak / 2 for loss in curves["test_loss"]], peak_at)
    if cleanup_start is not None:
        final = curves["key_frequencies"][-1]
        settled = [all(k == final for k in curves["key_frequencies"][i:]) for i in range(len(steps))]
        grokked = [a >= GROKKED for a in curves["test_accuracy"]]
        # before the last step: there every run is "settled", one still cleaning up too
        cleanup_end = first(steps[:-1], [s and g for s, g in zip(settled, grokked)], cleanup_start)
    return {"memorisation_end": memorised, "cleanup_start": cleanup_start, "cleanup_end": cleanup_end}


def checkpoint_steps(curves: dict, bounds: dict) -> list[int]:
    """Step 0, the phase boundaries, mid circuit formation, the final step: the saved steps nearest them."""
    steps = curves["steps"]
    wanted = [0, steps[-1], *(s for s in bounds.values() if s is not None)]
    if bounds["memorisation_end"] is not None and bounds["cleanup_start"] is not None:
        wanted.append((bounds["memorisation_end"] + bounds["cleanup_start"]) // 2)
    return sorted({min(steps, key=lambda s: abs(s - w)) for w in wanted})


def train(
    out: Path,
    steps: int | None = None,
    seed: int = 0,
    live: bool = False,
    on_step=None,
    fraction: float | None = None,
    lr: float | None = None,
) -> dict:
    """Train, measure, save the checkpoints and run.json in ``out``; returns the figures. ``fraction``
    of the pairs train (default: the paper's 30%, the live run's 40%), at learning rate ``lr``."""
    steps = int(steps or (LIVE_STEPS if live else STEPS))
    fraction = float(fraction or (LIVE_FRACTION if live else FRACTION))
    lr = float(lr or (LIVE_LR if live else LR))
    every = LIVE_MEASURE_EVERY if live else MEASURE_EVERY
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    if not live:  # its matrices are small: a second thread cost more than it gained (measured here); the
        torch.set_num_threads(1)  # app's live run leaves the server's setting alone (it is the process's)
    try:
        torch.manual_seed(seed)
        model = new_model(seed)
        tokens, answers = pairs()
        train_ids, test_ids = split(seed, fraction)
        started = time.perf_counter()
        used_threads = torch.get_num_threads()
        kept = fit(model, tokens[train_ids], answers[train_ids], steps, every, on_step, lr)
        seconds = time.perf_counter() - started
        final = unflat(model, kept[-1][1])
        keys = key_frequencies(spectrum(final["embed.W_E"]))
        curves = measure(model, kept, tokens, answers, train_ids, test_ids, keys)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
    bounds = phases(curves)
    saved = checkpoint_steps(curves, bounds)
    about = {"source": f"the lab's grokking run (seed {seed})", "task": f"(a + b) mod {P}: prompt 'a b ='"}
    with torch.no_grad():
        for step in saved:
            weights = dict(kept)[step]
            for name, param in model.named_parameters():
                param.copy_(unflat(model, weights)[name])
            save_checkpoint(out, step, model, tokenizer(), about)
    figures = {
        "experiment": NAME,
        "steps": steps,
        "seed": seed,
        "live": live,
        "fraction": fraction,
        "lr": lr,
        "train_pairs": len(train_ids),
        "test_pairs": len(test_ids),
        "seconds": round(seconds, 2),
        "threads": used_threads,
        "checkpoints": saved,
        "measure_every": every,
        "curves": curves,
        "key_frequencies": keys,
        "key_share": KEY_SHARE,
        "final_spectrum": curves["spectrum"][-1],
        "phases": bounds,
        "paper": PAPER,
        "final": {k: curves[k][-1] for k in ("train_loss", "test_loss", "train_accuracy", "test_accuracy", "weight_norm")},
    }
    figures["comparison"] = compare(figures)
    write_run(out, figures)
    return figures


def _step(value) -> str:
    return "not reached" if value is None else f"{value:,}"


def compare(figures: dict) -> list[dict]:
    bounds, final = figures["phases"], figures["final"]
    shared = len(set(figures["key_frequencies"]) & set(PAPER["key_frequencies"]))
    rows = [
        {
            "what": "key frequencies (final embedding)",
            "paper": ", ".join(map(str, PAPER["key_frequencies"])),
            "ours": ", ".join(map(str, figures["key_frequencies"])),
            "note": f"{shared} in common: which frequencies a run picks depends on its seed (the paper: Section 4.1); "
            "how many is the comparable figure",
        },
        {
            "what": "memorisation ends (step)",
            "paper": f"{PAPER['memorisation_end']:,}",
            "ours": _step(bounds["memorisation_end"]),
            "note": f"ours: train accuracy first ≥ {MEMORISED:.0%}; the paper reads it off its curves",
        },
        {
            "what": "circuit formation ends, cleanup starts (step)",
            "paper": f"{PAPER['cleanup_start']:,}",
            "ours": _step(bounds["cleanup_start"]),
            "note": "ours: the test loss falls below half its peak",
        },
        {
            "what": "cleanup ends (step)",
            "paper": f"{PAPER['cleanup_end']:,}",
            "ours": _step(bounds["cleanup_end"]),
            "note": "ours: from here on the embedding holds only the final key frequencies",
        },
        {
            "what": "final test accuracy",
            "paper": "100%",
            "ours": f"{final['test_accuracy']:.2%}",
            "note": "the paper's model generalises fully after cleanup (Figure 1)",
        },
    ]
    if figures["fraction"] != FRACTION or figures["lr"] != LR:
        for row in rows[1:4]:
            row["note"] += (
                f"; this run trains on {figures['fraction']:.0%} of the pairs at lr {figures['lr']:g}, "
                f"not {FRACTION:.0%} at {LR:g}: it groks sooner"
            )
    return rows


def summary(figures: dict) -> list[str]:
    bounds, final = figures["phases"], figures["final"]
    return [
        f"{figures['steps']:,} steps on {figures['train_pairs']:,} of {P * P:,} pairs in {figures['seconds']:.0f} s",
        f"final: train loss {final['train_loss']:.3g}, test loss {final['test_loss']:.3g}, "
        f"test accuracy {final['test_accuracy']:.2%}",
        f"key frequencies: {', '.join(map(str, figures['key_frequencies']))} "
        f"(paper: {', '.join(map(str, PAPER['key_frequencies']))})",
        f"phases: memorisation ends {_step(bounds['memorisation_end'])}, cleanup {_step(bounds['cleanup_start'])}"
        f"–{_step(bounds['cleanup_end'])}",
    ]
