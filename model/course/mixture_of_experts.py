"""The lesson on mixture of experts, on the MoE micro-model trained twice (model/micro/moe.py): with the
load-balancing loss and without it.

A router scores each position against 8 experts (x · W_router), keeps the top 2 and mixes their
outputs with the renormalised softmax weights. On a prompt, the lesson shows each token's two
experts and weights per block, and the balance loss N · Σ f_i · P_i written out from that prompt's
routing; over training, each expert's share of the routed token-slots in both runs.

The course's other two remedies for expert collapse are trained here on the same setup (same
batches, steps and start; no balance loss): noisy top-k routing (Shazeer et al. 2017: Gaussian
noise of a trained scale on the router's logits while training) and expert-choice routing (Zhou
et al. 2022: each expert picks its top-C positions of a sequence), with a capacity-factor run beside
them. ``glassbox course moe --remeasure`` trains the three and ships their curves (assets/course/)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.data.stories import corpus
from glassbox.model.engine import Transformer, check_prompt, load_balancing_loss, variant
from glassbox.model.engine.capture import capture, hook
from glassbox.model.engine.components.moe import MoE
from glassbox.model.engine.files import write_text
from glassbox.model.io.assets import asset
from glassbox.model.io.checkpoint import LoadedModel, load
from glassbox.model.micro import moe
from glassbox.model.micro.common import fit, read_curve, story_tokens, windows

BALANCED, UNBALANCED = "micro-moe", "micro-moe" + moe.UNBALANCED
PROMPT = "the cat sat on the mat and the dog ran to the park"


@dataclass
class Routing:
    tokens: list[int]
    probs: np.ndarray  # (block, position, expert): the router's softmax
    weights: np.ndarray  # (block, position, expert): the weight each expert's output gets (0: not chosen, or dropped)
    top_k: int = 2  # experts per position
    capacity: int | None = None  # the most positions an expert takes (None: no capacity factor)

    @property
    def chosen(self) -> np.ndarray:
        """(block, position, expert): the router's top_k at each position."""
        top = np.argsort(-self.probs, axis=-1, kind="stable")[..., : self.top_k]
        chosen = np.zeros_like(self.probs, dtype=bool)
        np.put_along_axis(chosen, top, True, axis=-1)
        return chosen

    @property
    def dropped(self) -> np.ndarray:
        """(block, position, expert): chosen, but over the expert's capacity, so its weight is 0."""
        return self.chosen & (self.weights == 0)


def route(loaded: LoadedModel, tokens: list[int], capacity_factor: float | None = None) -> Routing:
    """Every block's routing of ``tokens``; with a capacity factor C, as GShard caps each expert at
    ceil(C · positions · k / experts) positions (the same weights: ``variant``)."""
    check_prompt(loaded.cfg, tokens)
    model = loaded.model if capacity_factor is None else variant(loaded.model, expert_capacity=capacity_factor)
    seen = moe.routing(model, tokens)
    blocks = range(loaded.cfg.n_layers)
    capacity = (
        None
        if capacity_factor is None
        else math.ceil(capacity_factor * len(tokens) * loaded.cfg.experts_top_k / loaded.cfg.n_experts)
    )
    return Routing(
        tokens,
        np.stack([seen[f"blocks.{i}.mlp.hook_router_probs"].double().numpy() for i in blocks]),
        np.stack([seen[f"blocks.{i}.mlp.hook_expert_weights"].double().numpy() for i in blocks]),
        loaded.cfg.experts_top_k,
        capacity,
    )


def sentences() -> list[str]:
    """Story sentences for the page's Route button: the corpus's generator, with another seed than
    the training text's."""
    return [s.strip() + "." for story in corpus(40, seed=12345) for s in story.split(".") if 4 < len(s.split()) < 14]


