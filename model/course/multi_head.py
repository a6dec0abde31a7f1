"""The lesson on many heads, on the course's model: (a) one block's queries computed as one product
x · W_Q ([batch, seq, d_model]) and reshaped to [batch, heads, seq, d_head], equal to the engine's
per-head q; (b) each head's attention pattern; (c) the heads' outputs z concatenated and
multiplied by W_O, equal to the sum over heads of z_h · W_O[h] (the reading the explorer uses) and
to the block's attention output; (d) the prediction with every head of the block but one zeroed,
and with one head zeroed (the engine's per-call edits of ``hook_z``: the shared model is not
touched). Arithmetic in float64 from the float32 weights and traced tensors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import GlassboxError, check_prompt, editing, run_trace
from glassbox.model.io.checkpoint import LoadedModel, load

PROMPT = "Lily had a cat. The cat was happy. Lily loved the"
TOP = 5  # next tokens shown per setting


@dataclass
class Split:
    """One block's attention on a prompt, worked as the course writes it (batch 1, dropped)."""

    x: np.ndarray  # (seq, d_model): the block's input to attention, after its first norm
    q_flat: np.ndarray  # (seq, d_model): x · W_Q + b_Q, every head's queries side by side
    q_heads: np.ndarray  # (heads, seq, d_head): q_flat viewed as (seq, heads, d_head), then transposed
    q_engine: np.ndarray  # (heads, seq, d_head): the engine's hook_q
    patterns: np.ndarray  # (heads, seq, seq)
    z: np.ndarray  # (heads, seq, d_head): each head's weighted values
    concat: np.ndarray  # (seq, heads · d_head): z transposed back and flattened
    out_concat: np.ndarray  # (seq, d_model): concat · W_O + b_O
    out_sum: np.ndarray  # (seq, d_model): Σ_h z_h · W_O[h] + b_O
    out_engine: np.ndarray  # (seq, d_model): the engine's hook_attn_out
    W_O: np.ndarray  # (heads · d_head, d_model): the heads' W_O[h] stacked

    @property
    def reshape_difference(self) -> float:
        return float(np.abs(self.q_heads - self.q_engine).max())

    @property
    def concat_difference(self) -> float:
        """The largest |concat · W_O − Σ_h z_h · W_O[h]|: the two readings of the output projection."""
        return float(np.abs(self.out_concat - self.out_sum).max())

    @property
    def engine_difference(self) -> float:
        return float(np.abs(self.out_concat - self.out_engine).max())


def stacked(W: torch.Tensor) -> torch.Tensor:
    """The engine's per-head (heads, d_model, d_head) weight as one (d_model, heads · d_head)
    matrix: head h's columns h·d_head … (h+1)·d_head − 1."""
    heads, d_model, d_head = W.shape
    return W.permute(1, 0, 2).reshape(d_model, heads * d_head)


def split_heads(loaded: LoadedModel, tokens: list[int], block: int) -> Split:
    cfg = loaded.cfg
    check_prompt(cfg, tokens)
    if not 0 <= block < cfg.n_layers:
        raise GlassboxError(f"Block {block} does not exist (0..{cfg.n_layers - 1})")
    a = f"blocks.{block}."
    trace = run_trace(
        loaded.model,
        tokens,
        names=[a + "ln1.hook_out", a + "attn.hook_q", a + "attn.hook_pattern", a + "attn.hook_z", a + "hook_attn_out"],
    )
    weights = {k: v.detach().double().cpu() for k, v in loaded.model.state_dict().items() if k.startswith(a + "attn.")}
    H, T, dh = cfg.n_heads, len(tokens), cfg.d_head
    x = trace[a + "ln1.hook_out"].double().cpu()
    bias_q = weights.get(a + "attn.b_Q", torch.zeros(H, dh)).reshape(H * dh)
    q_flat = x @ stacked(weights[a + "attn.W_Q"]) + bias_q
    q_heads = q_flat.view(T, H, dh).transpose(0, 1)  # the course's Q.view(B, T, h, d_k).transpose(1, 2)
    z = trace[a + "attn.hook_z"].double().cpu()
    concat = z.transpose(0, 1).reshape(T, H * dh)  # out.transpose(1, 2).view(B, T, d_model)
    W_O = weights[a + "attn.W_O"]  # (heads, d_head, d_model)
    b_O = weights.get(a + "attn.b_O", torch.zeros(cfg.d_model))
    return Split(
        x.numpy(),
        q_flat.numpy(),
        q_heads.numpy(),
        trace[a + "attn.hook_q"].double().cpu().numpy(),
        trace[a + "attn.hook_pattern"].double().cpu().numpy(),
        z.numpy(),
        concat.numpy(),
        (concat @ W_O.reshape(H * dh, -1) + b_O).numpy(),
        (sum(z[h] @ W_O[h] for h in range(H)) + b_O).numpy(),
        trace[a + "hook_attn_out"].double().cpu().numpy(),
        W_O.reshape(H * dh, -1).numpy(),
    )


