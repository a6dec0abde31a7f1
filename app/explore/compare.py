"""Compare: one tensor of this prompt (A) beside the same tensor of another prompt (B), and
their difference A − B where the shapes match (prompts of the same length in tokens)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer, choose_expert, has_experts, has_heads, heatmap, offered
from glassbox.model.engine import GRAD, GlassboxError, check_prompt, head_label
from glassbox.model.plot.grid import tensor_grid
from glassbox.model.serving import Needs, trace_names


def lit(ctx: Explorer) -> set[str]:
    return set()


def render(ctx: Explorer) -> None:
    names = offered("explore_compare_tensor", trace_names(ctx.model), "blocks.0.hook_resid_post")
    other_text = st.text_input(
        "Prompt B",
        key="explore_compare_prompt",
        persist_state="session",
        help="Compared with this page's prompt (A); the same length in tokens gives a difference",
    )
    left, right = st.columns([3, 1])
    name = left.selectbox("Tensor", names, key="explore_compare_tensor", persist_state="session")
    head = expert = 0
    if has_heads(name):
        head = right.selectbox(
            "Head", range(ctx.cfg.n_heads), key="explore_head", persist_state="session", format_func=head_label
        )
    elif has_experts(name):
        expert = choose_expert(ctx, right, shared=False)
    if not other_text:
        st.info("Type a prompt B to compare with. Changing one word of A shows where its effect travels.")
        return
    other_tokens = ctx.loaded.encode(other_text)
    check_prompt(ctx.cfg, other_tokens, "Prompt B")  # before anything is sized or admitted
    other = Explorer(ctx.model_key, ctx.loaded, other_tokens, ctx.target)  # the same loss
    needs = Needs((name.removeprefix(GRAD),), backward=name.startswith(GRAD))
    a_trace, b_trace = ctx.trace(needs), other.trace(needs)
    if name not in a_trace.names() or name not in b_trace.names():
        raise GlassboxError(f"{name} has no value for one of the prompts (off the loss's path, or one token long)")
    a, a_rows, a_cols, row_title, col_title, note = tensor_grid(ctx, name, a_trace[name], head, expert)
    b, b_rows, b_cols, _, _, _ = tensor_grid(other, name, b_trace[name], head, expert)
    shown = name + note
    st.caption(
        f"A: {len(ctx.tokens)} tokens; B: {len(other.tokens)} tokens. Each map has its own colour scale. Gradients "
        "are of the same loss for both: the page's target, or the mean "
        + ("loss of each position's own token." if ctx.cfg.kind == "encoder" else "next-token loss.")
    )
    first, second = st.columns(2)
    with first:
        heatmap(a, a_rows, a_cols, "A: this prompt", shown, row_title=row_title, col_title=col_title, width=450, zoom_key="cmp:a")
    with second:
        heatmap(b, b_rows, b_cols, "B", shown, row_title=row_title, col_title=col_title, width=450, zoom_key="cmp:b")
    if a.shape != b.shape:
        st.info(
            plain(
                f"The shapes differ ({list(a.shape)} and {list(b.shape)}): a difference needs prompts of the "
                "same length in tokens."
            )
        )
        return
    rows = [f"{x} | {y}" if x != y else x for x, y in zip(a_rows, b_rows)]
    heatmap(a - b, rows, a_cols, "A − B", shown, row_title=row_title, col_title=col_title, zoom_key="cmp:diff")
    st.caption(
        f"Largest |A − B|: {float(np.abs(a - b).max()):.6g}. A row where the prompts' tokens differ is labelled "
        "with both, A's | B's."
    )