def balance_terms(routing: Routing, block: int, top_k: int) -> dict:
    """The balance loss of one block on one prompt, term by term: f_i (the share of positions that
    chose expert i among their top_k), P_i (expert i's mean router probability), N · Σ f_i · P_i."""
    probs = routing.probs[block]
    n = probs.shape[-1]
    f = routing.chosen[block].sum(0) / probs.shape[0]
    P = probs.mean(0)
    loss = float(load_balancing_loss(torch.from_numpy(probs), top_k))
    return {"f": f.tolist(), "P": P.tolist(), "N": n, "loss": loss}


def share_curves(loaded: LoadedModel) -> np.ndarray:
    """(step, block, expert): each expert's share of the token-slots at each training step."""
    return np.array(read_curve(loaded.path)["shares"])


def running_mean(curves: np.ndarray, window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(steps, means): the mean of each column of ``curves`` (step, …) over the ``window`` steps
    ending at each step from ``window`` on (fewer steps than that: one mean of them all); steps
    counted from 1."""
    window = min(window, len(curves))
    sums = np.cumsum(np.concatenate([np.zeros_like(curves[:1]), curves]), axis=0)
    return np.arange(window, len(curves) + 1), (sums[window:] - sums[:-window]) / window


def figures(loaded=None) -> dict:
    """Both runs' figures (the course's model, ``loaded``, is not used)."""
    balanced = load(BALANCED)
    routing = route(balanced, balanced.encode(PROMPT))
    return moe.figures(balanced) | {
        "prompt": PROMPT,
        "balance_terms_block1": balance_terms(routing, 0, balanced.cfg.experts_top_k),
        "remedies": remedy_table(remedy_runs()),
    }


# --- the other two remedies: noisy top-k and expert choice --------------------------------------

REMEDIES_FILE = asset("course") / "moe-remedies.json"
REMEDIES_COMMAND = "glassbox course moe --remeasure"
CAPACITY_RUN = 1.25  # the capacity-factor run's C (Switch Transformer's training value)
EXPERT_CHOICE_FACTOR = 2.0  # each expert picks factor · positions / experts positions: top-2's compute
WEIGHTS = "blocks.{}.mlp.hook_expert_weights"


class NoisyTopK(MoE):
    """Shazeer et al. 2017's noisy top-k gating on the micro-MoE's router: while training, the logits
    are x·W_router + ε · softplus(x·W_noise) with ε ~ N(0, 1) from the module's own seeded generator
    (W_noise is trained, starting at 0: noise of scale softplus(0) ≈ 0.69); in eval, no noise. Then
    the top k, renormalised, as the plain router."""

    def __init__(self, cfg, prefix: str, seed: int):
        super().__init__(cfg, prefix)
        self.W_noise = nn.Parameter(torch.zeros(cfg.d_model, cfg.n_experts))
        self.noise = torch.Generator().manual_seed(seed)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        logits = x @ self.W_router
        if not self.training:
            return logits
        eps = torch.randn(logits.shape, generator=self.noise, dtype=logits.dtype).to(logits.device)
        return logits + eps * F.softplus(x @ self.W_noise)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = hook(self.prefix + "hook_router_probs", self.logits(x).softmax(dim=-1))
        top, chosen = probs.topk(self.cfg.experts_top_k, dim=-1)
        weights = torch.zeros_like(probs).scatter(-1, chosen, top / top.sum(dim=-1, keepdim=True))
        return mixed(self, weights, x)


class ExpertChoice(MoE):
    """Zhou et al. 2022's expert-choice routing: the router's softmax over experts as usual, but each
    expert takes the ``capacity`` positions of the sequence it scores highest, weighted by that
    probability (not renormalised). Every expert gets exactly ``capacity`` positions; a position may
    get several experts, or none. (In a decoder the choice looks at later positions of the
    sequence: the paper routes an encoder's or a whole batch's tokens.)"""

    def __init__(self, cfg, prefix: str, capacity: int):
        super().__init__(cfg, prefix)
        self.capacity = capacity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = hook(self.prefix + "hook_router_probs", (x @ self.W_router).softmax(dim=-1))
        return mixed(self, expert_choice(probs, self.capacity), x)


def mixed(moe_: MoE, weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Σ_e weights[e] · expert_e(x), every expert run at every position (the micro-model is small)."""
    weights = hook(moe_.prefix + "hook_expert_weights", weights)
    return torch.einsum("bte,betd->btd", weights, moe_.experts.everywhere(x))


