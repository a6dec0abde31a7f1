"""A block's heads, played in the page (attention_head.js): for every head its scores and its
pattern, and the queries and keys they come from, are sent once per block (every block, where
they all fit), so choosing a head, a query or a key (from the lists, or by a click on a map), and
a block where all are sent, redraws the three maps, the dot product written out and where the
query looks, at once. The page sends its choice back (for the URL and
the charts the server draws below) and remembers it; the server's own choices (a click on the
every-head grid, a link) are sent with a new ``pick`` and win.

Sent for prompts up to a budget (``IN_PAGE_BYTES``): at 512 tokens GPT-2 small's 12 heads would be
25 MB per block. Over it only the queries and keys are sent (``computed``: 3 MB at 512 tokens) and
the page computes each head's scores and pattern from them when it is chosen (float64, tested
against the trace); over ``QK_BYTES`` too the server draws the head (app/explore/attention.py)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np
import streamlit as st
import torch

from glassbox.app.components.page_kit import anchored, katex_module, page_component
from glassbox.model.analysis import per_head, scored
from glassbox.model.engine import Trace, block_label, head_label
from glassbox.model.plot.heatmap import COLOURSCALES, abs_max, scale_colours

IN_PAGE_BYTES = 3 * 2**20  # scores and patterns of a block's heads (float32) sent to the page at most
QK_BYTES = 4 * 2**20  # a block's queries and keys alone, when the scores are over IN_PAGE_BYTES
ANCHOR = "attention_sent_choice"  # the choice sent with the element: the server's last own choice
PAGE_CHOICE = "attention_page_choice"  # the page's last choice, as it sent it

_component = page_component("glassbox_attention_head", "attention_head.js", "attention_head.css")


def width(dtype: torch.dtype) -> int:
    """Bytes per number sent: float64 models' own, every other model's exact in float32."""
    return 8 if dtype == torch.float64 else 4


def fits(n_heads: int, n_tokens: int, d_head: int, dtype: torch.dtype = torch.float32, n_blocks: int = 1) -> bool:
    """Whether ``n_blocks`` blocks' heads go to the page: their scores and patterns (and queries and keys)."""
    return n_blocks * width(dtype) * n_heads * (2 * n_tokens * n_tokens + 2 * n_tokens * d_head) <= IN_PAGE_BYTES


def fits_computed(cfg, n_tokens: int, dtype: torch.dtype = torch.float32) -> bool:
    """Whether a block's queries and keys alone go to the page, which computes the scores: not for
    scores with a bias added (T5's relative positions), which the page does not have."""
    return cfg.positional != "relative" and width(dtype) * cfg.n_heads * 2 * n_tokens * cfg.d_head <= QK_BYTES


def floats(tensor: torch.Tensor) -> str:
    """A tensor as little-endian float64 (a float64 model's) or float32 (any other: a half model's
    values are exact in float32), base64."""
    exact = tensor.detach().cpu().to(torch.float64 if width(tensor.dtype) == 8 else torch.float32)
    return base64.b64encode(exact.contiguous().numpy().astype(f"<f{width(tensor.dtype)}").tobytes()).decode("ascii")


def scale_note(cfg) -> str:
    """Where a model's attention scale comes from, as written after it."""
    return f" (1/√{cfg.d_head})" if cfg.attn_scale is None else " (this model's own scale)"


def block_payload(trace: Trace, cfg, layer: int, labels: list[str], how: list[list[str]], computed: bool = False) -> dict:
    """Everything the page draws of block ``layer``: each head's scores and pattern (the masked
    scores are the scores where the mask lets a key through, −∞ elsewhere: the page applies the
    same rule, and a test holds it to hook_scores_masked), its queries and keys, and how they are
    named; ``how``: per head, what its scores went through (RoPE, QK-norm, a soft cap, a shared key head).
    ``computed``: the scores and patterns are left out, for the page to compute from q and k."""
    p = f"blocks.{layer}.attn."
    q_full, k_full = scored(cfg, layer)  # after QK-norm, clipping and RoPE: what the scores multiply
    q_name, k_name = q_full.removeprefix(p), k_full.removeprefix(p)
    scale = cfg.attn_scale if cfg.attn_scale is not None else 1 / np.sqrt(cfg.d_head)
    heads = []
    for h in range(cfg.n_heads):
        heads.append(
            {
                "label": head_label(h),
                "kv": cfg.kv_head(h),
                "q": floats(per_head(trace[q_full], cfg.n_heads)[h]),
                "k": floats(per_head(trace[k_full], cfg.n_kv_heads)[cfg.kv_head(h)]),
                "how": how[h],
            }
        )
        if not computed:  # else the page computes them, and their colour scale, from q and k
            scores = trace[p + "hook_scores"][h]
            heads[-1] |= {
                "scores": floats(scores),
                "pattern": floats(trace[p + "hook_pattern"][h]),
                "zmax": abs_max(scores.float().cpu().numpy()),
            }
    return {
        "layer": layer,
        "block": block_label(layer),
        "prefix": p,
        "computed": computed,
        "q_name": q_name,
        "k_name": k_name,
        "labels": labels,
        "d_head": cfg.d_head,
        "bytes": width(trace[q_full].dtype),
        "heads": heads,
        "scale": float(scale),
        "scale_note": scale_note(cfg),
        "softcap": cfg.attn_softcap,
        "causal": cfg.causal,
        "window": cfg.window if cfg.is_local(layer) else None,
        "palettes": {name: scale_colours(scale_name).tolist() for name, scale_name in COLOURSCALES.items()},
    }


def attention_head(
    blocks: Callable[[int], list[dict]],
    element_id: str,
    block: int,
    head: int,
    query: int,
    key: int,
    on_change,
    element_key: str = "attention_head",
    fetch: dict | None = None,
) -> None:
    """The blocks ``blocks(b)`` returns (``block_payload``s: every block where all fit, else block
    ``b``, the one the element opens on) in the page, opening on ``block``, ``head``, ``query`` and
    ``key`` (the session's); ``element_id`` names what is sent (a new one redraws); ``fetch``
    (``fetched``'s), where the page fetches any other block itself; ``on_change(block, head,
    query, key)``: called (before the rerun) with the page's choice, checked."""

    def sent() -> None:
        chosen = st.session_state[element_key].get("chosen") or {}
        values = [chosen.get(name) for name in ("block", "head", "query", "key")]
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        if whole and values[0] in layers and all(0 <= v < n for v, n in zip(values[1:], (n_heads, n_tokens, n_tokens))):
            if chosen.get("unfetched"):  # a block the page could not fetch: the server's to send (a new pick)
                st.session_state.pop(PAGE_CHOICE, None)
            else:
                st.session_state[PAGE_CHOICE] = dict(zip(("block", "head", "query", "key"), values))
            on_change(*values)  # the message comes from a browser: only choices that exist

    # what the page shows now is the server's last own choice, or the page's since (page_kit.anchored)
    anchor = anchored(ANCHOR, PAGE_CHOICE, element_id, {"block": block, "head": head, "query": query, "key": key})
    payloads = blocks(anchor["chosen"]["block"])
    layers = set(range(len(fetch["blocks"]))) if fetch else {b["layer"] for b in payloads}
    n_heads, n_tokens = len(payloads[0]["heads"]), len(payloads[0]["labels"])
    _component(
        data={
            "blocks": payloads,
            "id": element_id,
            "chosen": anchor["chosen"],
            "pick": anchor["pick"],
            "katex": katex_module(),
            "fetch": fetch,
        },
        key=element_key,
        on_chosen_change=sent,
    )
