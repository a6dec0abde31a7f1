"""Chart helpers (app/components/charts.py): where scatter labels go. The reference is the
geometry itself, worked out in each test: label boxes 7 px per character + 4 wide, 15 high,
5 px above or below their point."""

import numpy as np
import pytest

from glassbox.app.components.charts import place_labels


def box(x_px: float, y_px: float, text: str, where: str) -> tuple[float, float, float, float]:
    half = (7 * len(text) + 4) / 2
    bottom = y_px + 5 if where == "top center" else y_px - 20
    return x_px - half, bottom, x_px + half, bottom + 15


def test_labels_far_apart_all_go_above_their_points():
    assert place_labels([0, 1], [0, 1], ["cat", "dog"], (0, 1), (0, 1), (600, 400)) == ["top center"] * 2


def test_a_cluster_gets_one_label_above_one_below_and_leaves_the_rest_to_the_hover():
    where = place_labels([0.5] * 5, [0.5] * 5, ["one", "two", "three", "four", "five"], (0, 1), (0, 1), (600, 400))
    assert where == ["top center", "bottom center", None, None, None]


def test_no_two_placed_labels_overlap_on_random_points():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=80), rng.normal(size=80)
    texts = [f"word{i}" for i in range(80)]
    span = (x.min(), x.max()), (y.min(), y.max())
    where = place_labels(x, y, texts, *span, (600, 400))
    boxes = [
        box((xi - span[0][0]) / np.ptp(x) * 600, (yi - span[1][0]) / np.ptp(y) * 400, t, w)
        for xi, yi, t, w in zip(x, y, texts, where)
        if w
    ]
    assert 10 < len(boxes) < 80  # some fit, some would not
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_bars_written_beyond_their_ends_get_room_on_the_sides_that_have_bars():
    """Ask why's direct logit attribution writes each value past its bar's end: the axis reaches a
    fifth of the span beyond the longest bar on each side with bars (reference: the values)."""
    from glassbox.app.explore.why import value_room

    low, high = value_room(np.array([5.21, 0.4, -0.237, -0.0181]))
    assert low == pytest.approx(-0.237 - 0.2 * 5.447) and high == pytest.approx(5.21 + 0.2 * 5.447)
    assert value_room(np.array([0.3, 0.1])) == pytest.approx([0.0, 0.3 + 0.06])


def test_axes_never_use_si_prefixes():
    """Issue 44: a seq2seq loss axis read "50μ". Every chart drawn with the app's template (the
    default once charts.py is imported) writes ticks as powers of ten, plotly's "power" format,
    on both axes and on heatmaps' colour bars; plotly's own default ("B") is the SI one."""
    import plotly.graph_objects as go
    import plotly.io as pio

    assert pio.templates.default == "glassbox"
    fig = go.Figure([go.Bar(x=["a", "b"], y=[5e-5, 1e-4]), go.Heatmap(z=[[1e-6, 2e-6]])])
    template = fig.layout.template
    assert template.layout.xaxis.exponentformat == template.layout.yaxis.exponentformat == "power"
    assert template.data.heatmap[0].colorbar.exponentformat == "power"
    assert go.layout.Template(pio.templates["plotly_white"]).layout.yaxis.exponentformat in (None, "B")
