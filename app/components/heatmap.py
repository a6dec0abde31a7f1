"""The worked example's grids as heatmaps (``grid_figure``): every value written in where it
fits, exact on hover, cells a step changed dotted. The heatmap itself, which every chart of a
tensor uses, is the library's (model/plot/heatmap.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from glassbox.app.components.labels import cell_text, power_of_ten, pretty
from glassbox.model.plot.heatmap import ClickLayer, abs_max, fits_text, heatmap_figure
from glassbox.model.worked_example.steps import Grid

PAGE_PX = 820  # the main column at 1280 px with the sidebar open, the narrowest layout checked


def grid_text(grid: Grid) -> tuple[int, list[list[str]]]:
    """A worked-example grid's cells as written, and the power of ten they are written in: a grid
    whose largest entry is under 0.01 (gradients, differences) is written in units of 10^power
    (0.000278 as 2.78 with power −4), so a cell holds 4 or 5 characters; 0 where written as is."""
    largest = abs_max(grid.values)
    power = power_of_ten(largest) if grid.quantity and largest < 0.01 else 0
    unit = 10.0**-power
    return power, [
        [cell_text(v * unit, largest * unit, ".2f" if power else ".3f") if grid.quantity else f"{v:g}" for v in row]
        for row in grid.values
    ]


def grid_colour(grid: Grid) -> str:
    """How a worked-example grid is coloured: "plain" (labels), "sequential" (probabilities) or "diverging"."""
    return "plain" if not grid.quantity else "sequential" if grid.probability else "diverging"


def grid_figure(
    grid: Grid,
    marks: Sequence[tuple[int | None, int | None]] = (),
    selected: tuple[int, int] | None = None,
    clickable: bool = False,
    zmax: float | None = None,
    colorbar: bool = True,
    width: int | None = None,
) -> go.Figure:
    """A worked-example grid with its values written in, every exact value on hover, and a colour
    bar: centred at 0, or 0..1 for probabilities; ``zmax`` sets a scale shared with other grids.
    Cells this step changed are dotted, ``marks`` (rows, columns or cells an explanation reads)
    and ``selected`` are outlined in gold; ``clickable`` makes a click on a cell report it.
    A grid whose largest entry is under 0.01 (gradients, differences) is written in units of a
    power of ten said in its title (0.000278 as 2.78 under "dL/dX ×10⁻⁴"), so a cell holds 4 or 5
    characters; ``colorbar`` False leaves the scale to a neighbour that shares it. ``width``: about
    how many pixels wide the chart is drawn, where known: values that would run into each other
    there are left to the hover."""
    values = grid.values
    n_rows, n_cols = values.shape
    power, text = grid_text(grid)
    widest = max((len(t) for row in text for t in row), default=0)
    text_size = 11 if widest <= 5 else 10
    if width is not None and not fits_text(text, n_cols, width, text_size):
        text = None
    hover = "row %{y}, column %{x}<br>exact: %{customdata}<extra></extra>"
    exact = values.astype(str)
    clicks = None
    if clickable:
        rr, cc = np.mgrid[0:n_rows, 0:n_cols]
        clicks = ClickLayer(cc.ravel().tolist(), rr.ravel().tolist(), hover, exact.ravel().tolist())
    return heatmap_figure(
        values,
        grid.rows,
        grid.cols,
        pretty(grid.label) + (f" ×10<sup>{power}</sup>" if power else ""),
        grid.name,
        size=f"{n_rows}×{n_cols}" + (f"  · <i>{grid.provenance}</i>" if grid.provenance else ""),
        row_title=grid.row_title,
        col_title=grid.col_title,
        colour=grid_colour(grid),
        zmax=1.0 if grid.probability else zmax,
        text=text,
        text_size=text_size,
        hover=hover,
        customdata=exact.tolist(),
        marks=marks,
        selected=selected,
        changed=grid.changed,
        clicks=clicks,
        colorbar="" if grid.quantity and colorbar else None,
        fixed=True,
        height=110 + 34 * n_rows + (30 if n_cols > 5 else 0),
    )
