"""Heatmaps sent as images (app/components/heatmap.py): the PNG holds one pixel per cell in the
colour plotly itself gives that value on the same scale. Reference: plotly.colors.sample_colorscale
(plotly's own interpolation), read back through Pillow; tolerance: one of the 255 shades."""

import base64
import io

import numpy as np
import plotly.colors
from PIL import Image

from glassbox.model.plot.heatmap import heatmap_figure, png_source


def decoded(source: str) -> np.ndarray:
    return np.array(Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1]))).convert("RGBA"))


def test_each_pixel_is_its_cells_colour_and_nan_is_transparent():
    values = np.array([[-2.0, -1.0, 0.0], [1.0, 2.0, np.nan]])
    pixels = decoded(png_source(values, "RdBu_r", -2.0, 2.0))
    assert pixels.shape == (2, 3, 4) and pixels[1, 2, 3] == 0 and (pixels[:, :, 3].ravel()[:5] == 255).all()
    for (r, c), v in np.ndenumerate(values):
        if np.isfinite(v):
            expected = plotly.colors.unlabel_rgb(plotly.colors.sample_colorscale("RdBu_r", [(v + 2) / 4])[0])
            assert np.abs(pixels[r, c, :3].astype(int) - np.array(expected)).max() <= 3, (r, c)


def test_a_large_map_goes_as_an_image_with_its_colour_bar_and_a_small_one_as_numbers():
    big = np.random.default_rng(0).normal(size=(160, 256))
    fig = heatmap_figure(big, [str(i) for i in range(160)], [str(i) for i in range(256)], "t", image=True)
    assert fig.data[0].type == "image" and fig.data[1].marker.showscale
    assert len(fig.to_json()) < 0.4 * len(
        heatmap_figure(big, [str(i) for i in range(160)], [str(i) for i in range(256)], "t").to_json()
    )
    small = heatmap_figure(big[:4, :4], list("abcd"), list("abcd"), "t")
    assert small.data[0].type == "heatmap"


def test_a_grid_writes_its_values_only_where_they_fit_side_by_side():
    """Train it live's attention grids (5 columns of "0.480", three charts across the narrowest
    page) and the worked example's 1×8 comparison rows ran their numbers into each other at
    1280 px: where a chart's width leaves a cell less room than its text, the values are left to
    the hover (the exact value is there either way)."""
    from glassbox.app.components.heatmap import PAGE_PX, grid_figure
    from glassbox.model.worked_example.steps import Grid

    labels = [f"{i} w" for i in range(5)]
    grid = Grid(
        "A(1,1)", "blocks.0.attn.hook_pattern[0]", np.full((5, 5), 0.48), labels, labels, "query", "key", probability=True
    )
    assert grid_figure(grid)["data"][0]["text"] is not None  # no width known: as before
    assert grid_figure(grid, width=PAGE_PX)["data"][0]["text"] is not None
    narrow = grid_figure(grid, width=PAGE_PX // 3)["data"][0]
    assert narrow["text"] is None and narrow["customdata"][0][0] == "0.48"  # on hover
    eight = Grid("x", "x", np.full((1, 8), -0.123), ["0"], [str(i) for i in range(8)], "", "")
    assert grid_figure(eight, width=PAGE_PX // 3)["data"][0]["text"] is None


def test_a_negative_value_rounded_to_nothing_is_written_without_its_sign():
    """Reference: Python's own rounding of the value (−0.0001 to three decimals is 0.000)."""
    from glassbox.app.components.labels import cell_text

    assert cell_text(-0.0001, 1.0, ".3f") == "0.000" and cell_text(-0.0006, 1.0, ".3f") == "-0.001"
    assert cell_text(-0.5, 1.0, ".2f") == "-0.50" and cell_text(-2e-9, 3e-9, ".3g") == "-2e-09"
