"""The lesson on the KV cache: (a) generation on the bundled model, each step adding one row of keys and
values per layer to the engine's KVCache while computing one new query; (b) the size formula with
the model's numbers beside the cache's measured bytes; (c) real models' caches (the course's table,
recomputed); (d) serving arithmetic: users × cache + weights against GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.course.real_model_configs import BYTES, MODEL, count, kv_bytes_per_token
from glassbox.model.engine import GlassboxError, KVCache, check_context, check_prompt
from glassbox.model.engine.sampling import kv_cache_bytes

PROMPT = "the cat sat on the"
GB = 10**9  # the course's GB, and GPU makers': 10^9 bytes (a GiB is 2^30)

# The course's table of cache sizes (fp16): model, tokens, the size it prints. It multiplies by
# d_model, as if every model had as many key/value heads as query heads.
COURSE_TABLE = [
    ("GPT-2 small", 1024, "36 MB"),
    ("GPT-3 175B", 2048, "9.4 GB"),
    ("Llama-2-70B", 4096, "10.5 GB"),
    ("Llama-3-70B", 128_000, "~328 GB"),
]


@dataclass
class CacheStep:
    """The cache after one pass: what it holds and what the pass computed."""

    token_id: int  # the token this pass fed (the prompt's last for the first pass)
    fed: int  # how many tokens the pass fed: the whole prompt first, then one
    cached: int  # positions in the cache afterwards
    key_shapes: list[tuple[int, ...]]  # per layer: (batch, key/value heads, positions, d_head)
    query_shape: tuple[int, ...]  # (batch, heads, new positions, d_head)
    measured_bytes: int  # the cache tensors' bytes
    formula_bytes: int  # 2 × layers × positions × key/value heads × d_head × bytes
    next_id: int  # the greedy next token


def grow(loaded, tokens: list[int], new_tokens: int) -> list[CacheStep]:
    """Feed the prompt once, then ``new_tokens`` greedy tokens one at a time, as generation does."""
    check_prompt(loaded.cfg, tokens)
    if new_tokens < 0:
        raise GlassboxError("Generate zero or more tokens")
    check_context(loaded.cfg, len(tokens), new_tokens + 1)
    model, cfg = loaded.model, loaded.cfg
    cache, steps, feed = KVCache(cfg.n_layers), [], tokens
    with torch.no_grad():
        for _ in range(new_tokens + 1):
            logits = model(torch.tensor([feed], device=model.device), cache=cache, last_only=True).logits[0, -1]
            steps.append(
                CacheStep(
                    feed[-1],
                    len(feed),
                    cache.length,
                    [tuple(k.shape) for k in cache.keys],
                    (1, cfg.n_heads, len(feed), cfg.d_head),
                    cache.nbytes(),
                    kv_cache_bytes(loaded, cache.length),
                    int(logits.argmax()),
                )
            )
            feed = [steps[-1].next_id]
    return steps


def within_context(model: str, tokens: int) -> int:
    """``tokens`` clamped to the catalogued model's context: no cache holds more (GPT-2's is 1,024)."""
    return min(tokens, MODEL[model].shape.context)


def cache_bytes(model: str, tokens: int, dtype: str = "fp16", kv_heads: int | None = None) -> int:
    """A catalogued model's cache for one sequence of ``tokens`` (kv_heads: as if it had that many)."""
    return tokens * kv_bytes_per_token(MODEL[model].shape, dtype, kv_heads)


def course_table() -> list[dict]:
    rows = []
    for name, tokens, printed in COURSE_TABLE:
        s = MODEL[name].shape
        rows.append(
            {
                "model": name,
                "tokens": tokens,
                "kv_heads": s.kv_heads,
                "bytes": cache_bytes(name, tokens),
                "bytes_as_if_every_head": cache_bytes(name, tokens, kv_heads=s.heads),
                "course_prints": printed,
            }
        )
    return rows


