"""Issue 44 item 5: the positions lesson draws the turning (each sinusoidal pair on a dial, a RoPE
query and key turned by their positions), never shows a shuffle that moves nothing as a check, and
scales its learned-position heatmap.

References: the dials' arrows (drawn by the page: its JavaScript run by Node) against math.cos/sin
written here (1e-9); the rotation of
q and k against a 2 × 2 rotation in numpy (1e-12); the colour limit against numpy's percentile of
the stored W_pos; the captions against the three measured errors the page shows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from glassbox.model.course import positional_signals as positions
from glassbox.model.io.checkpoint import load
from tests.helpers import charts, page_functions, shown, start


def rotate(v, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]]) @ np.array(v)


def test_a_shuffle_of_two_or_more_tokens_always_moves_one():
    for n in range(2, 7):
        for seed in range(60):
            order = positions.shuffled_order(n, seed)
            assert sorted(order) == list(range(n)) and order != list(range(n))
    assert positions.shuffled_order(1, 0) == [0]
    assert positions.shuffled_order(6, 0) == [2, 5, 3, 0, 1, 4]  # the lesson's own, as before


def test_the_turning_by_hand():
    for pair in (0, 3, 31):
        omega = 10000 ** (-2 * pair / 64)
        angles = positions.pair_angles(32, 64, pair)
        assert np.allclose(np.cos(angles), [math.cos(p * omega) for p in range(32)], atol=1e-9)
        assert np.allclose(np.sin(angles), [math.sin(p * omega) for p in range(32)], atol=1e-9)
    for m in (0, 3, 17):
        assert np.allclose(positions.rope_rotated((1.0, 0.5), 0.3, m), rotate((1.0, 0.5), 0.3 * m), atol=1e-12)


def test_the_page_draws_the_dials_and_says_what_a_one_token_shuffle_checks(tmp_path):
    at = start("course/positional_signals.py")
    at.slider(key="positions_rope_m").set_value(4).run()
    at.slider(key="positions_rope_n").set_value(9).run()
    assert not at.exception
    figures = charts(at)
    # the sinusoids' dials are drawn by the page (app/components/lesson_controls.js): its dials at k = 3, run by Node
    sent = next(d for d in (json.loads(c.proto.json) for c in at.get("bidi_component")) if d.get("kind") == "positions")
    (dials,) = page_functions(tmp_path, "dials", [[sent["base"], 64, 3]], "lesson_controls.js")
    assert [dial["pair"] for dial in dials] == [0, 8, 31]  # d = 64: the fastest pair, ω = 0.1, the slowest
    for dial in dials:
        omega = 10000 ** (-2 * dial["pair"] / 64)
        assert tuple(dial["tip"]) == pytest.approx((math.cos(3 * omega), math.sin(3 * omega)), abs=1e-9)
    dial = next(f for f in figures if f["layout"].get("title", {}).get("text", "").startswith("<b>RoPE"))
    tips = [(a["x"], a["y"]) for a in dial["layout"]["annotations"] if a.get("arrowwidth") == 3]
    assert tips[0] == pytest.approx(tuple(rotate((1.0, 0.5), 0.3 * 4)), abs=1e-12)
    assert tips[1] == pytest.approx(tuple(rotate((0.8, -0.3), 0.3 * 9)), abs=1e-12)
    expected = rotate((1.0, 0.5), 1.2) @ rotate((0.8, -0.3), 2.7)
    assert f"q_m·k_n = {expected:.4f}" in dial["layout"]["title"]["text"]

    errors = [float(m.value) for m in at.metric[0:3]]
    caption = shown(" ".join(c.value for c in at.caption))
    assert errors[0] < 1e-4 and min(errors[1:]) > 1e-3
    assert f"it is {min(errors[1:]):.2g} or more" in caption and "as large as the weights" not in caption

    assert len(load("default").encode("the")) == 1
    at.text_input(key="positions_prompt").set_value("the").run()
    assert not at.exception
    assert [float(m.value) for m in at.metric[0:3]] == [0.0, 0.0, 0.0]
    caption = shown(" ".join(c.value for c in at.caption))
    assert "moves nothing, so all three checks read 0" in caption and "or more" not in caption


def test_the_learned_table_is_drawn_on_a_scale_that_shows_it():
    rows = load("default").model.pos_embed.W_pos[:32].detach().double().numpy()
    limit = float(np.percentile(np.abs(rows), 95))
    assert limit < np.abs(rows).max() / 4  # one outlier would have washed the map out
    assert np.median(np.abs(rows)) / limit > 0.25  # the bulk now takes a visible share of the scale
    at = start("course/positional_signals.py")
    table = next(
        f
        for f in charts(at)
        if "W_pos" in f["layout"].get("title", {}).get("text", "") or "W_pos" in str(f["layout"].get("annotations", ""))
    )
    assert table["data"][0]["zmax"] == pytest.approx(limit, rel=1e-6)
    assert table["data"][0]["xgap"] == 0 if "xgap" in table["data"][0] else True
