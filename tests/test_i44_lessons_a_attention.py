"""Issue 44 item 7: attention by hand's vector plot writes no label outside the plot, over another
label or over another vector's marker, for any token and any query (the 180°, length-3 corner
included), and says that the value vectors are ours.

The plot is drawn in the page (app/components/lesson_controls.js): its placement is run by Node on
what the page is sent. Reference: each written label's box recomputed here from its side ("top
right", …) and the text's length (about 7 px a character, 15 px a line, at the plot's ~60 px a
unit), independently of the page's placement code, and checked against the plot's range, every
marker and every arrow's shaft (sampled at 341 points)."""

from __future__ import annotations

import json

import pytest

from glassbox.model.course.attention_by_hand import TOKENS
from tests.helpers import page_functions, shown, start

SPAN = 3.3  # the plot's range, ± on both axes
CHAR, LINE, PAD, MARKER = 0.12, 0.3, 0.05, 0.09
CASES = [(180, 3.0), (-180, 3.0), (90, 3.0), (-90, 3.0), (0, 3.0), (45, 2.0), (135, 3.0), (-135, 3.0), (-30, 1.2), (160, 2.4)]


def box(x, y, text, position):
    v, h = position.split()
    width = CHAR * len(text) + 0.1
    left = {"right": x + PAD, "left": x - PAD - width, "center": x - width / 2}[h]
    bottom = {"top": y + PAD, "bottom": y - PAD - LINE, "middle": y - LINE / 2}[v]
    return left, bottom, left + width, bottom + LINE


def apart(a, b):
    return a[2] <= b[0] or a[0] >= b[2] or a[3] <= b[1] or a[1] >= b[3]


def labels(placed):
    """(box, text, tip) of every written label, and every marker's (x, y), from the page's placement."""
    written = []
    for p in placed["points"]:
        if p.get("position"):
            written.append((box(p["x"], p["y"], p["text"], p["position"]), p["text"], (p["x"], p["y"])))
        elif p.get("spot"):  # a label set off its tip, on a leader line: centred at the spot
            (cx, cy), width = p["spot"], CHAR * len(p["text"]) + 0.1
            written.append(((cx - width / 2, cy - LINE / 2, cx + width / 2, cy + LINE / 2), p["text"], (p["x"], p["y"])))
    return written, [(p["x"], p["y"]) for p in placed["points"]]


@pytest.fixture(scope="module")
def at():
    return start("course/attention_by_hand.py")


@pytest.fixture(scope="module")
def sent(at):
    return next(d for d in (json.loads(c.proto.json) for c in at.get("bidi_component")) if d.get("kind") == "attention")


@pytest.fixture(scope="module")
def placements(sent, tmp_path_factory):
    calls = [[sent, token, angle, length] for angle, length in CASES for token in TOKENS]
    done = page_functions(tmp_path_factory.mktemp("labels"), "attentionLabels", calls, "lesson_controls.js")
    return {(token, angle, length): placed for (_, token, angle, length), placed in zip(calls, done)}


@pytest.mark.parametrize("angle,length", CASES)
def test_no_label_is_clipped_or_covers_another_or_a_marker(sent, placements, angle, length):
    assert sent["geometry"]["SPAN"] == SPAN
    for token in TOKENS:
        placed = placements[(token, angle, length)]
        written, markers = labels(placed)
        texts = [t for _, t, _ in written]
        assert f"q({token})" in texts and "output" in texts  # the query's and the output's labels are always written
        for i, (b, text, tip) in enumerate(written):
            assert -SPAN <= b[0] and b[2] <= SPAN and -SPAN <= b[1] and b[3] <= SPAN, (token, text, b)
            for other, *_ in written[i + 1 :]:
                assert apart(b, other), (token, text)
            for x, y in placed["arrows"]:  # no label crosses an arrow's shaft (up to 0.9 of it: the tip is its marker)
                for t in [i / 400 for i in range(20, 361)]:
                    assert not (b[0] < t * x < b[2] and b[1] < t * y < b[3]), (token, text, (x, y))
            for m in markers:
                if m != tip:
                    assert apart(b, (m[0] - MARKER, m[1] - MARKER, m[0] + MARKER, m[1] + MARKER)), (token, text, m)


def test_the_page_says_the_values_are_ours(at, sent):
    text = shown(sent["caption"] + " " + " ".join(m.value for m in at.markdown))
    assert "the values v, which are ours" in text and "the value vectors are ours" in text
