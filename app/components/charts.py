"""Bar charts and axes that several pages draw the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from app.components.labels import bar_label


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


def paired_bars(labels: list[str], series: list[tuple[str, Sequence[float], str]], title: str, value_title: str,
                category_title: str, highlight: int | None = None) -> go.Figure:
    """Two or more values per label as horizontal bars in groups, each value written at the end
    of its own bar, so that a pair's labels never collide; the first label at the top.
    ``series`` is (name, values, colour); ``highlight`` draws that label in bold."""
    shown = [f"<b>{label}</b>" if i == highlight else label for i, label in enumerate(labels)]
    top = max((float(np.max(values)) for _, values, _ in series if len(values)), default=1.0) or 1.0
    fig = go.Figure([go.Bar(name=name, y=shown, x=list(values), orientation="h", marker_color=colour,
                            text=[bar_label(v) for v in values], textposition="outside", cliponaxis=False,
                            hovertemplate="%{y}: %{x:.6g}<extra>" + name + "</extra>")
                     for name, values, colour in series])
    fig.update_layout(title=dict(text=title, font=dict(size=13), x=0), barmode="group", bargap=0.25,
                      height=90 + 22 * len(series) * len(labels), margin=dict(l=10, r=40, t=60, b=10),
                      xaxis=dict(title=value_title, range=[0, top * 1.18]),
                      yaxis=dict(title=category_title, autorange="reversed", type="category"),
                      # the bars are longest at the top (most likely first): the legend sits in the free corner
                      legend=dict(x=0.99, y=0.02, xanchor="right", yanchor="bottom", bgcolor="rgba(255,255,255,0.85)"))
    return fig
