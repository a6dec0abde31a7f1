"""What every page uses: the shared model, and the labelled grid every tensor is drawn as."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from model.checkpoint import LoadedModel, load
from model.steps import Grid

DIVERGING = "RdBu_r"  # blue below 0, white at 0, red above
HIGHLIGHT = "#f2a900"


@st.cache_resource(show_spinner="Loading the model…")
def shared_model(name: str) -> LoadedModel:
    """One model object for every browser session; calls on it leave no state."""
    return load(name)


def url_settings(defaults: dict, limits: dict | None = None, choices: dict | None = None, prefix: str = "") -> None:
    """Settings that live in the URL, so a setup can be shared. Each query parameter ``name``
    backs the session state key ``prefix + name`` (pages that share parameter names keep
    their own state). On a page's first run a setting is read from the query string (a bad
    value falls back to its default, a number is clamped into ``limits``); every run writes
    the current values back."""
    limits, choices = limits or {}, choices or {}
    for name, default in defaults.items():
        key = prefix + name
        if key in st.session_state:
            continue
        raw, value = st.query_params.get(name), default
        if raw is not None:
            try:
                value = (raw.lower() in ("1", "true") if isinstance(default, bool) else type(default)(
                    float(raw) if isinstance(default, int) else raw))
            except ValueError:
                value = default
        if name in limits:
            low, high = limits[name]
            value = min(max(value, low), high)
        if name in choices and value not in choices[name]:
            value = default
        st.session_state[key] = value
    st.query_params.update({name: str(st.session_state[prefix + name]) for name in defaults})


def stepper(keys: list[str], key: str, label: str, format_func, shortcuts: bool = False, **selectbox_args) -> int:
    """◀ Previous, a jump list and Next ▶ over ``keys``; the current one is ``st.session_state[key]``
    (set it before calling, e.g. from the URL). Returns its index."""
    if st.session_state.get(key) not in keys:
        st.session_state[key] = keys[0]

    def move(offset: int) -> None:
        i = keys.index(st.session_state[key])
        st.session_state[key] = keys[min(max(i + offset, 0), len(keys) - 1)]

    index = keys.index(st.session_state[key])
    left, middle, right = st.columns([1, 5, 1], vertical_alignment="bottom")
    middle.selectbox(label, keys, format_func=format_func, key=key, **selectbox_args)
    keyboard = lambda arrow, symbol: dict(shortcut=arrow, help=f"Keyboard: {symbol}") if shortcuts else {}  # noqa: E731
    left.button("◀ Previous", on_click=move, args=(-1,), disabled=index == 0, width="stretch", key=key + ":previous",
                **keyboard("Left", "←"))
    right.button("Next ▶", on_click=move, args=(1,), disabled=index == len(keys) - 1, width="stretch", type="primary",
                 key=key + ":next", **keyboard("Right", "→"))
    return index


PipelineBox = tuple[str, bool, int, str]  # label, lit, parameter count (0: none shown), hover note


def pipeline_strip(groups: list[tuple[str | None, list[PipelineBox]]], lead: str, tail: str = "",
                   colour: str = "#1f6feb") -> None:
    """A model's parts as a row of boxes in forward order, those of a block grouped in a dashed
    frame (group label not None), the lit ones filled with ``colour``."""
    def box(label: str, lit: bool, count: int, note: str) -> str:
        style = f"background:{colour};color:white;font-weight:600" if lit else ""
        number = f"<span class='gb-count'>{count:,}</span>" if count else ""
        return f"<span class='gb-box' style='{style}' title='{note}'>{label}{number}</span>"

    html = []
    for group, boxes in groups:
        inner = "".join(box(*b) for b in boxes)
        html.append(inner if group is None else
                    f"<span class='gb-block'><span class='gb-block-label'>{group}</span>{inner}</span>")
    st.html("<style>.gb-pipe{display:flex;flex-wrap:wrap;gap:4px;align-items:center;font-size:12px;font-family:sans-serif}"
            ".gb-box{border:1px solid #bbb;border-radius:4px;padding:2px 6px;background:#f6f8fa}"
            ".gb-count{font-size:10px;opacity:.75;margin-left:4px}"
            ".gb-block{display:inline-flex;gap:3px;align-items:center;border:1px dashed #999;border-radius:6px;padding:2px 4px}"
            ".gb-block-label{color:#666;font-size:11px;margin-right:2px}</style>"
            f"<div class='gb-pipe'>{lead}{''.join(html)}{tail}</div>")


def bar_label(p: float) -> str:
    """A probability bar's value, left off below 0.001 where it would only clutter."""
    return f"{float(p):.3f}" if float(p) >= 0.001 else ""


def pretty(label: str) -> str:
    """Article names for people: dL/dX(2) -> ∂L/∂X(2)."""
    return label.replace("dL/d", "∂L/∂")


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
