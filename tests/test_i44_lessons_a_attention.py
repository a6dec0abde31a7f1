"""Issue 44 item 7: attention by hand's vector plot writes no label outside the plot, over another
label or over another vector's marker, for any token and any query (the 180°, length-3 corner
included), and says that the value vectors are ours.

Reference: each written label's box recomputed here from plotly's textposition and the text's
length (about 7 px a character, 15 px a line, at the plot's ~60 px a unit), independently of the
page's placement code, and checked against the plot's range, every marker and every arrow's shaft
(sampled at 341 points)."""

from __future__ import annotations

import pytest

from glassbox.model.course.attention_by_hand import TOKENS
from tests.helpers import charts, shown, start

SPAN = 3.3  # the plot's range, ± on both axes
CHAR, LINE, PAD, MARKER = 0.12, 0.3, 0.05, 0.09


def box(x, y, text, position):
    v, h = position.split()
    width = CHAR * len(text) + 0.1
    left = {"right": x + PAD, "left": x - PAD - width, "center": x - width / 2}[h]
    bottom = {"top": y + PAD, "bottom": y - PAD - LINE, "middle": y - LINE / 2}[v]
    return left, bottom, left + width, bottom + LINE


def apart(a, b):
    return a[2] <= b[0] or a[0] >= b[2] or a[3] <= b[1] or a[1] >= b[3]


def labels(chart):
    """(box, text) of every written label, and every marker's (x, y)."""
    points = [t for t in chart["data"] if t.get("mode", "").startswith("markers")]
    written = [(box(t["x"][0], t["y"][0], t["text"][0], t["textposition"]), t["text"][0], (t["x"][0], t["y"][0]))
               for t in points if "text" in t["mode"]]
    for a in chart["layout"]["annotations"]:  # a label set off its tip, on a leader line: centred at (ax, ay)
        if a.get("text"):
            width = CHAR * len(a["text"]) + 0.1
            written.append(((a["ax"] - width / 2, a["ay"] - LINE / 2, a["ax"] + width / 2, a["ay"] + LINE / 2),
                            a["text"], (a["x"], a["y"])))
    return written, [(t["x"][0], t["y"][0]) for t in points]


@pytest.fixture(scope="module")
def at():
    return start("course/attention_by_hand.py")


@pytest.mark.parametrize("angle,length", [(180, 3.0), (-180, 3.0), (90, 3.0), (-90, 3.0), (0, 3.0), (45, 2.0),
                                          (135, 3.0), (-135, 3.0), (-30, 1.2), (160, 2.4)])
def test_no_label_is_clipped_or_covers_another_or_a_marker(at, angle, length):
    ax = None
    for token in TOKENS:
        at.radio(key="attn_token").set_value(token).run()
        at.slider(key="attn_angle").set_value(angle).run()
        at.slider(key="attn_length").set_value(length).run()
        assert not at.exception
        chart = charts(at)[0]
        written, markers = labels(chart)
        arrows = [(a["x"], a["y"]) for a in chart["layout"]["annotations"] if a.get("showarrow") and not a.get("text")]
        texts = [t for _, t, _ in written]
        assert f"q({token})" in texts and "output" in texts  # the query's and the output's labels are always written
        for i, (b, text, tip) in enumerate(written):
            assert -SPAN <= b[0] and b[2] <= SPAN and -SPAN <= b[1] and b[3] <= SPAN, (token, text, b)
            for other, *_ in written[i + 1:]:
                assert apart(b, other), (token, text)
            for x, y in arrows:  # no label crosses an arrow's shaft (up to 0.9 of it: the tip is its marker)
                for t in [i / 400 for i in range(20, 361)]:
                    assert not (b[0] < t * x < b[2] and b[1] < t * y < b[3]), (token, text, (x, y))
            for m in markers:
                if m != tip:
                    assert apart(b, (m[0] - MARKER, m[1] - MARKER, m[0] + MARKER, m[1] + MARKER)), (token, text, m)
        ax = chart["layout"]["xaxis"]["range"]
    assert ax == [-SPAN, SPAN]


def test_the_page_says_the_values_are_ours(at):
    text = shown(" ".join(c.value for c in at.caption) + " " + " ".join(m.value for m in at.markdown))
    assert "the values v, which are ours" in text and "the value vectors are ours" in text