@dataclass(frozen=True)
class Serving:
    """The course's serving question: can ``gpus`` GPUs of ``gpu_gb`` hold ``users`` caches and the weights?"""

    model: str = "Llama-3-70B"
    users: int = 100
    context: int = 32_768
    gpus: int = 8
    gpu_gb: float = 80
    gqa: bool = False  # the model's own 8 key/value heads, rather than one per query head
    int8: bool = False  # the cache in one byte per number, rather than fp16's two
    paged_tokens: int | None = None  # paged allocation: the tokens a request actually holds, on average
    tensor_parallel: bool = False  # the weights split across the GPUs, rather than a whole copy on each

    def per_user(self) -> int:
        s = MODEL[self.model].shape
        tokens = self.context if self.paged_tokens is None else min(self.paged_tokens, self.context)
        return cache_bytes(self.model, tokens, "int8" if self.int8 else "fp16", None if self.gqa else s.heads)

    def weights(self) -> int:
        return count(MODEL[self.model].shape)[0] * BYTES["fp16"]

    def result(self) -> dict:
        """Memory needed (every user's cache and one copy of the weights) against the GPUs' memory.
        The weights must also be placed: without tensor parallelism each GPU needs a whole copy,
        which a 70B model in fp16 (141 GB) cannot have on an 80 GB GPU."""
        memory = int(self.gpus * self.gpu_gb * GB)
        caches, weights = self.users * self.per_user(), self.weights()
        placeable = self.tensor_parallel or weights <= self.gpu_gb * GB
        need = caches + weights
        return {
            "per_user_bytes": self.per_user(),
            "caches_bytes": caches,
            "weights_bytes": weights,
            "memory_bytes": memory,
            "need_bytes": need,
            "times_over": need / memory,
            "weights_placeable": placeable,
            "fits": placeable and need <= memory,
            "users_that_fit": max((memory - weights) // self.per_user(), 0) if placeable else 0,
        }


def serving_combinations() -> list[dict]:
    """The course's remedies added one at a time, from none to all four."""
    steps = [
        ("none", {}),
        ("+ GQA", {"gqa": True}),
        ("+ int8 cache", {"int8": True}),
        ("+ paged (4,096 tokens used on average)", {"paged_tokens": 4096}),
        ("+ tensor parallelism", {"tensor_parallel": True}),
    ]
    settings, rows = {}, []
    for label, change in steps:
        settings.update(change)
        rows.append({"switches": label, **Serving(**settings).result()})
    return rows


def figures(loaded) -> dict:
    steps = grow(loaded, loaded.encode(PROMPT), 4)
    return {
        "generation": {
            "prompt": PROMPT,
            "steps": [
                {
                    "fed": s.fed,
                    "cached": s.cached,
                    "key_shape_per_layer": list(s.key_shapes[0]),
                    "query_shape": list(s.query_shape),
                    "measured_bytes": s.measured_bytes,
                    "formula_bytes": s.formula_bytes,
                    "next": loaded.pieces[s.next_id],
                }
                for s in steps
            ],
        },
        "bytes_per_token_fp16": {m: kv_bytes_per_token(MODEL[m].shape) for m in MODEL},
        "course_table": course_table(),
        "serving": serving_combinations(),
    }


# --- exercises ------------------------------------------------------------------------------


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """A real model's KV cache at a length and number format, the tokens a memory budget holds, and
    what grouped-query attention saves (real configurations; ``loaded`` is not used)."""
    rng = draw("kv-cache", seed)
    # every layer keeps every token (no sliding-window layers, which keep only their window: Gemma 3)
    full = [m for m in MODEL if "layer_types" not in MODEL[m].config]

    name = str(rng.choice(full))
    s = MODEL[name].shape
    dtype = str(rng.choice(["fp32", "fp16", "bf16", "int8"]))
    tokens = within_context(name, int(rng.choice([512, 1024, 2048, 4096, 8192, 32_768])))
    size = cache_bytes(name, tokens, dtype)
    about = (
        f"{name} has {s.layers} layers, {s.kv_heads} key/value heads per layer and d_head = {s.d_head}; "
        f"its cache holds {dtype} numbers ({BYTES[dtype]} bytes each)."
    )
    size_ex = Exercise(
        "cache_mb",
        f"{about} How large is the KV cache of one sequence of {tokens:,} tokens, in MB (10^6 bytes)? "
        "Answer to 3 significant figures.",
        size / 10**6,
        tolerance=0.005,
        relative=True,
        unit="MB",
        hint="Each token keeps a key and a value (2) in every layer, for every key/value head, d_head numbers each.",
        solution=f"2 × {s.layers} × {s.kv_heads} × {s.d_head} × {BYTES[dtype]} bytes = "
        f"{kv_bytes_per_token(s, dtype):,} bytes per token; × {tokens:,} tokens = {size:,} bytes = "
        f"{size / 10**6:,.4g} MB.",
        data={
            "model": name,
            "layers": s.layers,
            "kv_heads": s.kv_heads,
            "d_head": s.d_head,
            "dtype": dtype,
            "bytes_per_number": BYTES[dtype],
            "tokens": tokens,
        },
    )

    name = str(rng.choice(full))
    s = MODEL[name].shape
    budget_gb = int(rng.choice([1, 2, 4, 8, 16, 40]))
    per_token = kv_bytes_per_token(s)
    fit = budget_gb * GB // per_token
    fit_ex = Exercise(
        "tokens_fit",
        f"{name} has {s.layers} layers, {s.kv_heads} key/value heads per layer and d_head = {s.d_head}. "
        f"How many tokens of fp16 KV cache (2 bytes a number) fit in {budget_gb} GB (10^9 bytes)? A whole number.",
        fit,
        unit="tokens",
        hint="Work out the bytes one token keeps, then how many whole tokens fit in the budget.",
        solution=f"2 × {s.layers} × {s.kv_heads} × {s.d_head} × 2 = {per_token:,} bytes per token; {budget_gb} × 10^9 / "
        f"{per_token:,} = {budget_gb * GB / per_token:,.2f}: {fit:,} whole tokens.",
        data={"model": name, "layers": s.layers, "kv_heads": s.kv_heads, "d_head": s.d_head, "budget_gb": budget_gb},
    )

    grouped = [m for m in MODEL if MODEL[m].shape.kv_heads < MODEL[m].shape.heads]
    name = str(rng.choice(grouped))
    s = MODEL[name].shape
    saving = s.heads / s.kv_heads
    gqa_ex = Exercise(
        "gqa_saving",
        f"{name} has {s.heads} query heads sharing {s.kv_heads} key/value heads per layer (grouped-query "
        "attention). How many times larger would its KV cache be with one key/value head per query head?",
        saving,
        hint="The cache grows with the number of key/value heads; nothing else changes.",
        solution=f"{s.heads} / {s.kv_heads} = {saving:g} times: {kv_bytes_per_token(s, kv_heads=s.heads):,} bytes per "
        f"token (fp16) instead of {kv_bytes_per_token(s):,}.",
        data={"model": name, "heads": s.heads, "kv_heads": s.kv_heads},
    )
    return [size_ex, fit_ex, gqa_ex]
