"""The lab's superposition: Elhage et al. (2022), Toy Models of Superposition, trained here.

The toy model (the paper's "ReLU output model", section "Demonstrating Superposition"): x in R^n,
each feature 0 with probability S (the sparsity), else uniform on [0, 1]; h = W x with W an m × n
matrix, m < n; x' = ReLU(WᵀW x + b); loss Σ_i I_i (x_i − x'_i)², I_i each feature's importance.
As the paper's companion notebook (github.com/anthropics/toy-models-of-superposition,
toy_models.ipynb) does, many instances train at once as one batched tensor (W: instances × m × n),
each instance its own sparsity or importance; AdamW at 1e-3 (torch's default weight decay 0.01),
batch 1024, the loss a mean over the batch and the features, summed over the instances.

Four runs, each a figure:
- intro: n = 20, m = 5, I_i = 0.7^i, a range of sparsities: WᵀW, b and ‖W_i‖ for each (paper,
  "Basic Results"): few features, orthogonal, when dense; many, in superposition, when sparse.
- pentagon: n = 5, m = 2, equal importance, rising sparsity: each feature's direction W_i in
  the plane, the angles between neighbouring directions (a regular pentagon: 72°), the fraction of
  features represented, and W at log-spaced steps during training (the geometry forming).
- dimensionality: N_DIMS features in M_DIMS dimensions, equal importance, sparsity swept:
  m/‖W‖_F² (dimensions per feature) and each feature's D_i = ‖W_i‖² / Σ_j (Ŵ_i·W_j)² against
  1/(1−S) (paper, "The Geometry of Superposition": sticky at 1/2, clusters at 3/4, 2/3, 2/5, 3/8).
- phase: 2 features into 1 dimension over the extra (second) feature's relative importance ×
  density 1−S (paper, "Superposition as a Phase Change"): is the extra feature not represented,
  given the dimension, or stored in superposition (an antipodal pair)?

Small runs (pentagon, phase) train RESTARTS copies of each setting from different initial weights
and keep the one with the lowest loss on held-out samples: a toy model can stall in a local
minimum (a square and a dropped feature instead of the pentagon), which the paper notes too.
A feature is "represented" where ‖W_i‖ ≥ REPRESENTED.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from glassbox.model.lab.runs import write_run

NAME = "superposition"
LR, BATCH = 1e-3, 1024  # the companion notebook's optimize(): AdamW, lr 1e-3, n_batch 1024, 10,000 steps
STEPS, LIVE_STEPS = 6_000, 3_000
REPRESENTED = 0.5  # ‖W_i‖ at least this: the feature is represented
EVAL = 8192  # held-out samples that pick the best restart
EVAL_SEED = 1_000_003  # the held-out samples' seed is this + the run's
WATCH = 12  # the pentagon run's saved steps (0 and log-spaced)
DIGITS = 5

INTRO_N, INTRO_M, INTRO_DECAY = 20, 5, 0.7  # the paper's "Basic Results": n = 20, m = 5, I_i = 0.7^i
INTRO_SPARSITY = (0.0, 0.7, 0.9, 0.97, 0.99, 0.997, 0.999)
PENTAGON_SPARSITY = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
N_DIMS, M_DIMS = 100, 10  # the paper's 400 features in 30 dimensions, smaller to train in a minute on a CPU
DIMS_X = 16  # 1/(1−S) log-spaced from 1 to DIMS_MAX_X
DIMS_MAX_X, DIMS_BATCH = 30.0, 256
PHASE_GRID = 11  # importance 0.1…10 × density 1…0.01, each log-spaced
PHASE_BATCH = 256
RESTARTS = 4  # the pentagon's; the phase diagram's: PHASE_RESTARTS
PHASE_RESTARTS = 4
STICKY = ((1, 1, "a dedicated dimension"), (3, 4, "tetrahedron"), (2, 3, "triangle"), (1, 2, "antipodal pair"),
          (2, 5, "pentagon"), (3, 8, "square antiprism"))  # fmt: skip
PHASES = ("not represented", "gets the dimension", "superposition")

SHIPPED = {"restarts": RESTARTS, "phase_restarts": PHASE_RESTARTS, "dims_x": DIMS_X, "phase_grid": PHASE_GRID,
           "batch": BATCH, "dims_batch": DIMS_BATCH, "phase_batch": PHASE_BATCH}  # fmt: skip
# The live variant: fewer instances and smaller batches.
LIVE = {"restarts": 2, "phase_restarts": 2, "dims_x": 8, "phase_grid": 7, "batch": 512, "dims_batch": 128, "phase_batch": 256}


def work(sizes: dict) -> int:
    """Numbers in a step's samples over the four runs (intro, pentagon, dimensionality, phase): what a
    step's time grows with (measured here: 13.2 s for 3,000 live steps, 94 s for 6,000 shipped ones)."""
    return (
        sizes["batch"] * (len(INTRO_SPARSITY) * INTRO_N + len(PENTAGON_SPARSITY) * sizes["restarts"] * 5)
        + sizes["dims_batch"] * sizes["dims_x"] * N_DIMS
        + sizes["phase_batch"] * sizes["phase_grid"] ** 2 * sizes["phase_restarts"] * 2
    )


