"""The lesson on the MLP as keys and values, on the bundled story model: at a prompt's last position,
the neurons that fire most in each block (their post-activation, ``blocks.N.mlp.hook_post``);
what each one reads (its input direction, W_in's column, met by every token's embedding through the
block's own ln2) and what it writes (its output direction, W_out's row, through the final norm's γ
and the unembedding: the tokens it promotes and suppresses); and the prediction with each of them
removed (its post-activation zeroed at every position: the explorer's zero ablation)."""

from __future__ import annotations

import math

import numpy as np
import torch

from glassbox.model.analysis.ablation import ablate
from glassbox.model.analysis.architecture import require
from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import GlassboxError, block_label, check_prompt, run_trace
from glassbox.model.io.checkpoint import LoadedModel, load

SLUG = "mlp"
PROMPT = "Sam was very"
TOP_NEURONS = 4  # per block: the neurons that fire most at the last position
CLEAR = 0.002  # the which-neuron exercise asks where the best removal beats the next by this much
TOP_TOKENS = 5  # per neuron: the tokens it reads most, promotes most, suppresses most
# sentence starts of the story model's own kind, for the exercises (and the residual lesson's)
STORY_PROMPTS = (
    "Sam was very",
    "Mia had a big red",
    "Zoe loved her",
    "The dog ran to the",
    "Lily went to the park. She saw a",
    "Tom gave the hat to",
    "Tom lived in a little house near the",
)


def plain_mlp(cfg) -> None:
    """The lesson reads a dense, ungated MLP in every block (W_in, an activation, W_out): say so elsewhere."""
    require(cfg, mlp=True)
    if cfg.gated_mlp or any(cfg.is_moe(b) for b in range(cfg.n_layers)):
        raise GlassboxError(
            "This lesson reads a plain MLP in every block (x·W_in, an activation, W_out); this model's "
            "MLPs are gated or route to experts (the moe lesson)"
        )


def firing(loaded: LoadedModel, tokens: list[int], k: int = TOP_NEURONS) -> list[dict]:
    """Per block, the ``k`` neurons with the largest post-activation at the last position (ties in
    index order): block, neuron, pre- and post-activation."""
    check_prompt(loaded.cfg, tokens)
    plain_mlp(loaded.cfg)
    trace = run_trace(loaded.model, tokens, names=["blocks.*.mlp.hook_pre", "blocks.*.mlp.hook_post"])
    rows = []
    for b in range(loaded.cfg.n_layers):
        pre, post = (trace[f"blocks.{b}.mlp.{name}"][-1].double() for name in ("hook_pre", "hook_post"))
        for n in post.argsort(descending=True, stable=True)[:k].tolist():
            rows.append({"block": b, "neuron": n, "pre": float(pre[n]), "post": float(post[n])})
    return rows


@torch.no_grad()
def reads(loaded: LoadedModel, block: int, neuron: int, k: int = TOP_TOKENS) -> list[dict]:
    """What the neuron reads: each token's embedding alone (W_E's row, no position, no earlier block)
    put through the block's ln2 (its γ and β), then W_in's column and b_in: the pre-activation that
    token alone would give. The ``k`` tokens that excite it most."""
    mlp, ln2 = loaded.model.blocks[block].mlp, loaded.model.blocks[block].ln2
    pre = (ln2(loaded.model.embed.W_E) @ mlp.W_in[:, neuron]).double()
    pre = pre + float(mlp.b_in[neuron]) if loaded.cfg.mlp_bias else pre
    return [{"token": int(t), "pre": float(pre[t])} for t in pre.argsort(descending=True, stable=True)[:k]]


@torch.no_grad()
def write_direction(loaded: LoadedModel, block: int, neuron: int) -> np.ndarray:
    """What one unit of the neuron's activation adds to every logit: W_out's row, centred and times the
    final norm's γ (the final LayerNorm, but for its positive scale at a position, which ranks tokens
    alike), then W_U. (vocab,)"""
    w = loaded.model.blocks[block].mlp.W_out[neuron].double()
    final = loaded.model.ln_final
    if loaded.cfg.norm == "layernorm":
        w = w - w.mean()
    w = w * final.w.double()
    return (w @ loaded.model.W_U.double()).numpy()


def writes(loaded: LoadedModel, block: int, neuron: int, k: int = TOP_TOKENS) -> dict:
    """The ``k`` tokens the neuron's output direction promotes most and suppresses most."""
    direction = write_direction(loaded, block, neuron)
    order = np.argsort(-direction, kind="stable")
    pick = lambda ids: [{"token": int(t), "logit": float(direction[t])} for t in ids]  # noqa: E731
    return {"promotes": pick(order[:k]), "suppresses": pick(order[::-1][:k])}


def removed(loaded: LoadedModel, tokens: list[int], block: int, neuron: int) -> dict:
    """The next-token distribution with the neuron's post-activation zeroed at every position
    (analysis.ablation): the top token before, its probability before and after, the top token after,
    and KL(before ‖ after) in nats."""
    effect = ablate(loaded.model, tokens, block, neuron=neuron, mode="zero")
    top, top_after = int(np.argmax(effect.before)), int(np.argmax(effect.after))
    return {
        "block": block,
        "neuron": neuron,
        "top": top,
        "p_before": float(effect.before[top]),
        "p_after": float(effect.after[top]),
        "top_after": top_after,
        "p_top_after": float(effect.after[top_after]),
        "kl": effect.kl,
        "before": effect.before,
        "after": effect.after,
    }