def zeroing(block: int, heads: list[int]):
    """An edit of the block's hook_z (batch × head × position × d_head) that zeroes ``heads``."""

    def edit(z: torch.Tensor) -> torch.Tensor:
        out = z.clone()
        out[:, heads] = 0.0
        return out

    return {f"blocks.{block}.attn.hook_z": edit}


def next_token_probs(loaded: LoadedModel, tokens: list[int], block: int | None = None, zeroed: list[int] = ()) -> np.ndarray:
    """The next-token distribution at the last position, with ``zeroed`` heads of ``block`` zeroed
    (their z set to 0, so they write nothing but W_O's bias is still added)."""
    ids = torch.tensor([tokens], device=loaded.model.device)
    edits = zeroing(block, list(zeroed)) if zeroed else {}
    with torch.no_grad(), editing(edits):
        return loaded.model(ids, last_only=True).logits[0, -1].double().softmax(-1).cpu().numpy()


def top_tokens(probs: np.ndarray, tokenizer, k: int = TOP) -> list[dict]:
    """The ``k`` likeliest tokens, a byte fragment's text written as <0xNN>."""
    order = np.argsort(-probs, kind="stable")[:k]
    return [{"id": int(i), "token": tokenizer.readable(int(i)), "p": float(probs[i])} for i in order]


def head_effects(loaded: LoadedModel, tokens: list[int], block: int) -> list[dict]:
    """The prediction with the whole block, with each head alone (every other head of the block
    zeroed), and with each head zeroed: the top tokens and the probability of the whole model's
    top token in each setting."""
    check_prompt(loaded.cfg, tokens)
    heads = range(loaded.cfg.n_heads)
    full = next_token_probs(loaded, tokens)
    top = int(np.argmax(full))
    settings = [("all heads", None, [])]
    settings += [("alone", h, [g for g in heads if g != h]) for h in heads]
    settings += [("zeroed", h, [h]) for h in heads]
    rows = []
    for kind, head, zeroed in settings:
        probs = full if not zeroed else next_token_probs(loaded, tokens, block, zeroed)
        rows.append(
            {
                "kind": kind,
                "head": head,
                "zeroed": zeroed,
                "top": top_tokens(probs, loaded.tokenizer),
                "p_top": float(probs[top]),
                "top_id": top,
            }
        )
    return rows


def figures(loaded) -> dict:
    tokens = loaded.encode(PROMPT)
    block = 0
    split = split_heads(loaded, tokens, block)
    cfg = loaded.cfg
    return {
        "prompt": PROMPT,
        "block": block,
        "shapes": {
            "x": [1, len(tokens), cfg.d_model],
            "q": [1, len(tokens), cfg.d_model],
            "q_heads": [1, cfg.n_heads, len(tokens), cfg.d_head],
            "patterns": [1, cfg.n_heads, len(tokens), len(tokens)],
            "concat": [1, len(tokens), cfg.n_heads * cfg.d_head],
            "out": [1, len(tokens), cfg.d_model],
        },
        "last_q_by_head": split.q_heads[:, -1].tolist(),
        "reshape_difference": split.reshape_difference,
        "concat_difference": split.concat_difference,
        "engine_difference": split.engine_difference,
        "head_effects": head_effects(loaded, tokens, block),
    }


# stories' sentences cut before a word the model predicts: the last exercise's prompts
EXERCISE_PROMPTS = (
    "Lily had a cat. The cat was happy. Lily loved the",
    "Once upon a time, there was a boy named",
    'Sam met Mia at the beach. "Hello, Mia!" said',
    "Max lost his ball. Max looked in the",
    "The dog is scared today, said",
    "Mia and Zoe played with the dog all",
)


