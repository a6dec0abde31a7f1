"""The lab's induction: Olsson et al. (2022), "In-context Learning and Induction Heads", on the
micro-model that learns induction heads (model/micro/induction.py: two attention-only blocks of two
heads, random syllables in which a random span repeats to the end of the 64-token context), trained
by the micro-models' own loop (model/micro/common.fit) and measured every EVERY steps on held-out
data drawn apart from training's (HELD_OUT_SEED + the run's seed):

- the training loss of every step, and a centred moving average of SMOOTH steps;
- the in-context learning score as the paper defines it (the loss late in the context minus the loss
  early in it, averaged over sequences; theirs: 500th token minus 50th) on ICL_SEQUENCES held-out
  sequences of the training distribution, with EARLY and LATE fitted to our 64 tokens (below);
- every head's induction and previous-token score (model/analysis/circuits.head_scores: SCORE_HALVES
  random sequences of HALF syllables, each repeated once), and what zeroing each head's output
  (hook_z, the engine's ablation) does to the in-context learning score (the paper's Figure 11);
- the loss at each position of the context (the paper's Figure 4 reads its derivative).

Then, by stated rules: the step where the induction heads form (the first measurement where the best
last-block induction score has risen half way from its start to its end), the step where the
in-context learning score does the same, and the step where the smoothed training loss falls fastest
(the bump), with the phase change's window (10% to 90% of the score's change). After training:
the in-context learning score with the induction heads zeroed, and with a control head zeroed.
Checkpoints (Glassbox model folders) at ~10 steps before, during and after the jump, and the last.

EARLY and LATE: a sequence's first span is random and only its repeats can be predicted from the
context. The span is 8 to 24 tokens after a lead of 0 to 10, so the first repeated token is at
position 8 at the earliest: the prediction made at position EARLY = 8 (of the 9th token's successor)
can use the context in 3 sequences in 187 (lead 0 and span 8 or 9, lead 1 and span 8), as the
paper's 50th token comes before most of what a long context offers; at LATE = 60, near the end of
the context, every sequence is in its repeats (they start by position 34).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from glassbox.model.analysis.circuits import head_scores, random_tokens
from glassbox.model.engine import Transformer, editing
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.lab.runs import save_checkpoint, write_run
from glassbox.model.micro import induction as micro
from glassbox.model.micro.common import fit

NAME = "induction"
STEPS, LIVE_STEPS = 2000, 600
EVERY = 25  # steps between measurements
EARLY, LATE = 8, 60  # positions (0-based) of the in-context learning score: loss[LATE] − loss[EARLY]
ICL_SEQUENCES = 256  # held-out sequences of the training distribution
SCORE_HALVES = 16  # held-out random sequences of micro.HALF syllables, each repeated once, for the head scores
SMOOTH = 25  # the training loss's moving average, in steps (centred)
WINDOW = (0.1, 0.9)  # the phase change: from 10% to 90% of the in-context learning score's change
HELD_OUT_SEED = 1_000_003  # the held-out data's seed is this + the run's; training's is the run's own
WARMUP = 50  # fit's default: the learning rate rises over the first 50 steps
PROMPT_HALF = 10  # the explorer's prompt: this many random syllables, repeated once
# The paper's numbers (Olsson et al. 2022, Argument 1, Figures 3, 5 and 6; Argument 3, Figure 11)
PAPER_ICL_BEFORE, PAPER_ICL_AFTER = -0.15, -0.4  # nats: "less than 0.15 nats" before, "roughly 0.4" after
PAPER_WINDOW_TOKENS = (2.5e9, 5e9)  # the phase change's window, in elapsed training tokens


def held_out(seed: int, vocab_size: int) -> dict:
    """The measurements' data, drawn apart from training's: ICL_SEQUENCES sequences of the training
    distribution (micro.sequences: inputs and targets as one row of T + 1 tokens), SCORE_HALVES
    random halves for the head scores, and the explorer's prompt (PROMPT_HALF syllables twice)."""
    generator = torch.Generator().manual_seed(HELD_OUT_SEED + seed)
    inputs, targets = micro.sequences(ICL_SEQUENCES, vocab_size, generator)
    rows = torch.cat([inputs, targets[:, -1:]], dim=1)
    rng = np.random.default_rng(HELD_OUT_SEED + seed)
    halves = [random_tokens(vocab_size, micro.HALF, rng) for _ in range(SCORE_HALVES)]
    prompt = random_tokens(vocab_size, PROMPT_HALF, rng)
    return {"icl_rows": rows.tolist(), "score_halves": halves, "prompt": prompt + prompt}


