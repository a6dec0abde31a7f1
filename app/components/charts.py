"""Bar charts and axes that several pages draw the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from glassbox.app.components.labels import bar_label

# Streamlit's look (its font, text colour and colour cycle on plotly's white template), set
# once on the server. Streamlit's own chart theme does the same in the browser, but again on
# every draw of every chart: about 0.1–0.2 s per explorer view on this project's machine
# (python -m app.bench), so every chart is drawn with theme=None and this template instead.
pio.templates["glassbox"] = go.layout.Template(pio.templates["plotly_white"]).update(
    layout=dict(
        font=dict(family='"Source Sans Pro", sans-serif', color="#31333F"),
        colorway=["#0068C9", "#83C9FF", "#FF2B2B", "#FFABAB", "#29B09D", "#7DEFA1", "#FF8700", "#FFD16A", "#6D3FC0", "#D5DAE5"],
        hoverlabel=dict(font=dict(family='"Source Sans Pro", sans-serif')),
        # ticks as powers of ten, never SI prefixes: a loss of 5e-5 reads 5×10⁻⁵, not "50μ" (nor a count "2G")
        xaxis=dict(exponentformat="power"),
        yaxis=dict(exponentformat="power"),
    ),
    data=dict(heatmap=[go.Heatmap(colorbar=dict(exponentformat="power"))]),
)
pio.templates.default = "glassbox"


def show(fig: go.Figure, where=st, **kwargs):
    """``fig`` drawn in ``where`` (a column, a container; the page by default) with Glassbox's
    template, not Streamlit's theme. ``kwargs`` go to ``st.plotly_chart``."""
    return where.plotly_chart(fig, theme=None, **kwargs)


def log_axis(values: Sequence[float], title: str) -> dict:
    """A log-scale axis labelled at 1, 2 and 5 times each power of ten with the whole number
    written out (0.3, not a bare minor-tick "3"): plotly's own log ticks label the minor ones
    with a single digit."""
    finite = [v for v in values if v > 0 and math.isfinite(v)] or [1.0]
    low, high = math.floor(math.log10(min(finite))), math.ceil(math.log10(max(finite)))
    ticks = [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]
    if high - low > 3:  # many decades: only the powers of ten
        ticks = [10.0**e for e in range(low, high + 1)]
    return dict(type="log", title=title, tickvals=ticks, ticktext=[f"{t:,.10g}" for t in ticks])


def paired_bars(
    labels: list[str],
    series: list[tuple[str, Sequence[float], str]],
    title: str,
    value_title: str,
    category_title: str,
    highlight: int | None = None,
) -> go.Figure:
    """Two or more values per label as horizontal bars in groups, each value written at the end
    of its own bar, so that a pair's labels never collide; the first label at the top.
    ``series`` is (name, values, colour); ``highlight`` draws that label in bold."""
    shown = [f"<b>{label}</b>" if i == highlight else label for i, label in enumerate(labels)]
    top = max((float(np.max(values)) for _, values, _ in series if len(values)), default=1.0) or 1.0
    fig = go.Figure(
        [
            go.Bar(
                name=name,
                y=shown,
                x=list(values),
                orientation="h",
                marker_color=colour,
                text=[bar_label(v) for v in values],
                textposition="outside",
                cliponaxis=False,
                hovertemplate="%{y}: %{x:.6g}<extra>" + name + "</extra>",
            )
            for name, values, colour in series
        ]
    )
    fig.update_layout(
        title=dict(text=title, font=dict(size=13), x=0),
        barmode="group",
        bargap=0.25,
        height=110 + 22 * len(series) * len(labels),
        margin=dict(l=10, r=40, t=80, b=10),
        xaxis=dict(title=value_title, range=[0, top * 1.18]),
        yaxis=dict(title=category_title, autorange="reversed", type="category"),
        # above the bars, under the title: inside the plot it covers bars wherever they are long
        legend=dict(orientation="h", x=0, y=1.0, xanchor="left", yanchor="bottom"),
    )
    return fig


def place_labels(
    x: Sequence[float],
    y: Sequence[float],
    texts: Sequence[str],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    size_px: tuple[float, float],
    char_px: float = 7.0,
    line_px: float = 15.0,
) -> list[str | None]:
    """Where to write each point's label on a scatter whose axes span ``x_range`` × ``y_range``
    over about ``size_px`` (width, height) pixels: "top center" or "bottom center", whichever
    does not cover a label already placed (earlier points first), or None: that label would
    overlap and is left to the hover."""

    def pixels(v: Sequence[float], span: tuple[float, float], size: float) -> np.ndarray:
        low, high = span
        return (np.asarray(v, dtype=np.float64) - low) / ((high - low) or 1.0) * size

    placed: list[tuple[float, float, float, float]] = []  # left, bottom, right, top
    where: list[str | None] = []
    for cx, cy, text in zip(pixels(x, x_range, size_px[0]), pixels(y, y_range, size_px[1]), texts):
        half = (char_px * len(text) + 4) / 2
        for position, bottom in (("top center", cy + 5), ("bottom center", cy - 5 - line_px)):
            box = (cx - half, bottom, cx + half, bottom + line_px)
            if all(box[2] <= b[0] or box[0] >= b[2] or box[3] <= b[1] or box[1] >= b[3] for b in placed):
                placed.append(box)
                where.append(position)
                break
        else:
            where.append(None)
    return where
