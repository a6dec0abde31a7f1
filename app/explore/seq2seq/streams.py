"""Streams: the encoder's and the decoder's residual streams, the norm of every position at every
point of each (what enters block 0, inside and after each block, the final norm), and one
position's vector at every point."""

from __future__ import annotations

import streamlit as st

from glassbox.app.explore.common import derived, heatmap, offered
from glassbox.app.explore.seq2seq.context import STACKS, Seq2SeqExplorer
from glassbox.model.analysis.seq2seq import DECODER, ENCODER, stream_norms, stream_points, stream_vectors

WHAT = {
    ENCODER: "the source's positions; its output (after the final norm) is encoder.hook_out, what every cross-attention reads",
    DECODER: "the positions of what the decoder reads; after its final norm the head gives the logits",
}


def render(ctx: Seq2SeqExplorer) -> None:
    trace = ctx.trace()
    for name, stack in STACKS.items():
        points = stream_points(trace, stack)
        norms = derived(trace, ("stream norms", stack), lambda: stream_norms(trace, points))  # noqa: B023 (computed now or never)
        heatmap(
            norms,
            [label for label, _ in points],
            ctx.stack_labels(stack),
            f"The {name}'s residual stream: ‖x‖ per position",
            f"{stack}blocks.*.hook_resid_pre|mid|cross|post",
            row_title="point",
            col_title="position",
            sequential=True,
            zoom_key=f"s2s:norms:{name}",
            trace=trace,
        )
        st.caption(f"The {name}: {WHAT[stack]}.")
    st.caption(
        "Each row is a point where the stream is traced: what enters block 1 (embeddings), then in each block "
        "resid_mid (after self-attention), resid_cross (after cross-attention, in the decoder) and resid_post "
        "(the block's output), then the stack's final norm."
    )

    st.subheader("One position's vector, point by point")
    left, right = st.columns(2)
    name = left.selectbox("Stack", offered("explore_stack", list(STACKS)), key="explore_stack", persist_state="session")
    stack = STACKS[name]
    labels = ctx.stack_labels(stack)
    st.session_state.explore_pos = min(int(st.session_state.explore_pos), len(labels) - 1)
    position = right.selectbox(
        "Position", range(len(labels)), key="explore_pos", persist_state="session", format_func=labels.__getitem__
    )
    points = stream_points(trace, stack)
    vectors = derived(trace, ("stream vectors", stack, position), lambda: stream_vectors(trace, points, position))
    heatmap(
        vectors,
        [label for label, _ in points],
        None,
        f"“{labels[position]}” in the {name}",
        f"{stack}blocks.*.hook_resid_pre|mid|cross|post[{position}]",
        row_title="point",
        col_title="d_model",
        zoom_key="s2s:vector",
        trace=trace,
    )