def position_losses(model: Transformer, rows: torch.Tensor, heads: tuple[tuple[int, int], ...] = ()) -> torch.Tensor:
    """The next-token loss at each position, averaged over ``rows`` (sequences of T + 1 tokens),
    with the output of each (block, head) in ``heads`` zeroed (its hook_z: the engine's ablation)."""
    with torch.no_grad(), editing(zeroing(heads)) if heads else nullcontext():
        logits = model(rows[:, :-1]).logits
    return F.cross_entropy(logits.transpose(1, 2), rows[:, 1:], reduction="none").mean(0)


def zeroing(heads: tuple[tuple[int, int], ...]) -> dict:
    """The edits that zero each (block, head)'s output, as model/analysis/ablation.py's zero ablation."""
    blocks: dict[int, list[int]] = {}
    for block, head in heads:
        blocks.setdefault(block, []).append(head)

    def zero(chosen: list[int]):
        def edit(z: torch.Tensor) -> torch.Tensor:  # batch × head × position × d_head
            out = z.clone()
            out[:, chosen] = 0.0
            return out

        return edit

    return {f"blocks.{block}.attn.hook_z": zero(chosen) for block, chosen in blocks.items()}


def icl_score(losses: torch.Tensor) -> float:
    """The paper's in-context learning score on our context: loss late minus loss early (nats)."""
    return float(losses[LATE] - losses[EARLY])


