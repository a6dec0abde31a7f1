"""Charts of a mixture of experts' training, shared by the mixture-of-experts lesson (the shipped runs) and Train it
live (a run trained in the session): each expert's share of the routed token-slots over steps."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from glassbox.model.analysis.experts import expert_label
from glassbox.model.course.mixture_of_experts import running_mean

EXPERT_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]  # D3's ten, 8
SMOOTHING = 10  # batches in each point's running mean


def share_figure(runs: list[tuple[str, np.ndarray]], n_experts: int, height: int = 380) -> go.Figure:
    """One panel per run (its title, its shares (step, expert) in one block), side by side on one
    y axis: each expert's share as a running mean of SMOOTHING batches, perfect balance dotted."""
    fig = make_subplots(
        rows=1, cols=len(runs), shared_yaxes=True, horizontal_spacing=0.04, subplot_titles=[title for title, _ in runs]
    )
    for column, (_, curves) in enumerate(runs, start=1):
        steps, smooth = running_mean(curves, SMOOTHING)
        for e in range(curves.shape[1]):
            fig.add_scatter(
                x=steps,
                y=smooth[:, e],
                mode="lines",
                name=expert_label(e),
                legendgroup=str(e),
                line=dict(color=EXPERT_COLOURS[e % len(EXPERT_COLOURS)], width=1.5),
                showlegend=column == 1,
                row=1,
                col=column,
            )
    fig.add_hline(y=1 / n_experts, line=dict(dash="dot", color="#495057"))
    fig.update_layout(
        height=height,
        margin=dict(l=10, r=10, t=60, b=10),
        yaxis_title="share of the token-slots",
        legend=dict(orientation="h", x=0, y=-0.25, xanchor="left", yanchor="top"),
    )
    fig.update_xaxes(title="training step")
    return fig


def share_caption(n_experts: int, top_k: int) -> str:
    return (
        f"Each expert's share of the token-slots routed in each training batch (a running mean of {SMOOTHING} "
        f"batches). The dotted line is 1/{n_experts}, perfect balance; one expert can get at most 1/{top_k} "
        "(every token chose it)."
    )
