"""The lesson on the residual stream as a bus, on the bundled story model: every block reads the sum so
far and adds its own write. At a prompt's last position: the size of each writer's write (the
embeddings, each block's attention and MLP: analysis.residual's contribution norms), the last stream
rebuilt as the sum of the writes; the logit of the top token split into each writer's direct share
(analysis.dla, the explorer's direct logit attribution), summing to the logit; and the logit lens
after each block (analysis.residual.logit_lens)."""

from __future__ import annotations

import numpy as np
import torch

from glassbox.model.analysis.dla import direct_logit_attribution, part_words
from glassbox.model.analysis.residual import contribution_names, contribution_norms, logit_lens
from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.course.mlp import STORY_PROMPTS
from glassbox.model.engine import check_prompt, run_trace
from glassbox.model.io.checkpoint import LoadedModel, load

SLUG = "residual"
PROMPT = "Mia had a big red"
LENS_TOP = 5


def top_token(loaded: LoadedModel, tokens: list[int]) -> int:
    with torch.no_grad():
        return int(loaded.model(torch.tensor([tokens], device=loaded.model.device)).logits[0, -1].argmax())


def writes(loaded: LoadedModel, tokens: list[int]) -> dict:
    """At the last position: each writer's label and the norm of what it added; the last block's
    output (the stream the final norm reads) and the sum of every write, and their largest difference."""
    check_prompt(loaded.cfg, tokens)
    parts = contribution_names(loaded.cfg)
    end = f"blocks.{loaded.cfg.n_layers - 1}.hook_resid_post"
    trace = run_trace(loaded.model, tokens, names=[name for _, name in parts] + [end])
    labels, norms = contribution_norms(trace, loaded.cfg)
    total = sum(trace[name][-1].double() for _, name in parts)
    return {
        "labels": labels,
        "norms": norms[:, -1].tolist(),
        "sum_vs_stream": float((total - trace[end][-1].double()).abs().max()),
        "stream_norm": float(trace[end][-1].double().norm()),
    }


def writer_of(part: str) -> str:
    """The writer a DLA part belongs to: a head or the attention's bias to its block's attention."""
    if part in ("hook_embed", "hook_pos_embed"):
        return "embeddings"
    if part == "ln_final.b":
        return "final norm's β"
    block = int(part.split(".")[1])
    return f"block {block + 1} (blocks.{block}) " + ("MLP" if "mlp" in part else "attention")


def attribution(loaded: LoadedModel, tokens: list[int], token_id: int) -> dict:
    """The logit of ``token_id`` at the last position split into each part's direct share
    (analysis.dla), and grouped by writer (``writer_of``, in the order they write); the sum of
    the shares beside the model's own logit."""
    dla = direct_logit_attribution(loaded.model, tokens, token_id)
    writers: dict[str, float] = {}
    for name, value in zip(dla.names, dla.values):
        writers[writer_of(name)] = writers.get(writer_of(name), 0.0) + float(value)
    total = float(np.sum(dla.values))
    return {
        "token": token_id,
        "parts": [part_words(n) for n in dla.names],
        "names": dla.names,
        "values": dla.values.tolist(),
        "writers": list(writers),
        "writer_values": list(writers.values()),
        "sum": total,
        "logit": dla.logit,
        "difference": abs(total - dla.logit),
    }


def lens(loaded: LoadedModel, tokens: list[int], k: int = LENS_TOP) -> dict:
    """The logit lens at the last position after the embeddings and after every block: the top
    ``k`` tokens and their probabilities, and the final top token's probability at each point."""
    check_prompt(loaded.cfg, tokens)
    trace = run_trace(loaded.model, tokens, names=["blocks.*.hook_resid_pre", "blocks.*.hook_resid_post"])
    top = top_token(loaded, tokens)
    seen = logit_lens(loaded.model, trace, top, k, positions=[len(tokens) - 1])
    return {
        "labels": seen.labels,
        "top": top,
        "top_ids": seen.top_ids[:, 0].tolist(),
        "top_probs": seen.top_probs[:, 0].astype(float).tolist(),
        "p_top": seen.chosen[:, 0].astype(float).tolist(),
    }


def figures(loaded: LoadedModel | None = None) -> dict:
    loaded = loaded or load("default")
    tokens = loaded.encode(PROMPT)
    top = top_token(loaded, tokens)
    return {
        "prompt": PROMPT,
        "tokens": tokens,
        "top": top,
        "top_text": loaded.pieces[top],
        "d_model": loaded.cfg.d_model,
        "writes": writes(loaded, tokens),
        "attribution": attribution(loaded, tokens, top),
        "lens": lens(loaded, tokens),
    }


def exercises(seed: int, loaded: LoadedModel | None = None) -> list[Exercise]:
    loaded = loaded or load("default")
    rng = draw(SLUG, seed)
    prompt = str(rng.choice(STORY_PROMPTS))
    tokens = loaded.encode(prompt)
    top = top_token(loaded, tokens)
    seen = attribution(loaded, tokens, top)
    word = loaded.pieces[top]
    names, values = seen["writers"], seen["writer_values"]
    picked = sorted(rng.choice(len(names), size=3, replace=False).tolist())
    shown = [round(values[i], 3) for i in picked]
    total = round(sum(shown), 3)
    offered = sorted(rng.choice(len(names), size=4, replace=False).tolist())
    best = max(offered, key=lambda i: values[i])
    out = [
        Exercise(
            "sum",
            f"On “{prompt}”, three writers' direct shares of the logit of “{word}” are: "
            + "; ".join(f"{names[i]}: {v:.3f}" for i, v in zip(picked, shown))
            + ". What do they add up to? (3 decimals)",
            total,
            tolerance=2e-3,
            hint="The shares are added: the final norm, its scale held fixed, is linear.",
            solution=" + ".join(f"{v:.3f}" if v >= 0 else f"({v:.3f})" for v in shown) + f" = {total:.3f}.",
            data={"prompt": prompt, "writers": [names[i] for i in picked], "values": shown},
        ),
        Exercise(
            "largest",
            f"On “{prompt}” the story model predicts “{word}”. Of these four writers, which has the largest "
            "direct share of its logit?",
            names[best],
            choices=tuple(names[i] for i in offered),
            hint="The lesson's attribution chart, with this prompt in its box, gives each writer's share.",
            solution="; ".join(f"{names[i]}: {values[i]:.3f}" for i in offered) + f". The largest: {names[best]}.",
            data={"prompt": prompt, "top": top, "writers": [names[i] for i in offered], "values": [values[i] for i in offered]},
        ),
    ]
    d_model = int(rng.choice([128, 512, 768, 1024, 2048, 4096]))
    blocks = int(rng.integers(2, 49))
    out.append(
        Exercise(
            "width",
            f"A model has d_model = {d_model} and {blocks} blocks. How many numbers wide is the residual "
            f"stream at one position after block {blocks}?",
            d_model,
            unit="numbers",
            hint="Every block adds its write to the stream: a sum of vectors of one width.",
            solution=f"Each block reads the stream and adds a write of the same width, so after any number of blocks it "
            f"is still d_model = {d_model} wide.",
            data={"d_model": d_model, "blocks": blocks},
        )
    )
    return out