def expert_choice(probs: torch.Tensor, capacity: int) -> torch.Tensor:
    """(…, position, expert) router probabilities → the weights of expert-choice routing: in each
    sequence, expert e keeps its ``capacity`` highest-scoring positions with weight probs[t, e], and
    every other position gets 0 from it."""
    top, picked = probs.topk(capacity, dim=-2)
    return torch.zeros_like(probs).scatter(-2, picked, top)


def expert_choice_capacity(positions: int, n_experts: int, factor: float = EXPERT_CHOICE_FACTOR) -> int:
    """Zhou et al.'s k = n · c / e positions per expert (at least 1, at most n)."""
    return max(1, min(positions, math.ceil(factor * positions / n_experts)))


def slot_shares(weights: torch.Tensor) -> torch.Tensor:
    """Each expert's share of the expert computations a block ran, (expert,): the positions that gave
    it a weight over all (position, expert) pairs given one. Top-k without a cap: the router's slots."""
    ran = (weights > 0).reshape(-1, weights.shape[-1]).double()
    return ran.sum(0) / ran.sum()


def unrouted_share(weights: torch.Tensor) -> float:
    """The share of positions that no expert took (only the residual stream carries them on)."""
    return float(((weights > 0).sum(-1) == 0).double().mean())


def imbalance(shares: np.ndarray) -> np.ndarray:
    """The coefficient of variation of the experts' shares (last axis): their standard deviation over
    their mean (1/N). 0 is perfect balance; √(N − 1) is one expert taking everything."""
    shares = np.asarray(shares, dtype=float)
    return shares.std(axis=-1) / shares.mean(axis=-1)


def remedy_model(remedy: str, seed: int = moe.SEED) -> Transformer:
    """A fresh model of the micro-MoE's shape (the shipped runs' start) routed by ``remedy``:
    "capacity" (the engine's capacity factor C = CAPACITY_RUN), "noisy" or "expert_choice"."""
    model = moe.live_model(CAPACITY_RUN if remedy == "capacity" else None, seed)
    if remedy == "capacity":
        return model
    capacity = expert_choice_capacity(moe.T, model.cfg.n_experts)
    for i, block in enumerate(model.blocks):
        plain = block.mlp
        routed = (
            NoisyTopK(model.cfg, plain.prefix, seed + i) if remedy == "noisy" else ExpertChoice(model.cfg, plain.prefix, capacity)
        )
        routed.load_state_dict(plain.state_dict(), strict=False)  # the same start; W_noise at 0
        block.mlp = routed
    return model


