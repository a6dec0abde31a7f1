"""Attention: the encoder's self-attention (no mask), the decoder's (causal) and the decoder's
cross-attention (target positions reading source positions): every head of every block at a
glance, one head's scores and pattern, and for cross-attention how much of each query's weight
goes to the source position it looks at most."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.explore.attention import overview
from glassbox.app.explore.common import array, bar_chart, choose_head, derived, heatmap, offered
from glassbox.app.explore.seq2seq.context import Seq2SeqExplorer
from glassbox.model.analysis.seq2seq import DECODER, ENCODER, most_attended
from glassbox.model.engine import block_label, head_label

# kind -> (stack, the block's attention module, in words)
KINDS = {
    "cross": (DECODER, "cross_attn", "decoder cross-attention (target → source)"),
    "decoder": (DECODER, "attn", "decoder self-attention (causal)"),
    "encoder": (ENCODER, "attn", "encoder self-attention (no mask)"),
}


def labels(ctx: Seq2SeqExplorer, kind: str) -> tuple[list[str], list[str], str, str]:
    """A pattern's row and column labels and titles: queries from the kind's stack, keys from the
    source for cross-attention."""
    stack = KINDS[kind][0]
    rows = ctx.stack_labels(stack)
    cols = ctx.source_labels if kind == "cross" else rows
    row_title = f"query ({'source' if stack == ENCODER else 'decoder: token read'})"
    return rows, cols, row_title, "key (source)" if stack == ENCODER or kind == "cross" else "key (decoder)"


def render(ctx: Seq2SeqExplorer) -> None:
    trace = ctx.trace()
    kind = st.radio(
        "Attention",
        offered("explore_attn", list(KINDS)),
        key="explore_attn",
        persist_state="session",
        format_func=lambda k: KINDS[k][2],
        horizontal=True,
    )
    stack, module, _ = KINDS[kind]
    n_layers = ctx.n_layers(stack)
    st.session_state.explore_block = min(int(st.session_state.explore_block), n_layers - 1)
    pattern_of = f"{stack}blocks.{{}}.{module}.hook_pattern"
    overview(ctx, trace, pattern_of, n_layers, f"Every head of every block: {KINDS[kind][2]}", f"s2s:grid:{kind}")
    left, right = st.columns(2)
    with left:
        layer = st.selectbox("Block", range(n_layers), key="explore_block", persist_state="session", format_func=block_label)
    with right:
        head = choose_head(ctx)
    rows, cols, row_title, col_title = labels(ctx, kind)
    p = f"{stack}blocks.{layer}.{module}."
    scores = p + ("hook_scores_masked" if kind == "decoder" else "hook_scores")
    st.subheader(f"{KINDS[kind][2].capitalize()}, {block_label(layer)}, {head_label(head)}")
    a, b = st.columns(2)
    with a:
        masked = " after the causal mask (blank: −∞)" if kind == "decoder" else ""
        heatmap(
            array(trace[scores][head]),
            rows,
            cols,
            "Scores q·k × scale" + masked,
            f"{scores}[{head}]",
            row_title=row_title,
            col_title=col_title,
            zoom_key="s2s:scores",
            width=450,
            trace=trace,
        )
    with b:
        pattern = array(trace[p + "hook_pattern"][head])
        heatmap(
            pattern,
            rows,
            cols,
            "Pattern: softmax of each row",
            f"{p}hook_pattern[{head}]",
            row_title=row_title,
            col_title=col_title,
            sequential=True,
            zoom_key="s2s:pattern",
            width=450,
            trace=trace,
        )
    if kind == "cross":
        where, share = derived(trace, ("most attended", p, head), lambda: most_attended(pattern))
        show(
            bar_chart(
                rows,
                share,
                "Each query's weight on the source position it reads most",
                "weight (share of the row)",
                x_title=row_title,
                text=[cols[j] for j in where],
            ),
            width="stretch",
        )
        st.caption(
            f"Over the {len(rows)} target positions this head puts {share.mean():.3f} of its weight, on "
            "average, on one source position (written above each bar): near 1 it fetches one source token "
            "per target position; near 1/source length it spreads its weight."
        )
