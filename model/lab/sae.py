"""The lab's sae: a sparse autoencoder, trained by `glassbox train-sae`'s own loop, on data whose
features are planted on purpose, then the one train-sae made for the default model.

The planted data: N_PLANTED unit directions f_i in R^D (random, seeded), each present in a sample
with probability MEAN_ACTIVE / N_PLANTED (so MEAN_ACTIVE of them on average) at a magnitude drawn
uniformly from [0, 1]: x = Σ a_i f_i, no noise (the toy data of Sharkey et al. 2022, smaller). A grid
of TopK SAEs (dictionary size × k, TopK's k being its sparsity setting where an L1 SAE has a
coefficient) is trained on it with model/tools/train_sae.fit, the loop `glassbox train-sae` runs:
same architecture, loss, optimiser, initialisation and decoder normalisation. For each: L0 (mean
active latents), the fraction of variance explained and the squared error, the latents never active,
and the planted features it recovers: for each planted direction the best cosine with any decoder
row, recovered where it is at least THRESHOLD, and their mean (Sharkey et al.'s mean max cosine
similarity, MMCS); the same at WATCH points during training. Then the shipped default-sae: its size,
L0 and variance explained on the held-out stories train-sae measured it on.
"""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path

import torch

from glassbox.model.lab.runs import write_run
from glassbox.model.tools import train_sae

NAME = "sae"
D, N_PLANTED, MEAN_ACTIVE = 32, 64, 4  # 2× as many features as dimensions, as in Sharkey et al. (512 in 256)
N_TRAIN, N_EVAL = 32_768, 8_192
BATCH, LR = 1024, train_sae.LR
THRESHOLD = 0.9  # a planted feature is recovered when some decoder row has at least this cosine with it
STEPS, LIVE_STEPS = 2000, 1000
GRID = {"d_sae": (32, 64, 128, 256), "k": (1, 2, 4, 8, 16)}
LIVE_GRID = {"d_sae": (32, 64, 128), "k": (1, 4, 16)}
WATCH = 10  # points along training where recovery is measured (and step 0)
# A live step trains fewer, smaller SAEs than a shipped one: the cost of a step grows with d_sae.
LIVE_STEP_COST = sum(LIVE_GRID["d_sae"]) * len(LIVE_GRID["k"]) / (sum(GRID["d_sae"]) * len(GRID["k"]))
DIGITS = 5  # weights in run.json
DATA_SEED = 1_000_003  # the planted data's seed is this + the run's seed; the SAEs' is the run's seed


def planted_directions(generator: torch.Generator) -> torch.Tensor:
    """N_PLANTED random unit directions in R^D (rows)."""
    directions = torch.randn(N_PLANTED, D, generator=generator)
    return directions / directions.norm(dim=-1, keepdim=True)