def neuron_table(loaded: LoadedModel, prompt: str, k: int = TOP_NEURONS) -> list[dict]:
    """``firing`` with, for each neuron, what it reads, what it writes and its removal."""
    tokens = loaded.encode(prompt)
    rows = firing(loaded, tokens, k)
    for row in rows:
        row["reads"] = reads(loaded, row["block"], row["neuron"])
        row |= writes(loaded, row["block"], row["neuron"])
        row["removed"] = {
            key: value
            for key, value in removed(loaded, tokens, row["block"], row["neuron"]).items()
            if key not in ("before", "after")
        }
    return rows


def figures(loaded: LoadedModel | None = None) -> dict:
    loaded = loaded or load("default")
    tokens = loaded.encode(PROMPT)
    word = lambda t: loaded.pieces[t]  # noqa: E731
    rows = neuron_table(loaded, PROMPT)
    for row in rows:
        for key in ("reads", "promotes", "suppresses"):
            row[key] = [{**x, "text": word(x["token"])} for x in row[key]]
    return {
        "prompt": PROMPT,
        "tokens": tokens,
        "d_model": loaded.cfg.d_model,
        "d_ff": loaded.cfg.d_ff,
        "activation": loaded.cfg.activation,
        "neurons": rows,
        "reads_as": "the token's embedding alone through the block's ln2, times W_in's column, plus b_in",
        "writes_as": "W_out's row, centred, times the final norm's γ, times W_U",
        "removed_as": "the neuron's post-activation zeroed at every position",
    }


def mlp_parameters(d_model: int, d_ff: int, bias: bool = True) -> int:
    """W_in (d_model × d_ff) and W_out (d_ff × d_model), with b_in (d_ff) and b_out (d_model)."""
    return 2 * d_model * d_ff + (d_ff + d_model if bias else 0)


def gelu(x: float) -> float:
    """GELU's exact form, x·Φ(x), Φ the standard normal's distribution function."""
    return x * 0.5 * (1 + math.erf(x / math.sqrt(2)))


def exercises(seed: int, loaded: LoadedModel | None = None) -> list[Exercise]:
    loaded = loaded or load("default")
    rng = draw(SLUG, seed)
    out = [_which_neuron(loaded, str(rng.choice(STORY_PROMPTS)), [int(b) for b in rng.permutation(loaded.cfg.n_layers)])]
    d_model = int(rng.choice([64, 128, 256, 512, 768, 1024]))
    d_ff = 4 * d_model if rng.random() < 0.5 else int(rng.choice([2, 3, 8])) * d_model
    count = mlp_parameters(d_model, d_ff)
    out.append(
        Exercise(
            "parameters",
            f"An MLP with biases has d_model = {d_model} and d_ff = {d_ff}. How many parameters does it "
            "have (W_in, b_in, W_out, b_out)?",
            count,
            unit="parameters",
            hint="W_in is d_model × d_ff, W_out is d_ff × d_model; the biases have d_ff and d_model entries.",
            solution=f"2 × {d_model} × {d_ff} + {d_ff} + {d_model} = {count:,}.",
            data={"d_model": d_model, "d_ff": d_ff},
        )
    )
    x = round(float(rng.uniform(-2.5, 2.5)), 1)
    value = gelu(x)
    out.append(
        Exercise(
            "gelu",
            f"What is GELU({x}) = x·Φ(x), Φ the standard normal's distribution function? (ReLU({x}) is "
            f"{max(x, 0.0):g}.) Answer to 3 decimals.",
            round(value, 6),
            tolerance=1e-3,
            hint="Φ(x) = (1 + erf(x/√2))/2; Φ(0) = 0.5, Φ(1) ≈ 0.841, Φ(−1) ≈ 0.159.",
            solution=f"Φ({x}) = {0.5 * (1 + math.erf(x / math.sqrt(2))):.4f}, so GELU({x}) = {x} × that = {value:.4f}.",
            data={"x": x},
        )
    )
    return out


def _which_neuron(loaded: LoadedModel, prompt: str, blocks: list[int]) -> Exercise:
    """Which of a block's most active neurons, removed, lowers the top prediction's probability most:
    the first of ``blocks`` where the best is clear (ahead of the next by CLEAR), else the first."""
    tokens = loaded.encode(prompt)
    active = firing(loaded, tokens)
    for block in blocks:
        neurons = [r["neuron"] for r in active if r["block"] == block]
        effects = [removed(loaded, tokens, block, n) for n in neurons]
        drops = sorted(e["p_before"] - e["p_after"] for e in effects)
        if drops[-1] - drops[-2] > CLEAR:
            break
    else:
        block = blocks[0]
        neurons = [r["neuron"] for r in active if r["block"] == block]
        effects = [removed(loaded, tokens, block, n) for n in neurons]
    top = effects[0]["top"]
    labels = [f"neuron {n}" for n in neurons]
    best = int(np.argmin([e["p_after"] for e in effects]))
    word = loaded.pieces[top]
    return Exercise(
        "which_neuron",
        f"On the prompt “{prompt}” the story model predicts “{word}” (p = {effects[0]['p_before']:.3f}). "
        f"Of the four neurons that fire most in {block_label(block)} at the last position, which one, removed (its "
        "activation zeroed at every position), lowers that probability most (or raises it least)?",
        labels[best],
        choices=tuple(labels),
        hint="Type the prompt in the lesson's box: its table removes each of these neurons and gives p after.",
        solution="p(“"
        + word
        + "”) after removing "
        + "; ".join(f"{label}: {e['p_after']:.4f}" for label, e in zip(labels, effects))
        + f". The lowest is {labels[best]}'s.",
        data={
            "prompt": prompt,
            "block": block,
            "neurons": neurons,
            "top": top,
            "p_before": effects[0]["p_before"],
            "p_after": [e["p_after"] for e in effects],
        },
    )
