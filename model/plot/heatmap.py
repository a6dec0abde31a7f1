"""Every tensor is drawn as a labelled heatmap: rows and columns named by tokens and axes,
the tensor's engine name under its title, colour centred at 0 (or 0..max for quantities that
are never negative). ``heatmap_figure`` builds them all: ``Trace.figure``'s, the explorer's
(app/explore/common.py adds block means and zoom on top), the worked example's grids
(app/components/heatmap.py), the attention overview and the logit lens. plotly and Pillow
(the app's extras) are imported by the functions that draw."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from glassbox.model.plot.labels import DIVERGING, HIGHLIGHT

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLOURSCALES = {"diverging": DIVERGING, "sequential": "Blues"}  # centred at 0; from 0 up (probabilities, norms)
PLAIN = [[0, "#f6f8fa"], [1, "#f6f8fa"]]  # labels such as token ids: no colour scale
IMAGE_TICKS = 24  # an image heatmap labels at most this many rows (columns), evenly spread
Span = int | range | None  # a mark's rows (or columns): one, a run of them, or all
Labels = Sequence[str] | dict[float, str]  # one label per row (column), or labels at chosen positions


@dataclass
class ClickLayer:
    """Invisible markers laid over a heatmap: plotly heatmaps report no clicks, and plotly
    reports a click only where it shows a hover, so the markers carry the hover text."""

    x: list[float]
    y: list[float]
    hover: str
    customdata: object = None
    size: int = 28
    symbol: str = "circle"


CHAR_PX, LABELS_PX = 5.6, 110  # a 10 px digit's width; the row labels' and the colour bar's


def fits_text(text: list[list[str]], n_cols: int, width: int = 900, font_px: int = 10) -> bool:
    """Whether the cells' text (in a ``font_px`` font) fits across ``n_cols`` columns of a chart
    ``width`` pixels wide, rather than the numbers spilling into each other."""
    widest = max((len(t) for row in text for t in row), default=0)
    return (width - LABELS_PX) / max(n_cols, 1) >= CHAR_PX * font_px / 10 * widest + 4


def abs_max(values: np.ndarray) -> float:
    """The largest |value| over the finite entries; 1 where there is none (or it is 0)."""
    finite = np.asarray(values)[np.isfinite(values)]
    return float(np.abs(finite).max()) if finite.size and np.abs(finite).max() else 1.0


def figure_title(title: str, name: str = "", size: str = "") -> str:
    """The title in bold, then the size (and any note), and the engine's name below."""
    text = f"<b>{title}</b>" + (f"  {size}" if size else "")
    return text + (f"<br><span style='font-size:11px;color:#666'>{name}</span>" if name else "")


def _span(span: Span, n: int) -> tuple[float, float]:
    if span is None:
        return -0.5, n - 0.5
    if isinstance(span, range):
        return span.start - 0.5, span.stop - 0.5
    return span - 0.5, span + 0.5


@cache
def scale_colours(colorscale: str) -> np.ndarray:
    """A named plotly colour scale as 256 RGB rows."""
    import plotly.colors

    colours = plotly.colors.sample_colorscale(colorscale, list(np.linspace(0, 1, 256)))
    return np.array([plotly.colors.unlabel_rgb(c) for c in colours], dtype=np.uint8)


def _on_scale(values: np.ndarray, zmin: float, zmax: float) -> np.ndarray:
    """Where each value sits on a colour scale from ``zmin`` to ``zmax``: 0 to 1, clipped (NaN stays NaN)."""
    return np.clip((np.asarray(values, dtype=float) - zmin) / ((zmax - zmin) or 1.0), 0, 1)


def png_source(values: np.ndarray, colorscale: str, zmin: float, zmax: float) -> str:
    """The heatmap as a PNG data URL, one pixel per cell, an indexed colour each (255 shades of
    the scale; NaN transparent): a 160 × 256 map is ~50 kB instead of ~220 kB of numbers."""
    from PIL import Image

    scaled = _on_scale(values, zmin, zmax)
    indices = np.where(np.isfinite(scaled), np.round(np.nan_to_num(scaled) * 254), 255).astype(np.uint8)
    image = Image.fromarray(indices, "P")
    palette = scale_colours(colorscale)[np.round(np.linspace(0, 255, 255)).astype(int)]
    image.putpalette(np.vstack([palette, [[255, 255, 255]]]).ravel().tolist())
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", transparency=255)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _axis(labels: Labels, n: int, title: str, fixed: bool, **extra) -> dict:
    axis = dict(title=dict(text=title, font=dict(size=11)), **extra)
    if not fixed:
        return axis | dict(type="category", tickfont=dict(size=10))
    ticks = labels if isinstance(labels, dict) else dict(enumerate(labels[:n]))
    return axis | dict(tickvals=list(ticks), ticktext=list(ticks.values()), fixedrange=True, showgrid=False, zeroline=False)


