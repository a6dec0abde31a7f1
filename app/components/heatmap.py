"""Every tensor is drawn as a labelled heatmap: rows and columns named by tokens and axes,
the tensor's engine name under its title, colour centred at 0."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from app.components.labels import DIVERGING, HIGHLIGHT, pretty
from model.lesson.steps import Grid


def grid_title(grid: Grid) -> str:
    rows, cols = grid.shape
    title = f"<b>{pretty(grid.label)}</b>  {rows}×{cols}"
    if grid.provenance:
        title += f"  · <i>{grid.provenance}</i>"
    return title + f"<br><span style='font-size:11px;color:#666'>{grid.name}</span>"


def grid_figure(grid: Grid, marks: list[tuple[int | None, int | None]] = (), selected: tuple[int, int] | None = None,
                clickable: bool = False) -> go.Figure:
    """A heatmap of ``grid`` with its values written in, colour centred at 0. Cells this step
    changed are outlined (dashed), ``marks`` (rows, columns or cells an explanation reads)
    and ``selected`` are outlined in gold. ``clickable`` adds one invisible point per cell so
    that a click selects it (plotly heatmaps themselves report no clicks)."""
    values = grid.values
    finite = np.where(np.isfinite(values), values, np.nan)
    limit = float(np.nanmax(np.abs(finite))) if np.isfinite(finite).any() else 1.0
    limit = limit or 1.0
    n_rows, n_cols = values.shape
    # enough decimals for two significant digits of the largest entry: gradients are small
    decimals = min(max(3, 2 - math.floor(math.log10(limit))), 6)
    text = [["−∞" if v == -math.inf else (f"{v:.{decimals}f}" if grid.quantity else f"{v:g}") for v in row]
            for row in values]
    fig = go.Figure(go.Heatmap(
        z=finite.astype(np.float32).tolist(), x=list(range(n_cols)), y=list(range(n_rows)),
        text=text, texttemplate="%{text}", textfont=dict(size=11), customdata=values.astype(str).tolist(),
        colorscale=DIVERGING if grid.quantity else [[0, "#f6f8fa"], [1, "#f6f8fa"]], zmin=-limit, zmax=limit, showscale=False, xgap=1, ygap=1,
        hovertemplate="row %{y}, column %{x}<br>exact: %{customdata}<extra></extra>"))
    if clickable:  # the invisible points carry the hover text too: plotly reports clicks only where it hovers
        rr, cc = np.mgrid[0:n_rows, 0:n_cols]
        fig.add_trace(go.Scatter(x=cc.ravel().tolist(), y=rr.ravel().tolist(), mode="markers",
                                 marker=dict(size=28, opacity=0), showlegend=False,
                                 customdata=values.astype(str).ravel().tolist(),
                                 hovertemplate="row %{y}, column %{x}<br>exact: %{customdata}<extra></extra>"))
        fig.update_traces(hoverinfo="skip", hovertemplate=None, selector=dict(type="heatmap"))
    if grid.changed is not None and not grid.changed.all():  # outline what changed, unless everything did
        for r, c in zip(*np.nonzero(grid.changed)):
            fig.add_shape(type="rect", x0=c - .45, x1=c + .45, y0=r - .45, y1=r + .45,
                          line=dict(color="#222", width=1.5, dash="dot"))
    for r, c in marks:
        r0, r1 = (-.5, n_rows - .5) if r is None else (r - .5, r + .5)
        c0, c1 = (-.5, n_cols - .5) if c is None else (c - .5, c + .5)
        fig.add_shape(type="rect", x0=c0, x1=c1, y0=r0, y1=r1, line=dict(color=HIGHLIGHT, width=3))
    if selected is not None:
        r, c = selected
        fig.add_shape(type="rect", x0=c - .5, x1=c + .5, y0=r - .5, y1=r + .5, line=dict(color=HIGHLIGHT, width=4))
    fig.update_layout(
        title=dict(text=grid_title(grid), font=dict(size=13), x=0, xanchor="left"),
        height=110 + 34 * n_rows + (30 if n_cols > 5 else 0),
        margin=dict(l=10, r=10, t=58, b=10), dragmode=False, clickmode="event+select",
        xaxis=dict(tickvals=list(range(n_cols)), ticktext=grid.cols, title=dict(text=grid.col_title, font=dict(size=11)),
                   fixedrange=True, showgrid=False, zeroline=False),
        yaxis=dict(tickvals=list(range(n_rows)), ticktext=grid.rows, title=dict(text=grid.row_title, font=dict(size=11)),
                   autorange="reversed", fixedrange=True, showgrid=False, zeroline=False),
        plot_bgcolor="white")
    return fig