LIVE_STEP_COST = work(LIVE) / work(SHIPPED)  # a live step's cost against a shipped step's


@dataclass
class Toy:
    """One batched run: instances × (n features into m dimensions), each with its importance and
    feature density 1 − S (both instances × n)."""

    n: int
    m: int
    importance: torch.Tensor
    density: torch.Tensor
    batch: int


def init(toy: Toy, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """W (instances × m × n): normal with Xavier's std √(2 / (n + m)) per instance; b = 0."""
    count = len(toy.density)
    W = torch.randn(count, toy.m, toy.n, generator=generator) * math.sqrt(2 / (toy.n + toy.m))
    return W, torch.zeros(count, toy.n)


def sample(toy: Toy, rows: int, generator: torch.Generator) -> torch.Tensor:
    """rows × instances × n: each feature uniform on [0, 1] where present (with its density p), else 0.
    One draw u per entry serves both: present where u < p, and then u / p is uniform on [0, 1]."""
    u = torch.rand(rows, len(toy.density), toy.n, generator=generator)
    return torch.where(u < toy.density, u / toy.density, 0.0)


def forward(W: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x' = ReLU(WᵀW x + b) for every instance at once."""
    h = torch.einsum("bin,imn->bim", x, W)
    return torch.relu(torch.einsum("bim,imn->bin", h, W) + b)


def losses(W: torch.Tensor, b: torch.Tensor, x: torch.Tensor, importance: torch.Tensor) -> torch.Tensor:
    """Each instance's loss: the importance-weighted squared error, mean over samples and features."""
    return (importance * (x - forward(W, b, x)) ** 2).mean(dim=(0, 2))


def watch_steps(steps: int) -> list[int]:
    """Step 0 and WATCH − 1 steps spaced evenly on a log scale up to ``steps`` (fewer for a short run)."""
    return sorted({0, *(round(steps ** (i / (WATCH - 2))) for i in range(WATCH - 1))})


def fit(toy: Toy, steps: int, seed: int, watch_at=(), on_step=None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Train every instance at once; returns W, b and W at the steps ``watch_at``."""
    generator = torch.Generator().manual_seed(seed)
    W, b = init(toy, generator)
    W.requires_grad_()
    b.requires_grad_()
    opt = torch.optim.AdamW([W, b], lr=LR)
    seen = {0: W.detach().clone()} if 0 in watch_at else {}
    for step in range(1, steps + 1):
        loss = losses(W, b, sample(toy, toy.batch, generator), toy.importance).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in watch_at:
            seen[step] = W.detach().clone()
        if on_step is not None:
            on_step(step)
    return W.detach(), b.detach(), seen


def held_out_losses(toy: Toy, W: torch.Tensor, b: torch.Tensor, seed: int) -> torch.Tensor:
    with torch.no_grad():
        return losses(W, b, sample(toy, EVAL, torch.Generator().manual_seed(EVAL_SEED + seed)), toy.importance)


def best_restarts(toy: Toy, W: torch.Tensor, b: torch.Tensor, seed: int, restarts: int) -> tuple[list[int], torch.Tensor]:
    """Instances are settings × restarts (restarts adjacent): the index of each setting's best, and all held-out losses."""
    held = held_out_losses(toy, W, b, seed)
    return [int(i * restarts + held[i * restarts : (i + 1) * restarts].argmin()) for i in range(len(held) // restarts)], held


# ---- measures (the test recomputes each with numpy from the stored W) ----


def norms(W: torch.Tensor) -> torch.Tensor:
    """‖W_i‖, the length of each feature's direction (W's columns)."""
    return W.norm(dim=-2)


def dimensionality(W: torch.Tensor) -> torch.Tensor:
    """The paper's feature dimensionality D_i = ‖W_i‖² / Σ_j (Ŵ_i·W_j)² (0 for a feature not embedded)."""
    lengths = norms(W)
    unit = W / lengths.clamp_min(1e-6).unsqueeze(-2)
    shared = torch.einsum("...mi,...mj->...ij", unit, W).pow(2).sum(-1)
    return torch.where(lengths > 1e-6, lengths**2 / shared.clamp_min(1e-12), torch.zeros_like(lengths))


def interference(W: torch.Tensor) -> torch.Tensor:
    """Σ_{j≠i} (Ŵ_i·W_j)²: how much other features share feature i's direction (the paper's bar colour)."""
    unit = W / norms(W).clamp_min(1e-6).unsqueeze(-2)
    dots = torch.einsum("...mi,...mj->...ij", unit, W)
    return dots.pow(2).sum(-1) - torch.diagonal(dots, dim1=-2, dim2=-1).pow(2)


def neighbour_angles(W2: torch.Tensor) -> list[float]:
    """For W (2 × n): the angles in degrees between neighbouring directions of the represented
    features, going round the circle (one angle per represented feature; none for fewer than two)."""
    lengths = norms(W2)
    angles = torch.atan2(W2[1], W2[0])[lengths >= REPRESENTED].sort().values
    if len(angles) < 2:
        return []
    gaps = torch.diff(torch.cat([angles, angles[:1] + 2 * math.pi]))
    return [round(math.degrees(float(g)), 3) for g in gaps]


def phase_of(w: list[float]) -> int:
    """Two features in one dimension, W = (w_1, w_2): 0 the extra feature (2) not represented,
    1 it has the dimension to itself, 2 both represented: superposition."""
    first, extra = abs(w[0]) >= REPRESENTED, abs(w[1]) >= REPRESENTED
    return 2 if first and extra else int(extra)


def theory_phase(importance: float, density: float) -> int:
    """The configuration of lowest expected loss among three, in closed form (our derivation, per
    sample, x_i uniform on [0, 1] with probability p = density): the extra feature dropped, W = (1, 0),
    b_2 = p/2 (its mean): I_2 (p/3 − p²/4); given the dimension, W = (0, 1), b_1 = p/2: I_1 (p/3 − p²/4)
    with I_1 = 1; an antipodal pair, W = (1, −1), b = 0, wrong only when both are on (then each loses
    min(x_1, x_2)², mean 1/6): (I_1 + I_2) p²/6. Returns the phase as phase_of numbers it."""
    p = density
    alone = p / 3 - p * p / 4
    return min(range(3), key=lambda k: (importance * alone, alone, (1 + importance) * p * p / 6)[k])


def theory_boundary(importance: float) -> float:
    """The density below which theory_phase says superposition: the antipodal pair's loss equals
    the better of the other two where p = 4 I_2 / (2 + 5 I_2) (against dropping the extra feature)
    or p = 4 / (5 + 2 I_2) (against dropping the first)."""
    return min(4 * importance / (2 + 5 * importance), 4 / (5 + 2 * importance))


def rounded(t: torch.Tensor | list, digits: int = DIGITS):
    if isinstance(t, torch.Tensor):
        t = t.tolist()
    if isinstance(t, list):
        return [rounded(v, digits) for v in t]
    return round(float(t), digits)


# ---- the four runs ----


def run_intro(steps: int, seed: int, batch: int, tick) -> dict:
    sparsity = torch.tensor(INTRO_SPARSITY)
    n, m = INTRO_N, INTRO_M
    importance = INTRO_DECAY ** torch.arange(n, dtype=torch.float32)
    toy = Toy(n, m, importance.expand(len(sparsity), n), (1 - sparsity)[:, None].expand(-1, n), batch)
    W, b, _ = fit(toy, steps, seed, on_step=tick)
    lengths = norms(W)
    return {
        "n": n,
        "m": m,
        "importance": rounded(importance),
        "sparsity": list(INTRO_SPARSITY),
        "W": rounded(W),
        "b": rounded(b),
        "WtW": rounded(W.transpose(1, 2) @ W),
        "norms": rounded(lengths),
        "interference": rounded(interference(W)),
        "represented": [int(r) for r in (lengths >= REPRESENTED).sum(-1)],
        "loss": rounded(held_out_losses(toy, W, b, seed), 7),
    }


def run_pentagon(steps: int, seed: int, batch: int, restarts: int, tick) -> dict:
    n, m = 5, 2
    sparsity = torch.tensor(PENTAGON_SPARSITY).repeat_interleave(restarts)
    toy = Toy(n, m, torch.ones(len(sparsity), n), (1 - sparsity)[:, None].expand(-1, n), batch)
    at = watch_steps(steps)
    W, b, seen = fit(toy, steps, seed, watch_at=set(at), on_step=tick)
    best, held = best_restarts(toy, W, b, seed, restarts)
    all_five = [sum(len(neighbour_angles(w)) == n for w in W[i * restarts : (i + 1) * restarts]) for i in range(len(best))]
    W, b = W[best], b[best]
    angles = [neighbour_angles(w) for w in W]
    represented = (norms(W) >= REPRESENTED).sum(-1)
    return {
        "n": n,
        "m": m,
        "importance": [1.0] * n,
        "sparsity": list(PENTAGON_SPARSITY),
        "restarts": restarts,
        "W": rounded(W),
        "b": rounded(b),
        "norms": rounded(norms(W)),
        "angles": angles,
        "represented": [int(r) for r in represented],
        "fraction": [round(int(r) / n, 4) for r in represented],
        "dims": rounded(dimensionality(W)),
        "loss": rounded(held[best], 7),
        "all_represented_among_restarts": all_five,
        "steps": at,
        "W_at": [rounded(seen[s][best]) for s in at],
    }


def run_dimensionality(steps: int, seed: int, batch: int, points: int, tick) -> dict:
    n, m = N_DIMS, M_DIMS
    x = torch.logspace(0, math.log10(DIMS_MAX_X), points)
    toy = Toy(n, m, torch.ones(points, n), (1 / x)[:, None].expand(-1, n), batch)
    W, b, _ = fit(toy, steps, seed, on_step=tick)
    D = dimensionality(W)
    return {
        "n": n,
        "m": m,
        "x": rounded(x, 4),
        "sparsity": rounded(1 - 1 / x, 6),
        "dims_per_feature": rounded(m / W.pow(2).sum((1, 2))),
        "D": rounded(D, 4),
        "represented": [int(r) for r in (norms(W) >= REPRESENTED).sum(-1)],
        "W": rounded(W, 4),
        "sticky": [{"fraction": a / c, "label": f"{a}/{c}", "shape": shape} for a, c, shape in STICKY],
        "near_sticky": [int(((D - a / c).abs() < 0.02).sum()) for a, c, _ in STICKY],
    }


def run_phase(steps: int, seed: int, batch: int, grid: int, restarts: int, tick) -> dict:
    importance = torch.logspace(-1, 1, grid)
    density = torch.logspace(0, -2, grid)
    cells = torch.cartesian_prod(density, importance)  # row-major: density (rows) × importance (columns)
    dens, imp = cells[:, 0].repeat_interleave(restarts), cells[:, 1].repeat_interleave(restarts)
    toy = Toy(2, 1, torch.stack([torch.ones_like(imp), imp], -1), dens[:, None].expand(-1, 2), batch)
    W, b, _ = fit(toy, steps, seed, on_step=tick)
    best, _ = best_restarts(toy, W, b, seed, restarts)
    w = rounded(W[best, 0])
    phase = [phase_of(v) for v in w]
    theory = [theory_phase(float(i), float(d)) for d, i in cells]
    D = dimensionality(W[best])
    pair = [float(D[k].mean()) for k in range(len(best)) if phase[k] == 2]
    return {
        "importance": rounded(importance, 4),
        "density": rounded(density, 4),
        "restarts": restarts,
        "W": w,  # row-major over density (rows) × importance (columns)
        "b": rounded(b[best]),
        "phase": [phase[r * grid : (r + 1) * grid] for r in range(grid)],
        "theory": [theory[r * grid : (r + 1) * grid] for r in range(grid)],
        "agreement": round(sum(p == t for p, t in zip(phase, theory, strict=True)) / len(phase), 4),
        "pair_dims": round(sorted(pair)[len(pair) // 2], 4) if pair else None,
        "phases": list(PHASES),
    }


def train(out: Path, steps: int | None = None, seed: int = 0, live: bool = False, on_step=None) -> dict:
    """The four runs; run.json in ``out``."""
    steps = steps or (LIVE_STEPS if live else STEPS)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        figures = _train(steps, seed, live, on_step)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    write_run(out, figures)
    return figures


def _train(steps: int, seed: int, live: bool, on_step) -> dict:
    started = time.time()
    torch.manual_seed(seed)
    sizes = LIVE if live else SHIPPED
    total = 4 * steps

    def ticker(run: int):
        return None if on_step is None else lambda step: on_step(run * steps + step, total)

    figures = {
        "experiment": NAME,
        "steps": steps,
        "seed": seed,
        "live": live,
        "setup": {
            "optimizer": "AdamW (torch's default weight decay 0.01)",
            "lr": LR,
            "batch": sizes["batch"],
            "init": "normal, std √(2/(n+m)) (Xavier), b = 0",
            "represented_at": REPRESENTED,
            "held_out": EVAL,
        },
        "intro": run_intro(steps, seed, sizes["batch"], ticker(0)),
        "pentagon": run_pentagon(steps, seed + 1, sizes["batch"], sizes["restarts"], ticker(1)),
        "dimensionality": run_dimensionality(steps, seed + 2, sizes["dims_batch"], sizes["dims_x"], ticker(2)),
        "phase": run_phase(steps, seed + 3, sizes["phase_batch"], sizes["phase_grid"], sizes["phase_restarts"], ticker(3)),
    }
    figures["seconds"] = round(time.time() - started, 1)
    figures["threads"] = torch.get_num_threads()
    figures["checkpoints"] = []
    figures["comparison"] = compare(figures)
    return figures


def _fraction(value: float) -> str:
    close = min(STICKY, key=lambda s: abs(value - s[0] / s[1]))
    return f"{value:.3f} (nearest sticky fraction {close[0]}/{close[1]})"


def headline(figures: dict) -> dict:
    """The pentagon at the highest sparsity: its angles; dims per feature at the densest and sparsest points."""
    pentagon, dims = figures["pentagon"], figures["dimensionality"]
    angles = pentagon["angles"][-1]
    return {
        "sparsity": pentagon["sparsity"][-1],
        "angles": angles,
        "mean_angle": sum(angles) / len(angles) if angles else None,
        "worst_angle": max((abs(a - 72) for a in angles), default=None),
        "dims_dense": dims["dims_per_feature"][0],
        "dims_sparse": dims["dims_per_feature"][-1],
    }


def compare(figures: dict) -> list[dict]:
    intro, pentagon, dims, phase = (figures[k] for k in ("intro", "pentagon", "dimensionality", "phase"))
    top = headline(figures)
    five = pentagon["angles"][-1]
    plateau = [v for v in dims["dims_per_feature"] if abs(v - 0.5) < 0.04]
    grid = phase["phase"]
    corners = {
        "dense, extra feature least important": grid[0][0],
        "dense, extra feature most important": grid[0][-1],
        "sparsest, equal importance": grid[-1][len(grid) // 2],
    }
    pent_dims = [d for d, n_ in zip(pentagon["dims"][-1], pentagon["norms"][-1], strict=True) if n_ >= REPRESENTED]
    return [
        {
            "what": "setup: optimiser, steps, batch",
            "paper": "AdamW, lr 1e-3, batch 1024, 10,000 steps, many instances as one tensor "
            "(the paper's companion notebook, toy_models.ipynb, optimize())",
            "ours": f"AdamW, lr {LR:g}, batch {figures['setup']['batch']}, {figures['steps']:,} steps; "
            f"{dims['n']}-feature run at batch {DIMS_BATCH if not figures['live'] else LIVE['dims_batch']}",
            "note": "fewer steps and a smaller batch for the large run, to train in minutes on a CPU core",
        },
        {
            "what": f"n = {intro['n']}, m = {intro['m']}, I_i = 0.7^i, dense: features represented",
            "paper": "the m = 5 most important, orthogonal; the rest not represented (section 'Demonstrating "
            "Superposition', 'Basic Results' figure, 0% sparsity)",
            "ours": f"{intro['represented'][0]} with ‖W_i‖ ≥ {REPRESENTED} at S = 0",
            "note": "the same: dense, the model keeps the m most important, like PCA"
            if intro["represented"][0] == intro["m"]
            else "dense, features compete for the m dimensions; the count depends on training length",
        },
        {
            "what": "sparse: features represented",
            "paper": "more features than dimensions, in superposition, as sparsity rises (same figure, 70%, 90% and sparser)",
            "ours": ", ".join(f"S = {s:g}: {r}" for s, r in zip(intro["sparsity"], intro["represented"], strict=True)),
            "note": "the same trend; exact counts depend on the threshold on ‖W_i‖ and on training length",
        },
        {
            "what": "pentagon (5 features in 2 dimensions, sparse): angle between neighbours",
            "paper": "72°, a regular pentagon (Introduction figure at 90% sparsity; 'The Geometry of Superposition')",
            "ours": f"{', '.join(f'{a:.1f}°' for a in five)} at S = {top['sparsity']:g}" if five else "no pentagon",
            "note": "equal importances here, so the pentagon is regular; the paper's intro figure has decaying importance",
        },
        {
            "what": "pentagon: dimensions per feature",
            "paper": "2/5 ('The Geometry of Superposition', feature dimensionality)",
            "ours": ", ".join(f"{d:.3f}" for d in pent_dims),
            "note": "D_i computed as the paper defines it, from our W",
        },
        {
            "what": "features represented as sparsity rises (5 into 2)",
            "paper": "0%: 2 (orthogonal); 80%: 4 (two antipodal pairs); 90%: 5 (pentagon) (Introduction figure)",
            "ours": ", ".join(f"S = {s:g}: {r}" for s, r in zip(pentagon["sparsity"], pentagon["represented"], strict=True)),
            "note": "equal importance here moves the thresholds; dense with equal importance any 2-D projection is optimal, "
            "so more than 2 columns can have length",
        },
        {
            "what": "antipodal pair: dimensions per feature",
            "paper": "1/2: m/‖W‖_F² sticks at 1/2 over a range of sparsity ('Uniform Superposition' figure)",
            "ours": f"{len(plateau)} of {len(dims['x'])} sparsities within 0.04 of 1/2; the phase diagram's pairs: "
            + (_fraction(phase["pair_dims"]) if phase["pair_dims"] is not None else "none"),
            "note": f"{dims['n']} features in {dims['m']} dimensions instead of 400 in 30",
        },
        {
            "what": "dimensions per feature falls with sparsity, with sticky fractions",
            "paper": "from 1 (dense) down, features clustering at 1, 3/4, 2/3, 1/2, 2/5, 3/8 ('Uniform Superposition', "
            "feature dimensionality figure)",
            "ours": f"{top['dims_dense']:.3f} at 1/(1−S) = 1 to {top['dims_sparse']:.3f} at {dims['x'][-1]:g}; features within "
            "0.02 of " + ", ".join(f"{s['label']}: {c}" for s, c in zip(dims["sticky"], dims["near_sticky"], strict=True)),
            "note": "fewer steps and a smaller model: fewer clusters, and none below 3/8",
        },
        {
            "what": "phase diagram (2 features into 1 dimension)",
            "paper": "dense: the extra feature is dropped when less important, takes the dimension when more important; "
            "sparse: superposition (section 'Superposition as a Phase Change', first phase diagram)",
            "ours": "; ".join(f"{where}: {PHASES[p]}" for where, p in corners.items())
            + f"; {phase['agreement']:.0%} of cells as our closed-form rule says",
            "note": "the rule compares three fixed configurations; training finds better biases and norms near the edges",
        },
    ]


def summary(figures: dict) -> list[str]:
    intro, pentagon, dims, phase = (figures[k] for k in ("intro", "pentagon", "dimensionality", "phase"))
    top = headline(figures)
    lines = [
        f"{figures['steps']:,} steps per run, {figures['seconds']} s",
        f"{intro['n']} features into {intro['m']} dimensions, represented per sparsity: "
        + ", ".join(f"{s:g}: {r}" for s, r in zip(intro["sparsity"], intro["represented"], strict=True)),
        "5 features into 2: represented per sparsity: "
        + ", ".join(f"{s:g}: {r}" for s, r in zip(pentagon["sparsity"], pentagon["represented"], strict=True)),
        f"angles between neighbours at S = {top['sparsity']:g}: " + ", ".join(f"{a:.1f}°" for a in top["angles"]),
        f"{dims['n']} features into {dims['m']}: dimensions per feature "
        + ", ".join(f"{x:g}: {v:.3f}" for x, v in zip(dims["x"], dims["dims_per_feature"], strict=True))
        + " (1/(1−S): m/‖W‖_F²)",
        f"phase diagram: {phase['agreement']:.0%} of cells as the closed-form rule says",
    ]
    return lines