def _heat(
    z: np.ndarray,
    scale: tuple,
    limit: float,
    rows: Labels,
    cols: Labels,
    fixed: bool,
    gaps: bool,
    colorbar: str | None,
    height: int | None,
    text,
    text_size: int,
    clicks: ClickLayer | None,
    hover: str | None,
    customdata,
    row_title: str,
    col_title: str,
) -> go.Heatmap:
    """The heatmap trace of ``heatmap_figure`` (all but an image's)."""
    import plotly.graph_objects as go

    n_rows, n_cols = z.shape
    heat = go.Heatmap(
        z=z, colorscale=scale[0], zmin=scale[1], zmax=limit, xgap=int(gaps), ygap=int(gaps), showscale=colorbar is not None
    )
    if fixed:
        heat.update(x=list(range(n_cols)), y=list(range(n_rows)))
    else:
        heat.update(x=list(cols), y=list(rows))
    if colorbar is not None:
        plot_height = (height or min(140 + 22 * n_rows, 640)) - 120  # less the title, margins and x labels
        heat.update(
            colorbar=dict(
                thickness=10,
                nticks=max(2, min(8, plot_height // 22)),  # labels never overlap
                **(dict(title=dict(text=colorbar, side="right")) if colorbar else {}),
            )
        )
    if text is not None:
        heat.update(text=text, texttemplate="%{text}", textfont=dict(size=text_size))
    if clicks is not None:
        heat.update(hoverinfo="skip")
    else:
        heat.update(
            hovertemplate=hover or f"{row_title} %{{y}}<br>{col_title} %{{x}}<br>value %{{z:.6g}}<extra></extra>",
            customdata=customdata,
        )
    return heat


def heatmap_figure(
    values: np.ndarray,
    rows: Labels,
    cols: Labels,
    title: str,
    name: str = "",
    *,
    size: str | None = None,
    row_title: str = "",
    col_title: str = "",
    colour: str = "diverging",
    zmax: float | None = None,
    text: list[list[str]] | None = None,
    text_size: int = 10,
    hover: str | None = None,
    customdata=None,
    marks: Sequence[tuple[Span, Span]] = (),
    selected: tuple[int, int] | None = None,
    changed: np.ndarray | None = None,
    clicks: ClickLayer | None = None,
    colorbar: str | None = "",
    gaps: bool = True,
    fixed: bool = False,
    height: int | None = None,
    image: bool = False,
) -> go.Figure:
    """A labelled heatmap of a 2-D array (the heatmap is ``data[0]``), −∞ and NaN left blank.

    - ``colour``: "diverging" (centred at 0), "sequential" (0..max, for probabilities and
      norms) or "plain" (no colour: labels such as token ids); ``zmax`` overrides the top.
    - ``fixed``: a chart to read and click, not to zoom: the cells at 0, 1, … with every label
      written (``rows``/``cols`` may instead give labels at chosen positions), no drag; else
      category axes named by the labels, which plotly thins out when they are many.
    - ``text`` is written into the cells; ``marks`` (rows × columns, a ``None`` side being
      all of them) are outlined in gold, ``selected`` more thickly; the cells ``changed`` marks
      are dotted (unless every cell changed).
    - ``clicks`` lays invisible markers over the map to make it clickable (hover moves to them).
    - ``colorbar``: the scale's title, None for no scale. ``size`` defaults to "rows×columns".
    - ``image``: sent as a PNG, one pixel per cell (for block means and tiled overviews, which
      are not exact values anyway: the zoom gives those), a fraction of the bytes to send and
      draw; rows and columns labelled at most ``IMAGE_TICKS`` times each.
    """
    import plotly.graph_objects as go

    n_rows, n_cols = np.shape(values)
    limit = zmax if zmax is not None else abs_max(values)
    z = np.where(np.isfinite(values), values, np.nan).astype(np.float32)
    scale = dict(diverging=(DIVERGING, -limit), sequential=(COLOURSCALES["sequential"], 0), plain=(PLAIN, -limit))[colour]
    if image:
        fig = _image_figure(z, scale[0], scale[1], limit, colorbar, rows, cols, n_rows, n_cols, row_title, col_title)
    else:
        fig = go.Figure(
            _heat(
                z,
                scale,
                limit,
                rows,
                cols,
                fixed,
                gaps,
                colorbar,
                height,
                text,
                text_size,
                clicks,
                hover,
                customdata,
                row_title,
                col_title,
            )
        )
    if clicks is not None:
        fig.add_trace(
            go.Scatter(
                x=clicks.x,
                y=clicks.y,
                mode="markers",
                showlegend=False,
                customdata=clicks.customdata,
                marker=dict(symbol=clicks.symbol, size=clicks.size, opacity=0),
                hovertemplate=clicks.hover,
            )
        )
        fig.update_layout(clickmode="event+select")  # a click reports its marker (st.plotly_chart's on_select)
    if changed is not None and not changed.all():  # outline what changed, unless everything did
        for r, c in zip(*np.nonzero(changed)):
            fig.add_shape(
                type="rect", x0=c - 0.45, x1=c + 0.45, y0=r - 0.45, y1=r + 0.45, line=dict(color="#222", width=1.5, dash="dot")
            )
    outlines = [(r, c, 3) for r, c in marks] + ([(*selected, 4)] if selected is not None else [])
    for r, c, width in outlines:
        (y0, y1), (x0, x1) = _span(r, n_rows), _span(c, n_cols)
        fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, line=dict(color=HIGHLIGHT, width=width))
    fig.update_layout(
        title=dict(
            text=figure_title(title, name, f"{n_rows}×{n_cols}" if size is None else size),
            font=dict(size=13),
            x=0,
            xanchor="left",
        ),
        height=height or min(140 + 22 * n_rows, 640),
        margin=dict(l=10, r=10, t=60 if name else 40, b=10),
        plot_bgcolor="white",
    )
    if not image:
        fig.update_layout(
            xaxis=_axis(cols, n_cols, col_title, fixed), yaxis=_axis(rows, n_rows, row_title, fixed, autorange="reversed")
        )
    if fixed:
        fig.update_layout(dragmode=False, clickmode="event+select")
    return fig


def _spread_ticks(labels: Labels, n: int, title: str, down: bool = False, most: int = IMAGE_TICKS) -> dict:
    """A numeric axis over cells 0 … n−1 labelled at most ``most`` times (``down``: 0 at the top)."""
    if isinstance(labels, dict):
        ticks = labels
    else:
        ticks = {int(i): labels[int(i)] for i in np.unique(np.linspace(0, n - 1, min(n, most)).round())}
    return dict(
        title=dict(text=title, font=dict(size=11)),
        tickvals=list(ticks),
        ticktext=list(ticks.values()),
        tickfont=dict(size=10),
        showgrid=False,
        zeroline=False,
        range=[n - 0.5, -0.5] if down else [-0.5, n - 0.5],
    )


def _image_figure(
    z: np.ndarray,
    colorscale: str,
    zmin: float,
    zmax: float,
    colorbar: str | None,
    rows: Labels,
    cols: Labels,
    n_rows: int,
    n_cols: int,
    row_title: str,
    col_title: str,
) -> go.Figure:
    """The heatmap as an image, with a colour bar from an invisible marker carrying the scale."""
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Image(
            source=png_source(z, colorscale, zmin, zmax),
            x0=0,
            dx=1,
            y0=0,
            dy=1,
            hovertemplate="row %{y}, column %{x}<extra>zoom in for exact values</extra>",
        )
    )
    if colorbar is not None:
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                showlegend=False,
                hoverinfo="skip",
                marker=dict(
                    colorscale=colorscale,
                    cmin=zmin,
                    cmax=zmax,
                    color=[zmin],
                    showscale=True,
                    colorbar=dict(thickness=10, **(dict(title=dict(text=colorbar, side="right")) if colorbar else {})),
                ),
            )
        )
    # cells need not be square (an image's default): the map fills its chart, as a heatmap would
    fig.update_layout(
        xaxis=_spread_ticks(cols, n_cols, col_title, most=IMAGE_TICKS // 3),
        yaxis=_spread_ticks(rows, n_rows, row_title, down=True) | dict(scaleanchor=False),
    )
    return fig


def cell_fills(values: np.ndarray, colour: str, zmax: float) -> tuple[list[list[str | None]], list[list[str]]]:
    """Each cell's background as plotly's heatmap would paint it (its colour scale sampled at 256
    points, from −zmax, or 0 where sequential, to zmax; None where blank: −∞, NaN, or a plain grid)
    and an ink (dark or white) that reads on it."""
    n_rows, n_cols = np.shape(values)
    if colour == "plain":
        return [[None] * n_cols for _ in range(n_rows)], [["#31333f"] * n_cols for _ in range(n_rows)]
    zmin = 0.0 if colour == "sequential" else -zmax
    scaled = _on_scale(values, zmin, zmax)
    rgb = scale_colours(COLOURSCALES[colour])[np.round(np.nan_to_num(scaled) * 255).astype(int)]
    blank = ~np.isfinite(values)
    fills = [[None if blank[r, c] else "#%02x%02x%02x" % tuple(rgb[r, c]) for c in range(n_cols)] for r in range(n_rows)]
    dark = rgb @ np.array([0.299, 0.587, 0.114]) < 140
    inks = [["#ffffff" if dark[r, c] else "#1b1d24" for c in range(n_cols)] for r in range(n_rows)]
    return fills, inks


def colour_stops(colour: str, stops: int = 9) -> list[str]:
    """A colour scale as ``stops`` colours from its bottom to its top (for a CSS gradient)."""
    palette = scale_colours(COLOURSCALES[colour])
    return ["#%02x%02x%02x" % tuple(palette[i]) for i in np.linspace(0, 255, stops).round().astype(int)]
