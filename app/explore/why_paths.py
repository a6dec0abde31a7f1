"""Ask why's path patching: every sender head's path to every receiver head's queries, keys or
values, patched from the corrupted run (model/analysis/path_patching.py); a part of the Ask why
view (app/explore/why.py), in a file of its own."""

import numpy as np
import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.long_task import limit_note, long_computation
from glassbox.app.explore.common import (
    Explorer,
    heatmap,
    lacks,
)
from glassbox.model.analysis import plans
from glassbox.model.analysis.dla import part_words
from glassbox.model.analysis.path_patching import shared_prefix
from glassbox.model.serving.limits import PATCH_TOKENS


def path_patching(ctx: Explorer, corrupt: tuple, answer: int, wrong: int, receiver_input: str):
    """Every sender × receiver path, a long computation (long_task.py)."""
    n_receivers = (ctx.cfg.n_layers - 1) * (ctx.cfg.n_heads if receiver_input == "q" else ctx.cfg.n_kv_heads)
    # the largest pass: one sender's receivers, patched in one batch
    memory = ctx.pass_cost("Path patching", backward=False, batch=lambda n: max(n_receivers, 1))
    return long_computation(
        "Path patching",
        (ctx.model_key, tuple(ctx.tokens), corrupt, answer, wrong, receiver_input),
        plans.path_patching(ctx.cfg, len(ctx.tokens), receiver_input, shared_prefix(ctx.cfg, ctx.tokens, list(corrupt))),
        ctx.model,
        lambda: ctx.loaded.path_patch(list(ctx.tokens), list(corrupt), answer, wrong, receiver_input),
        memory,
    )


RECEIVER_INPUTS = {"q": "queries", "k": "keys", "v": "values"}


def sender_label(block: int, head: int | None) -> str:
    """A sender as the grid's rows name it, counted from 1 as every view does: "block 1, head 4"
    (blocks.0, head [3]), "block 1, MLP" (direct logit attribution's words)."""
    return part_words(f"blocks.{block}.hook_mlp_out" if head is None else f"blocks.{block}.attn.hook_result[{head}]")


def receiver_label(block: int, head: int, key_value: bool) -> str:
    """A receiver head, counted from 1; a key/value head of a grouped-query model says so."""
    return f"block {block + 1}, {'key/value head' if key_value else 'head'} {head + 1}"


def path_patching_runs(cfg, receiver_input: str) -> int:
    """How many runs path patching makes: per sender, a first pass and one per receiver in a later block."""
    per_block = cfg.n_heads if receiver_input == "q" else cfg.n_kv_heads
    senders = cfg.n_heads + (not cfg.attn_only)  # a block's heads and its MLP
    return sum(senders * (1 + (cfg.n_layers - 1 - b) * per_block) for b in range(cfg.n_layers))


def path_patching_view(ctx: Explorer, token: int, wrong: int) -> None:
    st.subheader("Path patching")
    if lacks(ctx):
        return
    if ctx.cfg.n_layers < 2:
        st.info("Path patching needs two blocks at least: a sender and a later head that receives it.")
        return
    st.markdown(
        "With the same corrupted prompt and metric: how much each **sender** (a head, or a block's MLP) "
        "restores through one **receiver** head's queries, keys or values alone. The sender's clean output "
        "goes into the corrupted run with every other head and MLP frozen at the corrupted run's; only the "
        "receiver's input computed from that stream is then put into the corrupted run."
    )
    corrupt_text = st.session_state.get("explore_why_corrupt")
    if not corrupt_text:
        st.info("Type a corrupted prompt under activation patching above and press Patch.")
        return
    receiver_input = st.segmented_control(
        "Through the receiver's",
        list(RECEIVER_INPUTS),
        key="explore_why_path_input",
        persist_state="session",
        required=True,
        default="q",
        format_func=RECEIVER_INPUTS.get,
    )
    corrupt = ctx.loaded.encode(corrupt_text)
    runs, shared = path_patching_runs(ctx.cfg, receiver_input), shared_prefix(ctx.cfg, ctx.tokens, corrupt)
    # counted over the whole prompt: a run after shared positions computes fewer, but copies their keys and values
    if runs * len(ctx.tokens) > PATCH_TOKENS:
        st.warning(
            plain(f"That is {runs:,} patched runs of {len(ctx.tokens)} tokens: too many for this server. Use a shorter prompt.")
        )
        return
    plan = plans.path_patching(ctx.cfg, len(ctx.tokens), receiver_input, shared)
    st.caption(plain(limit_note(ctx.model, plan)))
    result = path_patching(ctx, tuple(corrupt), token, wrong, receiver_input)
    if result is None:  # cancelled
        return
    if result.metric_clean == result.metric_corrupt:
        st.warning("The two prompts give the same metric: there is no difference to restore.")
        return
    grouped = receiver_input != "q" and ctx.cfg.n_kv_heads != ctx.cfg.n_heads
    rows = [sender_label(b, h) for b, h in result.senders]
    cols = [receiver_label(b, h, grouped) for b, h in result.receivers]
    heatmap(
        result.restored(),
        rows,
        cols,
        f"Fraction restored through each receiver's {RECEIVER_INPUTS[receiver_input]}",
        f"sender's output → blocks.b.attn.hook_{receiver_input}[h] of a later block",
        row_title="sender",
        col_title="receiver",
        zoom_key="explore_why_path",
    )
    best = np.nanargmax(np.abs(result.restored()))
    sender, receiver = divmod(int(best), len(cols))
    st.caption(
        f"Blocks and heads counted from 1, as in every view: block 1, head 4 is blocks.0's head [3]. Blank: the "
        f"receiver is not in a later block. 1 restores all of the metric's "
        f"{result.metric_clean - result.metric_corrupt:.4g} difference, 0 none. The strongest path: "
        f"{rows[sender]} → {cols[receiver]} ({result.restored()[sender, receiver]:.3f})."
    )