def all_heads(model: Transformer) -> list[tuple[int, int]]:
    return [(b, h) for b in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def measure(model: Transformer, data: dict) -> dict:
    """Everything measured at one step (the model in eval mode, no gradients)."""
    rows = torch.tensor(data["icl_rows"])
    losses = position_losses(model, rows)
    icl = icl_score(losses)
    scores = [head_scores(model, half) for half in data["score_halves"]]
    induction = np.mean([s[0] for s in scores], axis=0)
    previous = np.mean([s[1] for s in scores], axis=0)
    ablation = np.zeros_like(induction)
    for block, head in all_heads(model):
        ablation[block, head] = icl_score(position_losses(model, rows, ((block, head),))) - icl
    return {
        "held_out_loss": round(float(losses.mean()), 4),
        "icl": round(icl, 4),
        "position_loss": [round(float(v), 3) for v in losses],
        "induction": induction.round(4).tolist(),
        "previous": previous.round(4).tolist(),
        "ablation": ablation.round(4).tolist(),
    }


def smoothed(values: list[float], width: int = SMOOTH) -> np.ndarray:
    """The centred moving average over ``width`` steps (fewer at the ends)."""
    v = np.asarray(values, dtype=np.float64)
    half = width // 2
    sums = np.concatenate([[0.0], np.cumsum(v)])
    lo = np.clip(np.arange(len(v)) - half, 0, len(v))
    hi = np.clip(np.arange(len(v)) + half + 1, 0, len(v))
    return (sums[hi] - sums[lo]) / (hi - lo)


def crossing(steps: list[int], values: list[float], fraction: float) -> int:
    """The first step where ``values`` has gone ``fraction`` of the way from its first value to its
    last (either direction)."""
    v = np.asarray(values, dtype=np.float64)
    goal = v[0] + fraction * (v[-1] - v[0])
    passed = (v >= goal) if v[-1] >= v[0] else (v <= goal)
    return int(steps[int(np.argmax(passed))])


def jump(measured: dict, smooth: np.ndarray) -> dict:
    """When the phase change happens, by three stated rules, and its window."""
    steps = measured["step"]
    best = [max(m[-1]) for m in measured["induction"]]  # the best last-block induction score
    heads_step = crossing(steps, best, 0.5)
    icl_step = crossing(steps, measured["icl"], 0.5)
    after_warmup = np.arange(len(smooth)) >= min(WARMUP, len(smooth) - 1)
    slope = np.gradient(smooth) if len(smooth) > 1 else np.zeros(1)
    loss_step = int(np.argmin(np.where(after_warmup, slope, np.inf)))  # np.gradient at i: the fall around step i
    window = [crossing(steps, measured["icl"], f) for f in WINDOW]
    found = [heads_step, icl_step, loss_step]
    return {
        "heads_step": heads_step,
        "icl_step": icl_step,
        "loss_step": loss_step,
        "window": window,
        "max_gap": max(found) - min(found),
        "rules": {
            "heads_step": "the first measurement where the best last-block induction score has risen half way from its start to its end",
            "icl_step": "the first measurement where the in-context learning score has gone half way from its start to its end",
            "loss_step": f"the step (after the {WARMUP}-step warm-up) where the training loss's {SMOOTH}-step moving average "
            "falls fastest",
            "window": f"from {WINDOW[0]:.0%} to {WINDOW[1]:.0%} of the in-context learning score's change",
        },
    }


def nearest(steps: list[int], step: float) -> int:
    return min(steps, key=lambda s: (abs(s - step), s))


def checkpoint_steps(steps: list[int], found: dict) -> list[int]:
    """~10 measured steps: the start, the last before the window, a few during and after the jump,
    half way to the end, and the end."""
    j, (start, end) = found["heads_step"], found["window"]
    wanted = [0, start - EVERY, start, j - 2 * EVERY, j - EVERY, j, j + EVERY, j + 2 * EVERY, j + 4 * EVERY, end]
    wanted += [(end + steps[-1]) / 2, steps[-1]]
    return sorted({nearest(steps, s) for s in wanted})


def ablation_after(model: Transformer, data: dict, measured: dict) -> dict:
    """The trained model's in-context learning score, plain and with heads zeroed: the induction
    heads (last-block heads whose induction score is at least half the best's), the
    previous-token head (block 1's best previous-token score) and, as a control, the last-block
    head with the lowest induction score (where the induction heads are all of them: block 1's
    head with the lowest previous-token score)."""
    rows = torch.tensor(data["icl_rows"])
    induction, previous = np.asarray(measured["induction"][-1]), np.asarray(measured["previous"][-1])
    last = len(induction) - 1
    best = induction[last].max()
    heads = tuple((last, h) for h in range(induction.shape[1]) if induction[last, h] >= best / 2)
    prev = (0, int(previous[0].argmax()))
    others = [(last, h) for h in range(induction.shape[1]) if (last, h) not in heads]
    control = (
        min(others, key=lambda bh: induction[bh])
        if others
        else min(((0, h) for h in range(previous.shape[1]) if (0, h) != prev), key=lambda bh: previous[bh], default=prev)
    )

    def score(zeroed: tuple[tuple[int, int], ...]) -> float:
        return round(icl_score(position_losses(model, rows, zeroed)), 4)

    plain = score(())

    def entry(zeroed: tuple[tuple[int, int], ...]) -> dict:
        value = score(zeroed)
        return {
            "heads": [list(bh) for bh in zeroed],
            "icl": value,
            "removed": round((plain - value) / plain, 4) if plain else 0.0,
        }

    return {
        "icl": plain,
        "induction_heads": entry(heads),
        "previous_token_head": entry((prev,)),
        "control": entry((control,)),
        "each": [dict(entry(((b, h),)), block=b, head=h) for b, h in all_heads(model)],
    }


def about(tokenizer: Tokenizer, data: dict, steps: int, seed: int) -> dict:
    return {
        "source": f"trained by `glassbox lab induction` (seed {seed}) on random syllables with a repeated span",
        "sample_prompt": tokenizer.decode(data["prompt"]),
        "card": {
            "architecture": "two attention-only blocks of 2 heads, d_model 64, learned positions, context 64, no MLP",
            "data": f"{micro.T + 1} random syllables of 64: up to {micro.LEAD}, then a span of "
            f"{micro.SPAN[0]}–{micro.SPAN[1]} repeated to the end",
            "training": {"steps": steps, "batch": micro.BATCH, "optimizer": f"AdamW lr {micro.LR:g}"},
        },
    }


def train(out: Path, steps: int | None = None, seed: int = 0, live: bool = False, on_step=None) -> dict:
    """Train the micro induction model with measurements every EVERY steps; write run.json and
    the checkpoints into ``out``; return the figures. Deterministic for a seed (fit)."""
    steps = int(steps or (LIVE_STEPS if live else STEPS))
    torch.manual_seed(seed)
    out = Path(out)
    tokenizer = Tokenizer.from_words(micro.syllables())
    vocab = tokenizer.vocab_size
    model = Transformer(micro.config(vocab)).init_weights(seed)
    data = held_out(seed, vocab)
    measured: dict[str, list] = {"step": []}
    states: dict[int, dict] = {}

    def every(step: int, m: Transformer) -> dict:
        measured["step"].append(step)
        for key, value in measure(m, data).items():
            measured.setdefault(key, []).append(value)
        states[step] = {k: v.detach().clone() for k, v in m.state_dict().items()}
        return {}

    started = time.time()
    curve = fit(
        model,
        lambda gen: micro.sequences(micro.BATCH, vocab, gen),
        steps,
        micro.LR,
        seed,
        warmup=WARMUP,
        every=every,
        every_steps=EVERY,
        on_step=on_step,
    )
    seconds = round(time.time() - started, 1)
    smooth = smoothed(curve["loss"])
    found = jump(measured, smooth)
    ablation = ablation_after(model, data, measured)
    saved = checkpoint_steps(measured["step"], found)
    for step in saved:
        snapshot = Transformer(model.cfg)
        snapshot.load_state_dict(states[step])
        save_checkpoint(out, step, snapshot.eval(), tokenizer, about(tokenizer, data, steps, seed))
    tokens_per_step = micro.BATCH * micro.T
    figures = {
        "experiment": NAME,
        "steps": steps,
        "seed": seed,
        "live": live,
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "checkpoints": saved,
        "setup": {
            "vocab": vocab,
            "parameters": sum(p.numel() for p in model.parameters()),
            "context": micro.T,
            "batch": micro.BATCH,
            "lr": micro.LR,
            "warmup": WARMUP,
            "every": EVERY,
            "early": EARLY,
            "late": LATE,
            "icl_sequences": ICL_SEQUENCES,
            "score_halves": SCORE_HALVES,
            "half": micro.HALF,
            "smooth": SMOOTH,
            "tokens_per_step": tokens_per_step,
            "held_out_seed": HELD_OUT_SEED + seed,
        },
        "loss": [round(v, 4) for v in curve["loss"]],
        "smoothed_loss": smooth.round(4).tolist(),
        "measured": measured,
        "jump": found,
        "phase": phase(measured, smooth, found),
        "ablation": ablation,
        "held_out": data,
        "prompt": tokenizer.decode(data["prompt"]),
    }
    figures["comparison"] = compare(figures)
    write_run(out, figures)
    return figures


def phase(measured: dict, smooth: np.ndarray, found: dict) -> dict:
    """The in-context learning score, the best induction and previous-token scores and the
    smoothed loss just before the window (the last measurement before it) and at the end."""
    steps = measured["step"]
    start, end = found["window"]
    before = max(0, steps.index(start) - 1)

    def at(i: int) -> dict:
        return {
            "step": steps[i],
            "icl": measured["icl"][i],
            "induction": max(measured["induction"][i][-1]),
            "previous_token": max(measured["previous"][i][0]),
            "held_out_loss": measured["held_out_loss"][i],
            "smoothed_loss": round(float(smooth[min(steps[i], len(smooth) - 1)]), 4),
        }

    return {"before": at(before), "after": at(len(steps) - 1), "end_of_window": at(steps.index(end))}


def compare(figures: dict) -> list[dict]:
    """The paper's published numbers (Olsson et al. 2022) beside ours, with a word on each difference."""
    before, after, end = figures["phase"]["before"], figures["phase"]["after"], figures["phase"]["end_of_window"]
    found, setup = figures["jump"], figures["setup"]
    window, per_step = found["window"], setup["tokens_per_step"]
    ablation = figures["ablation"]
    alone = [e for e in ablation["each"] if e["heads"][0] in ablation["induction_heads"]["heads"]]
    fewer = math.log10(PAPER_WINDOW_TOKENS[0] / max(window[0] * per_step, 1))
    return [
        {
            "what": "in-context learning score before the phase change (Argument 1, Figure 3)",
            "paper": f"about {PAPER_ICL_BEFORE} nats (500th token minus 50th)",
            "ours": f"{before['icl']:+.2f} nats at step {before['step']} (position {LATE} minus {EARLY})",
            "note": f"small in both: the induction heads have not formed (our best induction score "
            f"{before['induction']:.2f}, as at step 0)",
        },
        {
            "what": "in-context learning score after it (Argument 1, Figures 3 and 11)",
            "paper": f"about {PAPER_ICL_AFTER} nats, then constant",
            "ours": f"{after['icl']:+.2f} nats at step {after['step']}",
            "note": f"same sign, {after['icl'] / PAPER_ICL_AFTER:.0f}× the size: our text is random syllables that "
            f"repeat exactly, so the first copy costs ln {setup['vocab']} ≈ {math.log(setup['vocab']):.1f} nats a token "
            "and a repeat almost nothing; natural text is partly predictable without its context and rarely repeats",
        },
        {
            "what": "when the phase change happens (Argument 1, Figures 3–6)",
            "paper": f"{PAPER_WINDOW_TOKENS[0]:.1e} to {PAPER_WINDOW_TOKENS[1]:.0e} tokens elapsed",
            "ours": f"steps {window[0]}–{window[1]} of {figures['steps']} ({window[0] * per_step:,} to "
            f"{window[1] * per_step:,} tokens)",
            "note": f"about {fewer:.0f} orders of magnitude sooner: a {setup['parameters']:,}-parameter model on a "
            "task where induction is all there is to learn; theirs learn much of language first",
        },
        {
            "what": "the loss bump, the heads and the score at the same time (Argument 1, Figures 5 and 6)",
            "paper": "one window: induction heads form, the in-context score jumps, the loss curve bumps",
            "ours": f"heads at step {found['heads_step']}, score at {found['icl_step']}, steepest loss fall at "
            f"{found['loss_step']} (within {found['max_gap']} steps; measured every {setup['every']}); smoothed loss "
            f"{before['smoothed_loss']:.2f} → {end['smoothed_loss']:.2f} across the window",
            "note": f"ours is a plateau near ln {setup['vocab']} then a cliff, not a small bump: on random syllables "
            "there is nothing else to learn, so the phase change is most of the loss curve",
        },
        {
            "what": "zeroing the induction heads (Argument 3, Figure 11)",
            "paper": "removes almost all in-context learning in small attention-only models",
            "ours": f"{ablation['icl']:+.2f} → {ablation['induction_heads']['icl']:+.2f} nats "
            f"({ablation['induction_heads']['removed']:.0%} removed); the control head: "
            f"{ablation['control']['icl']:+.2f} ({ablation['control']['removed']:.0%})",
            "note": "same finding. One at a time (as the paper ablates) each of our induction heads removes only "
            + " and ".join(f"{max(e['removed'], 0.0):.0%}" for e in alone)
            + ": they back each other up, the masking the paper warns of for marginal ablations",
        },
    ]


def named(heads: list[list[int]]) -> str:
    """Heads as the page writes them, 1-based: "block 2, head 1"."""
    return "; ".join(f"block {b + 1}, head {h + 1}" for b, h in heads)


def summary(figures: dict) -> list[str]:
    found, before, after, ablation = figures["jump"], figures["phase"]["before"], figures["phase"]["after"], figures["ablation"]
    return [
        f"{figures['steps']} steps, seed {figures['seed']}, {figures['seconds']} s on {figures['threads']} threads; "
        f"checkpoints at {', '.join(map(str, figures['checkpoints']))}",
        f"induction heads form at step {found['heads_step']}, the in-context score jumps at {found['icl_step']}, "
        f"the loss falls fastest at {found['loss_step']}; window {found['window'][0]}–{found['window'][1]}",
        f"in-context learning score (loss at position {LATE} minus {EARLY}): {before['icl']:+.3f} nats at step "
        f"{before['step']}, {after['icl']:+.3f} at the end",
        f"best induction score {before['induction']:.2f} → {after['induction']:.2f}; previous-token "
        f"{before['previous_token']:.2f} → {after['previous_token']:.2f}",
        f"zeroing the induction heads ({named(ablation['induction_heads']['heads'])}): {ablation['icl']:+.3f} → "
        f"{ablation['induction_heads']['icl']:+.3f} nats ({ablation['induction_heads']['removed']:.0%} removed); "
        f"the previous-token head ({named(ablation['previous_token_head']['heads'])}): "
        f"{ablation['previous_token_head']['icl']:+.3f}; the control ({named(ablation['control']['heads'])}): "
        f"{ablation['control']['icl']:+.3f}",
    ]
