"""The efficiency lesson: four ways to attend for less memory or less work, each computed here on
one head's q, k and v from the bundled model (a story read by block b, head h; float64):
(a) flash attention's tiling, block by block, with an online softmax (a running max and sum per
query row), equal to plain attention while it holds one tile of scores instead of T × T;
(b) sliding-window attention's mask (the engine's own) and the scores it computes against full
causal attention; (c) ring attention over N simulated devices, each keeping its block of queries
while the key/value blocks travel round the ring, again equal to plain attention; (d) grouped-query
attention's KV cache per token (the KV lesson's real-model shapes and byte count)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.course.real_model_configs import BYTES, MODEL, MODELS, kv_bytes_per_token
from glassbox.model.engine import run_trace
from glassbox.model.engine.components.attention import hidden_keys

SLUG = "efficiency"
STORIES_SEED = 7  # the story the head reads: stories from the bundled corpus, cut to the model's context
GQA_MODELS = [m.name for m in MODELS if m.shape.kv_heads < m.shape.heads]  # those that share key/value heads
CPU = torch.device("cpu")


def story_prompt(loaded) -> list[int]:
    """Bundled stories, one after another, cut to the model's context: a long prompt, so the tiles
    are many."""
    from glassbox.model.data.stories import corpus

    end = loaded.tokenizer.token_id("<|endoftext|>")
    tokens: list[int] = []
    for story in corpus(20, STORIES_SEED):
        tokens += loaded.tokenizer.encode(story) + [end]
        if len(tokens) >= loaded.cfg.n_ctx:
            break
    return tokens[: loaded.cfg.n_ctx]


def head_qkv(loaded, tokens: list[int], block: int, head: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block ``block``'s head ``head``: its queries, keys and values (T × d_head each, float64),
    captured by the engine (keys and values of the key/value head the query head reads)."""
    names = [f"blocks.{block}.attn.hook_{x}" for x in "qkv"]
    trace = run_trace(loaded.model, tokens, names=names)
    kv_head = head // (loaded.cfg.n_heads // loaded.cfg.n_kv_heads)
    q, k, v = (trace[n] for n in names)
    return q[head].double().cpu(), k[kv_head].double().cpu(), v[kv_head].double().cpu()


def causal_hidden(queries: range, keys: range) -> torch.Tensor:
    """True where a key comes after its query: the causal mask of a tile (absolute positions)."""
    return torch.tensor(list(keys))[None, :] > torch.tensor(list(queries))[:, None]


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """softmax(q·kᵀ/√d, causal (and windowed) mask)·v with the whole T × T score matrix at once."""
    T = q.shape[0]
    scores = q @ k.T / math.sqrt(q.shape[1])
    return scores.masked_fill(hidden_keys(0, T, True, window, CPU), -math.inf).softmax(-1) @ v


@dataclass
class Running:
    """What online softmax keeps per query row while the key blocks go by: the largest score seen
    (m), the sum of exp(score − m) so far (l), and the values weighted by those exponentials (acc)."""

    m: torch.Tensor
    l: torch.Tensor  # noqa: E741 (the flash-attention papers' name)
    acc: torch.Tensor
    history: list[dict] = field(default_factory=list)  # after each key block: its range, m and l

    @classmethod
    def start(cls, rows: int, d: int) -> Running:
        return cls(
            torch.full((rows,), -math.inf, dtype=torch.float64),
            torch.zeros(rows, dtype=torch.float64),
            torch.zeros(rows, d, dtype=torch.float64),
        )

    def fold(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hidden: torch.Tensor, keys: range) -> torch.Tensor:
        """Take in one block of keys and values; returns the tile of scores it computed. The old sum
        and accumulator were counted against the old max: multiply them by exp(old max − new max)."""
        scores = (q @ k.T / math.sqrt(q.shape[1])).masked_fill(hidden, -math.inf)
        m = torch.maximum(self.m, scores.amax(-1))
        shift = torch.where(torch.isinf(m), 0.0, m)  # a row that has seen no key yet stays empty
        weights = torch.exp(scores - shift[:, None])
        rescale = torch.exp(self.m - shift)
        self.l = self.l * rescale + weights.sum(-1)
        self.acc = self.acc * rescale[:, None] + weights @ v
        self.m = m
        self.history.append({"keys": [keys.start, keys.stop], "m": m.tolist(), "l": self.l.tolist()})
        return scores

    def output(self) -> torch.Tensor:
        return self.acc / self.l[:, None]


def blocks(T: int, size: int) -> list[range]:
    return [range(s, min(s + size, T)) for s in range(0, T, size)]


