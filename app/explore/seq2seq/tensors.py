"""Tensors & gradients: any tensor or gradient of the trace by its engine name, as a grid with its
axes labelled (the encoder's positions and the cross-attention's keys by the source's tokens,
the decoder's by what it reads), with what the registry says it holds."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.explore.common import choose_head, derived, has_heads, heatmap, offered
from glassbox.app.explore.seq2seq.context import Seq2SeqExplorer
from glassbox.model.engine import GRAD
from glassbox.model.engine.names import lookup
from glassbox.model.plot.grid import sequential, tensor_grid

FIRST = "decoder.blocks.0.cross_attn.hook_pattern"  # what the view opens on


def render(ctx: Seq2SeqExplorer) -> None:
    trace = ctx.trace()
    left, right = st.columns([3, 1])
    name = left.selectbox(
        "Tensor or gradient",
        offered("explore_tensor", trace.names(), FIRST),
        key="explore_tensor",
        persist_state="session",
        help="Every tensor of the pass by its engine name, then every gradient (grad:) of the loss: "
        "the mean over the target's tokens",
    )
    head = 0
    if has_heads(name):
        with right:
            head = choose_head(ctx)
    values, rows, cols, row_title, col_title, note = derived(
        trace, ("grid", name, head), lambda: tensor_grid(ctx, name, trace[name], head)
    )
    base = name.removeprefix(GRAD)
    gradient = name != base
    st.caption(
        plain(f"{'The gradient ∂L/∂ of ' if gradient else ''}{base}: {lookup(name).what}; shape {list(trace[name].shape)}")
    )
    heatmap(
        values,
        rows,
        cols,
        f"∂L/∂{base}" if gradient else base,
        name + note,
        row_title=row_title,
        col_title=col_title,
        sequential=sequential(name),
        zoom_key="s2s:tensor",
        trace=trace,
    )