def remedy_loss(model: Transformer, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The next-token loss alone (no balance term), recording each block's expert shares and the
    share of positions no expert took."""
    with capture(["blocks.*.mlp.hook_expert_weights"]) as recorder:
        loss = model(inputs, targets).loss
    weights = [recorder.tensors[WEIGHTS.format(i)].detach() for i in range(model.cfg.n_layers)]
    return loss, {
        "shares": [[round(s, 4) for s in slot_shares(w).tolist()] for w in weights],
        "unrouted": [round(unrouted_share(w), 4) for w in weights],
    }


def train_remedy(remedy: str, steps: int = moe.STEPS) -> dict:
    """One remedy trained as the shipped runs were (moe.train: same seed, batches, steps, schedule)."""
    torch.manual_seed(moe.SEED)
    _, train_ids, _ = story_tokens(moe.N_STORIES, moe.SEED)
    model = remedy_model(remedy)
    curve = fit(model, lambda gen: windows(train_ids, moe.BATCH, moe.T, gen), steps, moe.LR, moe.SEED, step_loss=remedy_loss)
    if remedy == "noisy":  # the noise scale the router learned, on held-out text
        _, _, val_ids = story_tokens(moe.N_STORIES, moe.SEED)
        curve["noise_scale"] = noise_scales(model, val_ids[: moe.T * 8].reshape(8, moe.T))
    return {key: curve[key] for key in ("loss", "shares", "unrouted", "seconds", "threads", "noise_scale") if key in curve}


@torch.no_grad()
def noise_scales(model: Transformer, held_out: torch.Tensor) -> list[float]:
    """Per block, the mean noise scale softplus(x·W_noise) the trained noisy router adds, on held-out text."""
    scales = []
    with capture([f"blocks.{i}.ln2.hook_out" for i in range(model.cfg.n_layers)]) as recorder:
        model(held_out)
    for i, block in enumerate(model.blocks):
        x = recorder.tensors[f"blocks.{i}.ln2.hook_out"]
        scales.append(round(float(F.softplus(x @ block.mlp.W_noise).mean()), 4))
    return scales


REMEDIES = ("capacity", "noisy", "expert_choice")


def remeasure(remedies: tuple[str, ...] = REMEDIES) -> str:
    """Train the capacity-factor, noisy top-k and expert-choice runs and ship their curves. On one
    thread, as the shipped runs were (each took about 7 minutes on a busy 2-core machine)."""
    started, threads = time.time(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {remedy: train_remedy(remedy) for remedy in remedies}
    finally:
        torch.set_num_threads(threads)
    record = {
        "runs": runs,
        "settings": {
            "steps": moe.STEPS,
            "batch": moe.BATCH,
            "T": moe.T,
            "lr": moe.LR,
            "seed": moe.SEED,
            "capacity_factor": CAPACITY_RUN,
            "expert_choice_factor": EXPERT_CHOICE_FACTOR,
        },
        "seconds": round(time.time() - started, 1),
        "torch": torch.__version__,
        "command": REMEDIES_COMMAND,
    }
    write_text(REMEDIES_FILE, json.dumps(record) + "\n")
    return f"wrote {REMEDIES_FILE} ({record['seconds']} s)"


RUN_TITLES = {
    "none": "no remedy",
    "balance": "balance loss",
    "capacity": f"capacity factor C = {CAPACITY_RUN:g}",
    "noisy": "noisy top-k",
    "expert_choice": "expert choice",
}


def remedy_runs() -> dict[str, dict]:
    """Every run on the same axes, keyed as RUN_TITLES: its next-token loss per step (the balance
    run's recorded loss less its α · balance term), each expert's shares (step, block, expert) and
    the share of positions no expert took (step, block). The first two are the shipped micro-models'
    curves; the rest, the shipped remeasured runs."""
    runs = {}
    for key, name in (("none", UNBALANCED), ("balance", BALANCED)):
        curve = read_curve(load(name).path)
        alpha = moe.ALPHA if key == "balance" else 0.0
        shares = np.array(curve["shares"])
        runs[key] = {
            "loss": np.array(curve["loss"]) - alpha * np.array(curve["balance_loss"]),
            "shares": shares,
            "unrouted": np.zeros(shares.shape[:2]),
        }  # top-2 without a cap gives every position 2 experts
    shipped = json.loads(REMEDIES_FILE.read_text())["runs"]
    for key in REMEDIES:
        runs[key] = {
            "loss": np.array(shipped[key]["loss"]),
            "shares": np.array(shipped[key]["shares"]),
            "unrouted": np.array(shipped[key]["unrouted"]),
        }
        if "noise_scale" in shipped[key]:
            runs[key]["noise_scale"] = shipped[key]["noise_scale"]
    return runs


def remedy_table(runs: dict[str, dict], last: int = 50) -> dict[str, dict]:
    """Each run's end, over its last ``last`` batches: per block the largest share and the imbalance
    (coefficient of variation) of the mean shares, the share of positions no expert took, and the loss."""
    table = {}
    for key, run in runs.items():
        shares = run["shares"][-last:].mean(0)  # (block, expert)
        table[key] = {
            "largest_share": [round(float(v), 4) for v in shares.max(-1)],
            "imbalance": [round(float(v), 4) for v in imbalance(shares)],
            "unrouted": [round(float(v), 4) for v in run["unrouted"][-last:].mean(0)],
            "loss": round(float(run["loss"][-last:].mean()), 4),
        }
    return table


# --- exercises ------------------------------------------------------------------------------


def listed(values) -> str:
    return ", ".join(f"{v:g}" for v in values)


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """The Switch balance loss from given fractions and probabilities, an expert's capacity for a
    capacity factor, and the routings a capacity drops (loaded is not used)."""
    rng = draw("moe", seed)

    n = int(rng.choice([4, 8]))
    top_k = int(rng.choice([1, 2]))
    favour = rng.dirichlet(np.ones(n))  # the router's leaning: 20 positions each choose top_k distinct experts
    counts = sum(np.bincount(rng.choice(n, top_k, replace=False, p=favour), minlength=n) for _ in range(20))
    f = (counts / 20).tolist()
    P = (rng.multinomial(100, favour) / 100).tolist()  # whole hundredths that sum to 1
    loss = n * sum(a * b for a, b in zip(f, P))
    balance_ex = Exercise(
        "balance_loss",
        f"A router over N = {n} experts sends each of 20 positions to its top {top_k}. The share of "
        f"positions that chose each expert is f = {listed(f)}; the router's mean probability for each is P = "
        f"{listed(P)}. What is the Switch balance loss N · Σ fᵢ · Pᵢ? Answer to 3 decimals.",
        loss,
        tolerance=1e-3,
        hint="Multiply each expert's f by its P, add the products, and multiply by the number of experts.",
        solution=f"Σ fᵢ · Pᵢ = {' + '.join(f'{a:g}·{b:g}' for a, b in zip(f, P))} = {loss / n:.4f}; × {n} = "
        f"{loss:.4f}. Perfectly even routing would give {top_k}.",
        data={"n_experts": n, "top_k": top_k, "f": f, "P": P},
    )

    tokens = int(rng.choice([64, 100, 128, 256, 500]))
    n, top_k = int(rng.choice([8, 16, 32])), int(rng.choice([1, 2]))
    factor = float(rng.choice([0.5, 1.0, 1.25, 1.5, 2.0]))
    capacity = math.ceil(factor * tokens * top_k / n)
    capacity_ex = Exercise(
        "capacity",
        f"A batch of {tokens} tokens is routed to the top {top_k} of {n} experts with capacity factor "
        f"C = {factor:g}. How many token slots does each expert have (GShard's capacity, rounded up)?",
        capacity,
        hint="Each expert's fair share of the routings is tokens · k / experts; the capacity factor scales it.",
        solution=f"{factor:g} × {tokens} × {top_k} / {n} = {factor * tokens * top_k / n:g}, rounded up: {capacity}.",
        data={"tokens": tokens, "top_k": top_k, "n_experts": n, "capacity_factor": factor},
        unit="tokens",
    )

    n, capacity = 4, int(rng.integers(4, 9))
    wanted = rng.multinomial(4 * capacity, rng.dirichlet(np.ones(n) * 0.7)).tolist()  # as many routings as slots
    dropped = sum(max(0, w - capacity) for w in wanted)
    dropped_ex = Exercise(
        "dropped",
        f"Each of {n} experts has a capacity of {capacity} tokens. The router sends them {listed(wanted)} "
        "tokens. How many routings are dropped (over their expert's capacity)?",
        dropped,
        hint="An expert takes tokens up to its capacity; the rest of what it was sent is dropped.",
        solution=" + ".join(f"max(0, {w} − {capacity})" for w in wanted) + f" = {dropped}, although the "
        f"{4 * capacity} slots would hold all {sum(wanted)} routings if they were spread evenly.",
        data={"capacity": capacity, "routed": wanted},
        unit="routings",
    )
    return [balance_ex, capacity_ex, dropped_ex]