def planted_data(directions: torch.Tensor, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` samples x = codes @ directions, and their codes: each feature present with probability
    MEAN_ACTIVE / N_PLANTED, at a magnitude uniform in [0, 1]."""
    present = torch.rand(n, len(directions), generator=generator) < MEAN_ACTIVE / len(directions)
    codes = torch.rand(n, len(directions), generator=generator) * present
    return codes @ directions, codes


def datasets(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The run's planted directions, its N_TRAIN training rows, and its N_EVAL held-out rows with
    their codes, all drawn from DATA_SEED + ``seed``: apart from the SAEs' own seed, since an SAE's
    first decoder is drawn as the planted directions are (from the same seed, it would start on them)."""
    generator = torch.Generator().manual_seed(DATA_SEED + seed)
    directions = planted_directions(generator)
    x, _ = planted_data(directions, N_TRAIN, generator)
    x_eval, codes_eval = planted_data(directions, N_EVAL, generator)
    return directions, x, x_eval, codes_eval


def max_cosines(directions: torch.Tensor, W_dec: torch.Tensor) -> torch.Tensor:
    """For each planted direction, its best cosine with any of the decoder's rows."""
    rows = W_dec / W_dec.norm(dim=-1, keepdim=True)
    return (directions @ rows.T).max(dim=-1).values


def measure(sae, directions: torch.Tensor, x: torch.Tensor) -> dict:
    """What an SAE does on rows ``x``: L0, squared error, variance explained, dead latents, and
    the planted features it recovers."""
    with torch.no_grad():
        acts = sae.encode(x)
        error = (x - sae.decode(acts, x)).pow(2).sum(-1)
        cos = max_cosines(directions, sae.W_dec)
    return {
        "l0": round(float((acts > 0).float().sum(-1).mean()), 4),
        "mse": round(float(error.mean()), 6),
        "explained": round(1 - float(error.sum() / (x - x.mean(0)).pow(2).sum()), 5),
        "dead": int(((acts > 0).sum(0) == 0).sum()),
        "recovered": int((cos >= THRESHOLD).sum()),
        "mmcs": round(float(cos.mean()), 5),
        "max_cos": [round(float(c), 5) for c in cos],
    }


def watch_steps(steps: int) -> list[int]:
    """Step 0 and WATCH steps spaced evenly on a log scale up to ``steps``, from 10 (fewer for a
    short run): recovery forms early, so the early steps are where to look closely."""
    first = min(10, max(1, steps // 100))
    return sorted({0, *(round(first * (steps / first) ** (i / (WATCH - 1))) for i in range(WATCH))})


def matrix(t: torch.Tensor) -> list:
    return (
        [[round(float(v), DIGITS) for v in row] for row in t.tolist()] if t.dim() == 2 else [round(float(v), DIGITS) for v in t]
    )


def right_k(ks) -> int:
    """The k nearest the planted data's own mean number of active features."""
    return min(ks, key=lambda k: (abs(k - MEAN_ACTIVE), k))


@cache  # the same for every run: computed once per process
def _default_sae() -> dict:
    """The shipped default-sae (assets/default-sae, `glassbox train-sae`): its size, and its L0,
    variance explained and never-active features on the held-out stories train-sae kept aside
    (its own training.json's figures beside them), and a prompt from those stories."""
    from glassbox.model.data.stories import corpus
    from glassbox.model.io.assets import asset
    from glassbox.model.io.checkpoint import load
    from glassbox.model.io.guard import SIDE_FILE_BYTES, read_json
    from glassbox.model.io.sae import load_sae

    loaded = load("default", dtype="float32", device="cpu")
    sae = load_sae("default-sae")
    held_out = corpus(train_sae.N_STORIES + train_sae.N_STORIES // 6)[train_sae.N_STORIES :]
    with torch.no_grad():
        x = train_sae.activations(loaded, held_out)
        acts = sae.encode(x)
        explained = 1 - float((x - sae.decode(acts, x)).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    trained = read_json(asset("default-sae") / "training.json", SIDE_FILE_BYTES)
    sentences = held_out[0].split(". ")
    return {
        "source": "default-sae",
        "hook": sae.reads,
        "d_in": sae.d_in,
        "d_sae": sae.d_sae,
        "k": sae.k,
        "expansion": sae.d_sae / sae.d_in,
        "stories": len(held_out),
        "positions": len(x),
        "l0": round(float((acts > 0).float().sum(-1).mean()), 4),
        "explained": round(explained, 5),
        "dead": int(((acts > 0).sum(0) == 0).sum()),
        "trained_explained": round(trained["variance_explained_held_out"], 5),
        "trained_dead": trained["dead_features_held_out"],
        "trained_steps": trained["steps"],
        "prompt": ". ".join(sentences[:2]) + ".",
    }


def default_sae() -> dict:
    return dict(_default_sae())


def train(out: Path, steps: int | None = None, seed: int = 0, live: bool = False, on_step=None) -> dict:
    """The grid of SAEs on planted data, and the default model's SAE; run.json in ``out``."""
    steps = steps or (LIVE_STEPS if live else STEPS)
    grid = LIVE_GRID if live else GRID
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        figures = _train(steps, seed, live, grid, on_step)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    write_run(out, figures)
    return figures


def _train(steps: int, seed: int, live: bool, grid: dict, on_step) -> dict:
    started = time.time()
    torch.manual_seed(seed)
    directions, x, x_eval, codes_eval = datasets(seed)
    at = watch_steps(steps)
    pairs = [(d_sae, k) for d_sae in grid["d_sae"] for k in grid["k"]]
    saes = []
    for i, (d_sae, k) in enumerate(pairs):
        curve: dict[str, list] = {"step": [], "recovered": [], "mmcs": [], "l0": []}

        def watch(step: int, sae, curve=curve) -> None:
            m = measure(sae, directions, x_eval)
            for key in curve:
                curve[key].append(step if key == "step" else m[key])

        def progress(done: int, total: int, i=i) -> None:
            if on_step is not None:
                on_step(i * total + done, len(pairs) * total)

        sae, _ = train_sae.fit(
            x,
            d_sae=d_sae,
            k=k,
            steps=steps,
            batch=BATCH,
            lr=LR,
            seed=seed,
            hook="planted",
            watch=watch,
            watch_at=at,
            on_step=progress,
            progress=False,
        )
        saes.append(
            {"d_sae": d_sae, "k": k, "ratio": d_sae / N_PLANTED, **measure(sae, directions, x_eval), "curve": curve, "sae": sae}
        )
    best = max(range(len(saes)), key=lambda i: (saes[i]["recovered"], saes[i]["mmcs"], -saes[i]["d_sae"]))
    weights = saes[best].pop("sae")
    for entry in saes:
        entry["W_dec"] = matrix(entry.pop("sae", weights).W_dec)
    figures = {
        "experiment": NAME,
        "steps": steps,
        "seed": seed,
        "live": live,
        "planted": {
            "d": D,
            "n": N_PLANTED,
            "mean_active": MEAN_ACTIVE,
            "p": MEAN_ACTIVE / N_PLANTED,
            "magnitude": "uniform on [0, 1]",
            "measured_l0": round(float((codes_eval > 0).float().sum(-1).mean()), 4),
            "max_pair_cos": round(float((directions @ directions.T - 2 * torch.eye(len(directions))).max()), 5),
            "train_samples": N_TRAIN,
            "eval_samples": N_EVAL,
            "directions": matrix(directions),
        },
        "threshold": THRESHOLD,
        "batch": BATCH,
        "lr": LR,
        "grid": saes,
        "right_k": right_k(grid["k"]),
        "best": {"index": best, "W_enc": matrix(weights.W_enc), "b_enc": matrix(weights.b_enc), "b_dec": matrix(weights.b_dec)},
        "default_sae": default_sae(),
    }
    figures["seconds"] = round(time.time() - started, 1)
    figures["threads"] = torch.get_num_threads()
    figures["checkpoints"] = []
    figures["comparison"] = compare(figures)
    return figures


def headline(figures: dict) -> dict:
    """At the k nearest the planted L0: the fraction recovered by each dictionary size."""
    k = figures["right_k"]
    return {e["d_sae"]: e["recovered"] / figures["planted"]["n"] for e in figures["grid"] if e["k"] == k}


def compare(figures: dict) -> list[dict]:
    n = figures["planted"]["n"]
    grid, k = figures["grid"], figures["right_k"]
    at_k = {e["d_sae"]: e for e in grid if e["k"] == k}
    small = min(at_k)
    enough = [e for d, e in at_k.items() if d >= n]
    largest = at_k[max(at_k)]
    worst_k = min((e for e in grid if e["d_sae"] >= n), key=lambda e: e["recovered"])
    by_k = [e for e in grid if e["d_sae"] == largest["d_sae"]]
    default = figures["default_sae"]
    return [
        {
            "what": "toy data: planted features, dimensions, mean active per sample",
            "paper": "512 features in 256 dimensions, 5 active on average, magnitudes uniform on [0, 1] "
            "(Sharkey et al. 2022, 'Toy data'; the settings of its public replication, HoagyC/sparse_coding config.py ToyArgs)",
            "ours": f"{n} in {figures['planted']['d']} dimensions, {figures['planted']['mean_active']} active on average "
            f"(measured {figures['planted']['measured_l0']:.2f})",
            "note": "the same 2× overcompleteness, eight times smaller so that a grid trains in a minute on a CPU; "
            "all features equally likely here, where the paper's probabilities decay (0.99^i) and can be correlated",
        },
        {
            "what": "a dictionary larger than the planted set recovers it (mean max cosine similarity, MMCS)",
            "paper": "an L1 autoencoder 'recovers the ground truth features that generated the data': MMCS near 1 "
            "for dictionaries at least as large as the 512 features, at L1 coefficients in a middle band "
            "(Sharkey et al. 2022, TL;DR and Fig. 3, the MMCS grid over dictionary size × L1 coefficient)",
            "ours": "; ".join(
                f"{e['d_sae']} latents ({e['d_sae'] / n:g}×): MMCS {e['mmcs']:.3f}, {e['recovered']}/{n} recovered, {e['dead']} dead"
                for e in enough
            )
            + f" (k = {k})",
            "note": "the same picture, with the 1× dictionary short of a few features (latents that die, or sit between two "
            "directions) where 2× and 4× get them all; a TopK SAE, as train-sae trains, sets L0 by k where the paper tunes an "
            "L1 coefficient (which its author later said was made harder by dividing the L1 term by the dictionary size: "
            "his comment under the post); we count features with a cosine ≥ "
            f"{figures['threshold']} besides the mean",
        },
        {
            "what": "a dictionary smaller than the planted features cannot recover them all",
            "paper": "lower MMCS for the dictionaries smaller than the 512 features (Sharkey et al. 2022, Fig. 3)",
            "ours": f"{small} latents: MMCS {at_k[small]['mmcs']:.3f}, {at_k[small]['recovered']}/{n} recovered",
            "note": f"no two planted directions have a cosine above {figures['planted']['max_pair_cos']:.2f}, so no decoder "
            f"row is within {figures['threshold']} of two of them: {small} latents recover at most {small}",
        },
        {
            "what": "the sparsity setting has a sweet spot",
            "paper": "only a band of L1 coefficients recovers the features: too low is dense, too high kills latents "
            "(Sharkey et al. 2022, Fig. 3 and 4)",
            "ours": f"{largest['d_sae']} latents: "
            + ", ".join(f"k = {e['k']}: {e['recovered']}/{n}" for e in sorted(by_k, key=lambda e: e["k"]))
            + f"; fewest with ≥ {n} latents: {worst_k['recovered']}/{n} at k = {worst_k['k']} ({worst_k['d_sae']} latents)",
            "note": "k well above the planted L0 spreads each sample over extra latents, which then mix directions; "
            "k = 1 forces one latent per sample, a mixture of its features, and recovers only with room to spare; "
            "k is exact where an L1 coefficient sets L0 only roughly",
        },
        {
            "what": "larger dictionaries than needed leave latents dead",
            "paper": "more dead neurons as the dictionary grows past the ground truth (Sharkey et al. 2022, Fig. 4)",
            "ours": f"never active on {figures['planted']['eval_samples']:,} samples, k = {k}: "
            + ", ".join(f"{d} latents: {e['dead']}" for d, e in sorted(at_k.items())),
            "note": "the same direction; TopK has no L1 pushing latents to zero, the surplus ones simply never win the top k",
        },
        {
            "what": "a real model's SAE: expansion factor and dead features",
            "paper": "4,096 features for a 512-neuron MLP (8×) in the run A/1, of SAEs from 1× to 256× (Bricken et al. 2023, "
            "'Problem setup'); 168 of A/1's features dead (as a summary of the paper quotes it, texonom.com)",
            "ours": f"default-sae: {default['d_sae']:,} features for a {default['d_in']}-wide residual stream "
            f"({default['expansion']:.0f}×), {default['dead']} never active on {default['positions']:,} held-out positions; "
            f"L0 {default['l0']:.2f}, variance explained {default['explained']:.4f}",
            "note": "a residual stream of a tiny story model, not an MLP layer; trained on 114k positions where A/1 saw billions; "
            "TopK (k = 16) instead of an L1 penalty",
        },
    ]


def summary(figures: dict) -> list[str]:
    n, k = figures["planted"]["n"], figures["right_k"]
    lines = [
        f"{n} planted features in {figures['planted']['d']} dimensions, {figures['planted']['mean_active']} active on average; "
        f"{len(figures['grid'])} TopK SAEs, {figures['steps']} steps each, {figures['seconds']} s",
        "dictionary   k   L0    explained  dead  recovered  MMCS",
    ]
    for e in figures["grid"]:
        lines.append(
            f"{e['d_sae']:>10} {e['k']:>3} {e['l0']:>5.2f}  {e['explained']:>9.3f} {e['dead']:>5}  {e['recovered']:>5}/{n}  {e['mmcs']:.3f}"
        )
    best = figures["grid"][figures["best"]["index"]]
    lines.append(
        f"best: {best['d_sae']} latents, k = {best['k']}: {best['recovered']}/{n} recovered (k nearest the planted L0: {k})"
    )
    d = figures["default_sae"]
    lines.append(
        f"default-sae ({d['hook']}): {d['d_sae']:,} features, k = {d['k']}, L0 {d['l0']:.2f}, variance explained "
        f"{d['explained']:.4f}, {d['dead']} never active on {d['positions']:,} held-out positions"
    )
    return lines