@dataclass
class Flash:
    out: torch.Tensor
    tiles: list[dict]  # every (query block, key block) in order: computed, or skipped as wholly in the future
    held: int  # the most elements held at once: Q tile, K and V tiles, score tile, accumulator, m and l
    scores_computed: int  # score entries computed, tile by tile (a diagonal tile's hidden half included)
    histories: list[list[dict]]  # per query block, its running max and sum after each key block


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_q: int, block_k: int) -> Flash:
    """Causal attention a tile at a time: for each block of ``block_q`` queries, the key/value blocks
    of ``block_k`` in order, each folded into the running softmax; the tiles wholly after the
    queries skipped. The T × T score matrix never exists; what is held is counted from the tensors."""
    T, outs, tiles, held, computed, histories = q.shape[0], [], [], 0, 0, []
    for qi, queries in enumerate(blocks(T, block_q)):
        q_tile = q[queries.start : queries.stop]
        state = Running.start(len(queries), q.shape[1])
        for ki, keys in enumerate(blocks(T, block_k)):
            if keys.start > queries.stop - 1:  # every key after every query: nothing to see
                tiles.append({"query_block": qi, "key_block": ki, "computed": False})
                continue
            k_tile, v_tile = k[keys.start : keys.stop], v[keys.start : keys.stop]
            scores = state.fold(q_tile, k_tile, v_tile, causal_hidden(queries, keys), keys)
            held = max(held, sum(x.numel() for x in (q_tile, k_tile, v_tile, scores, state.acc, state.m, state.l)))
            computed += scores.numel()
            tiles.append({"query_block": qi, "key_block": ki, "computed": True})
        outs.append(state.output())
        histories.append(state.history)
    return Flash(torch.cat(outs), tiles, held, computed, histories)


def flash_held_formula(T: int, d: int, block_q: int, block_k: int) -> int:
    """The closed form of Flash.held: Bq·d (queries) + 2·Bk·d (keys, values) + Bq·Bk (scores)
    + Bq·d (accumulator) + 2·Bq (max and sum), each block no longer than the sequence."""
    bq, bk = min(block_q, T), min(block_k, T)
    return 2 * bq * d + 2 * bk * d + bq * bk + 2 * bq


def plain_held(T: int, d: int) -> int:
    """Plain attention's: q, k, v and the output (4·T·d) and the T × T scores, all at once."""
    return 4 * T * d + T * T


def window_mask(T: int, window: int | None) -> torch.Tensor:
    """Which keys each query sees (True: seen): the engine's own mask, causal and windowed."""
    return ~hidden_keys(0, T, True, window, CPU)


def causal_scores(T: int) -> int:
    return T * (T + 1) // 2


def window_scores(T: int, window: int) -> int:
    """Scores a sliding window of ``window`` computes over T positions: query i sees min(i + 1, w)
    keys, so w(w + 1)/2 for the first w queries and w for each of the T − w after them."""
    if T <= window:
        return causal_scores(T)
    return window * (window + 1) // 2 + (T - window) * window


@dataclass
class Ring:
    out: torch.Tensor
    steps: list[list[dict]]  # per step, per device: the key/value block it holds and whether it used it
    per_device_held: int  # the most elements one device holds at once
    sent: int  # elements passed round the ring in all (each step, every device sends its K and V block)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, devices: int) -> Ring:
    """N devices, device i holding queries, keys and values of block i. At step s it holds the
    key/value block (i − s) mod N, folds it in (unless every key is after every query of its own
    block) and passes it on to device i + 1. After N steps every device has seen every block."""
    T = q.shape[0]
    parts = [range(int(p[0]), int(p[-1]) + 1) for p in torch.arange(T).tensor_split(devices)]
    states = [Running.start(len(p), q.shape[1]) for p in parts]
    steps, held, sent = [], 0, 0
    for s in range(devices):
        row = []
        for i, queries in enumerate(parts):
            j = (i - s) % devices
            keys = parts[j]
            used = keys.start <= queries.stop - 1
            if used:
                scores = states[i].fold(
                    q[queries.start : queries.stop],
                    k[keys.start : keys.stop],
                    v[keys.start : keys.stop],
                    causal_hidden(queries, keys),
                    keys,
                )
                held = max(
                    held,
                    len(queries) * q.shape[1]
                    + 2 * len(keys) * k.shape[1]
                    + scores.numel()
                    + states[i].acc.numel()
                    + 2 * len(queries),
                )
            row.append({"device": i, "key_block": j, "used": used})
            if s < devices - 1:
                sent += 2 * len(keys) * k.shape[1]
        steps.append(row)
    return Ring(torch.cat([st.output() for st in states]), steps, held, sent)


def gqa_table(model: str, dtype: str = "fp16") -> list[dict]:
    """A real model's KV cache per token with every grouping its heads allow: kv_heads dividing the
    query heads, from one (multi-query) to all (multi-head); bytes from the KV lesson's formula."""
    s = MODEL[model].shape
    full = kv_bytes_per_token(s, dtype, s.heads)
    return [
        {
            "kv_heads": g,
            "bytes_per_token": kv_bytes_per_token(s, dtype, g),
            "saving": full / kv_bytes_per_token(s, dtype, g),
            "the model's own": g == s.kv_heads,
        }
        for g in range(1, s.heads + 1)
        if s.heads % g == 0
    ]