def exercises(seed: int, loaded=None) -> list[Exercise]:
    rng = draw("multi-head", seed)

    heads = int(rng.choice([2, 4, 8, 12, 16, 32]))
    d_head = int(rng.choice([32, 64, 80, 128]))
    d_model = heads * d_head
    width = Exercise(
        "d_head",
        f"A model has d_model = {d_model} and {heads} attention heads. How wide is each head (d_head)?",
        d_head,
        hint="The heads split d_model between them evenly.",
        solution=f"d_head = d_model / heads = {d_model} / {heads} = {d_head}.",
        data={"d_model": d_model, "heads": heads},
    )

    batch, seq = int(rng.integers(1, 9)), int(rng.choice([10, 16, 128, 512]))
    right = f"[{batch}, {heads}, {seq}, {d_head}]"
    options = [
        right,
        f"[{batch}, {seq}, {heads}, {d_head}]",
        f"[{batch}, {heads}, {d_head}, {seq}]",
        f"[{batch}, {seq}, {d_model}]",
    ]
    order = rng.permutation(len(options))
    shape = Exercise(
        "reshape",
        f"Queries of shape [batch, seq, d_model] = [{batch}, {seq}, {d_model}] are split into {heads} heads "
        "with Q.view(batch, seq, heads, d_head).transpose(1, 2). What is the shape after it?",
        right,
        choices=tuple(options[i] for i in order),
        hint="view splits the last axis into (heads, d_head); transpose(1, 2) swaps seq and heads.",
        solution=f"view gives [{batch}, {seq}, {heads}, {d_head}]; swapping axes 1 and 2 gives {right}: the heads "
        "become a batch axis, each with its own seq × d_head queries.",
        data={"batch": batch, "seq": seq, "d_model": d_model, "heads": heads},
    )

    bias = bool(rng.integers(0, 2))
    p_model = int(rng.choice([256, 512, 768, 1024, 2048, 4096]))
    count = 4 * p_model * p_model + (4 * p_model if bias else 0)
    with_bias = "with" if bias else "without"
    params = Exercise(
        "parameters",
        f"How many parameters do W_Q, W_K, W_V and W_O of one attention layer hold together, for "
        f"d_model = {p_model}, {with_bias} biases (b_Q, b_K, b_V, b_O)?",
        count,
        unit="parameters",
        hint="Each of the four is d_model × d_model in total, however it is split into heads; each bias has d_model entries.",
        solution=f"4 × {p_model}² = {4 * p_model * p_model:,}"
        + (f", plus 4 × {p_model} = {4 * p_model:,} for the biases: {count:,}" if bias else "")
        + ". Heads only cut the same matrices into slices.",
        data={"d_model": p_model, "bias": bias},
    )

    loaded = loaded or load("default")
    prompt, block, drops = most_needed_head(loaded, rng)
    best = int(np.argmax(drops))
    labels = tuple(f"head {h + 1}" for h in range(len(drops)))
    needed = Exercise(
        "needed_head",
        f"On the course's model, with the prompt “{prompt}”: zero one head of block {block + 1} at a "
        "time. Which head's removal lowers the probability of the model's top next token most?",
        labels[best],
        choices=labels,
        hint="Put the prompt in the box above, choose the block, and read “all heads but one”.",
        solution="The drop in the top token's probability, head by head: "
        + ", ".join(f"{labels[h]} {d:+.3f}" for h, d in enumerate(drops))
        + f". The largest: {labels[best]}.",
        data={"prompt": prompt, "block": block, "drops": [float(d) for d in drops]},
    )
    return [width, shape, params, needed]


def most_needed_head(loaded: LoadedModel, rng: np.random.Generator, margin: float = 0.01) -> tuple[str, int, list[float]]:
    """A prompt and block (drawn) where one head's removal lowers the top token's probability by at
    least ``margin`` more than any other's, so the answer is clear; with each head's drop."""
    pairs = [(p, b) for p in EXERCISE_PROMPTS for b in range(loaded.cfg.n_layers)]
    for i in rng.permutation(len(pairs)):
        prompt, block = pairs[i]
        tokens = loaded.encode(prompt)
        full = next_token_probs(loaded, tokens)
        top = int(np.argmax(full))
        drops = [float(full[top] - next_token_probs(loaded, tokens, block, [h])[top]) for h in range(loaded.cfg.n_heads)]
        ranked = sorted(drops, reverse=True)
        if ranked[0] - ranked[1] >= margin:
            return prompt, block, drops
    raise GlassboxError("No prompt of the exercise's list has one head clearly most needed")