def figures(loaded) -> dict:
    tokens = story_prompt(loaded)
    q, k, v = head_qkv(loaded, tokens, 0, 0)
    T, d = q.shape
    plain = plain_attention(q, k, v)
    flash = flash_attention(q, k, v, 16, 32)
    ring = ring_attention(q, k, v, 4)
    w = 16
    return {
        "head": "block 1 (blocks.0), head 1",
        "tokens": T,
        "d_head": d,
        "flash": {
            "block_q": 16,
            "block_k": 32,
            "max_difference": float((flash.out - plain).abs().max()),
            "held": flash.held,
            "held_formula": flash_held_formula(T, d, 16, 32),
            "plain_held": plain_held(T, d),
            "scores_computed": flash.scores_computed,
            "tiles_computed": sum(t["computed"] for t in flash.tiles),
            "tiles": len(flash.tiles),
        },
        "window": {
            "window": w,
            "scores": int(window_mask(T, w).sum()),
            "formula": window_scores(T, w),
            "causal": causal_scores(T),
            "max_change": float((plain_attention(q, k, v, w) - plain).abs().max()),
        },
        "ring": {
            "devices": 4,
            "max_difference": float((ring.out - plain).abs().max()),
            "per_device_held": ring.per_device_held,
            "sent": ring.sent,
        },
        "gqa": {name: gqa_table(name) for name in GQA_MODELS},
    }


def exercises(seed: int, loaded=None) -> list[Exercise]:
    rng = draw(SLUG, seed)
    T = int(rng.choice([256, 512, 1024, 2048, 4096]))
    w = int(rng.choice([32, 64, 128, 200, 100]))
    counted = window_scores(T, w)
    name = str(rng.choice(GQA_MODELS))
    s = MODEL[name].shape
    tokens = int(rng.choice([1024, 4096, 8192]))
    gqa, mha = kv_bytes_per_token(s, "fp16"), kv_bytes_per_token(s, "fp16", s.heads)
    saved = tokens * (mha - gqa)
    length = int(rng.choice([1024, 2048, 4096, 8192]))
    bq, bk = int(rng.choice([32, 64, 128])), int(rng.choice([32, 64, 128]))
    ratio = length * length / (bq * bk)
    return [
        Exercise(
            "window",
            f"A causal sliding window of w = {w} (each query sees itself and the {w - 1} keys before "
            f"it) over T = {T} positions. How many scores does one head compute?",
            counted,
            hint="Query i sees min(i + 1, w) keys: add them up, the first w queries apart.",
            solution=f"The first {w} queries see 1, 2, …, {w} keys: {w}·{w + 1}/2 = {w * (w + 1) // 2}. "
            f"The other {T - w} see {w} each: {(T - w) * w}. In all {counted}, against "
            f"{causal_scores(T)} for full causal attention.",
            data={"T": T, "window": w},
        ),
        Exercise(
            "gqa",
            f"{name} has {s.layers} layers, {s.heads} query heads, {s.kv_heads} key/value head{'s' * (s.kv_heads > 1)} and "
            f"d_head = {s.d_head}. With the cache in fp16 (2 bytes a number), how many bytes does grouped-query "
            f"attention save on a {tokens}-token sequence against one key/value head per query head?",
            saved,
            unit="bytes",
            hint="Per token the cache holds 2 (K and V) × layers × key/value heads × d_head × bytes.",
            solution=f"Per token: 2·{s.layers}·{s.heads}·{s.d_head}·2 = {mha} bytes with every head, "
            f"2·{s.layers}·{s.kv_heads}·{s.d_head}·2 = {gqa} with {s.kv_heads}; saved "
            f"{mha - gqa} × {tokens} = {saved} bytes ({mha // gqa} times less).",
            data={
                "layers": s.layers,
                "heads": s.heads,
                "kv_heads": s.kv_heads,
                "d_head": s.d_head,
                "bytes": BYTES["fp16"],
                "tokens": tokens,
            },
        ),
        Exercise(
            "tile",
            f"At T = {length} tokens, plain attention holds the T × T score matrix of one head; flash "
            f"attention holds one tile of {bq} queries × {bk} keys at a time. How many times more score entries "
            "does the full matrix hold?",
            ratio,
            tolerance=1e-6,
            relative=True,
            unit="times",
            hint="Divide T² by Bq·Bk.",
            solution=f"{length}² = {length * length}; {bq}·{bk} = {bq * bk}; {length * length} / {bq * bk} = {ratio:g}.",
            data={"T": length, "block_q": bq, "block_k": bk},
        ),
    ]
