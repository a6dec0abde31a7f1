"""Lessons' controls answered in the page (app/components/lesson_controls.js), and lessons that open
without training.

References: the lesson modules' own functions (torch float64: dot_product_scale's softmax and
jacobian_norm; attention_by_hand's attend and similarity; positional_signals' sinusoidal_table and
largest_shift_error) and numpy's ‖diag(p) − p·pᵀ‖ written here, against the page's JavaScript run by Node
(the one Playwright ships) on what the page is sent: equal to 1e-12 (float64 on both sides, sums taken
in another order); the page's number format against app/components/labels.py's ``number``, character
for character. The sqrt-dk page is opened with the lesson's training function replaced by one that
fails: it must open (on the shipped run) without calling it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import streamlit as st
import torch

from glassbox.app.components.labels import NEGLIGIBLE, cell_text, number
from glassbox.model.course import attention_by_hand as by_hand
from glassbox.model.course import dot_product_scale as scale
from glassbox.model.course import positional_signals as positional
from tests.helpers import page_functions, start

SCRIPT = "lesson_controls.js"
MULTIPLIERS = [0.25, 0.5, 1.0, 1.25, 2.0, 4.0, 7.75, 8.0, 12.5, 16.0, 24.0, 100.0, 1e-3]


def numpy_jacobian_norm(scores, c):
    p = np.exp(c * np.asarray(scores) - np.max(c * np.asarray(scores)))
    p /= p.sum()
    return float(np.linalg.norm(np.diag(p) - np.outer(p, p)))


@pytest.fixture(scope="module")
def sqrt_dk_page():
    return start("course/dot_product_scale.py")


def sent(at, kind: str) -> dict:
    return next(d for d in (json.loads(c.proto.json) for c in at.get("bidi_component")) if d.get("kind") == kind)


def test_the_pages_jacobian_norm_is_the_lessons(tmp_path, sqrt_dk_page):
    data = sent(sqrt_dk_page, "saturation")
    base = [s / 8 for s in scale.COURSE_SCORES]
    assert data["scores"] == base
    norms = page_functions(tmp_path, "jacobianNorm", [[data["scores"], c] for c in MULTIPLIERS], SCRIPT)
    softmaxes = page_functions(tmp_path, "softmax", [[[c * s for s in base]] for c in MULTIPLIERS], SCRIPT)
    for c, norm, p in zip(MULTIPLIERS, norms, softmaxes):
        assert norm == pytest.approx(scale.jacobian_norm(base, c), abs=1e-12), c
        assert norm == pytest.approx(numpy_jacobian_norm(base, c), abs=1e-12), c
        np.testing.assert_allclose(p, scale.softmax([c * s for s in base]), rtol=0, atol=1e-12)
    # the curve the page draws the learner's c on is the lesson's (computed by the server)
    for c, norm in zip(data["scales"], data["curve"]):
        assert norm == pytest.approx(numpy_jacobian_norm(base, c), abs=1e-12)
    assert data["slider"] == {"min": 0.25, "max": 24.0, "step": 0.25, "value": 1.0}


def test_the_page_writes_numbers_as_the_server_does(tmp_path):
    values = [0.0, -0.0, 1.0, 0.4634, -1e-12, 1.1e-10, 5e-5, 4.2e-7, 0.123456789, -2.5e-9, 123.456, float("inf")]
    for digits in (4, 6):
        written = page_functions(tmp_path, "numberText", [[v, digits] for v in values[:-1]], SCRIPT)
        assert written == [number(v, digits) for v in values[:-1]]
    assert number(1e-300, 6) == page_functions(tmp_path, "numberText", [[1e-300, 6]], SCRIPT)[0]


def test_the_sqrt_dk_page_opens_without_training(monkeypatch):
    """The wide-head comparison opens on the shipped runs (the page imports wide_head afresh each run:
    replaced here by one that fails, it is never called); Train it now calls it."""
    calls = []

    def no_training(d_head, settings=None):
        calls.append(d_head)
        raise AssertionError("trained on open")

    monkeypatch.setattr(scale, "wide_head", no_training)
    at = start("course/dot_product_scale.py")
    assert not at.exception and calls == []
    shipped = scale.shipped_wide_head(256)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[f"with the scale: mean loss, last {scale.TAIL} steps"] == f"{shipped['tail_scaled']:.3f} nats"
    monkeypatch.setattr(scale, "wide_head", lambda d_head, settings=None: calls.append(d_head) or shipped)
    # the page keeps a training per d_head in st.cache_data, which lives as long as this process: a
    # test that trained at 256 before, in this worker, would answer the click from it
    st.cache_data.clear()
    at.button(key="sqrtdk_train").click().run()
    assert calls == [256]


def test_the_shipped_wide_heads_are_the_lessons_runs():
    """Reference: the lesson's own wide_head at d_head = 16 trained here on one thread (0.3 s), as
    the shipped runs were: the same curves, to the last bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fresh = scale.wide_head(16)
    finally:
        torch.set_num_threads(threads)
    shipped = scale.shipped_wide_head(16)
    assert shipped["threads"] == 1
    assert shipped["scaled"] == fresh["scaled"] and shipped["unscaled"] == fresh["unscaled"]
    assert set(json.loads(scale.WIDE_FILE.read_text())["runs"]) == {str(d) for d in scale.WIDE_D_HEADS}


@pytest.fixture(scope="module")
def attention_sent():
    at = start("course/attention_by_hand.py")
    assert not at.exception
    return sent(at, "attention")


QUERY_CASES = [(p, a, n) for p in range(4) for a in (-180, -97, 0, 45, 133, 180) for n in (0.0, 0.1, 1.3, 3.0)]


def test_the_pages_attention_is_the_lessons(tmp_path, attention_sent):
    data = attention_sent
    assert data["tokens"] == list(by_hand.TOKENS) and data["d_k"] == by_hand.D_K
    assert data["queries"] == {t: [int(a), float(n)] for t, (a, n) in by_hand.QUERIES.items()}
    vectors = [data["keys"], data["values"], data["d_k"]]
    results = page_functions(tmp_path, "attend", [vectors + list(case) for case in QUERY_CASES], SCRIPT)
    for (position, angle, length), page in zip(QUERY_CASES, results):
        lesson = by_hand.attend(position, angle, length)
        for name in ("query", "scores", "weights", "output"):
            np.testing.assert_allclose(page[name], getattr(lesson, name).numpy(), rtol=0, atol=1e-12, err_msg=name)
        # −∞ (masked) travels through JSON as null
        assert [x is None for x in page["scaled"]] == [not lesson.visible(j) for j in range(4)]
        seen = lesson.scaled[: position + 1].numpy()
        np.testing.assert_allclose(page["scaled"][: position + 1], seen, rtol=0, atol=1e-12)
    queries = {t: (a, n) for t, (a, n) in zip(by_hand.TOKENS, [(30, 1.1), (-150, 2.9), (90, 0.0), (179, 0.4)])}
    (grid,) = page_functions(tmp_path, "similarity", [[data["keys"], [list(queries[t]) for t in by_hand.TOKENS]]], SCRIPT)
    np.testing.assert_allclose(grid, by_hand.similarity(queries).numpy(), rtol=0, atol=1e-12)


def test_the_pages_attention_numbers_are_written_as_the_server_writes_them(tmp_path):
    values = [by_hand.attend(p, a, n) for p, a, n in QUERY_CASES[::5]]
    numbers = [float(x) for r in values for x in (*r.scores, *r.weights, *r.output)]
    written = page_functions(tmp_path, "scoreText", [[x] for x in numbers], SCRIPT)
    assert written == [number(x) for x in numbers]
    matrix = by_hand.similarity(by_hand.QUERIES).numpy()
    largest = float(abs(matrix).max())
    cells = [float(v) for v in matrix.ravel()] + [1e-14, -1e-13, -0.004]
    written = page_functions(tmp_path, "cellText", [[v, largest, NEGLIGIBLE] for v in cells], SCRIPT)
    assert written == [cell_text(v, largest, ".2f") for v in cells]


def test_the_pages_sinusoids_are_the_lessons(tmp_path):
    at = start("course/positional_signals.py")
    assert not at.exception
    data = sent(at, "positions")
    assert (data["base"], data["positions"]) == (positional.BASE, positional.POSITIONS)
    widths = data["d"]["options"]
    tables = page_functions(tmp_path, "sinusoidalTable", [[data["base"], data["positions"], d] for d in widths], SCRIPT)
    for d, table in zip(widths, tables):
        np.testing.assert_allclose(table, positional.sinusoidal_table(positional.POSITIONS, d).numpy(), rtol=0, atol=1e-12)
    cases = [(k, d) for k in (1, 2, 9, 16) for d in widths]
    errors = page_functions(tmp_path, "largestShiftError", [[data["base"], k, d, data["positions"]] for k, d in cases], SCRIPT)
    for (k, d), error in zip(cases, errors):  # both are rounding: under 1e-12, and alike to 1e-14
        lesson = positional.largest_shift_error(k, d)
        assert error < 1e-12 and lesson < 1e-12 and abs(error - lesson) < 1e-14, (k, d)


def test_the_page_writes_g_and_e_formats_as_python_does(tmp_path):
    values = [
        1.0,
        0.1,
        0.000133,
        0.0764,
        57.29577951,
        0.00764,
        1e-5,
        123456.0,
        999.6,
        2.5e-16,
        0.30000000000000004,
        1234.5,
        0.0001,
        5.0,
    ]
    assert page_functions(tmp_path, "gFormat", [[v, 3] for v in values], SCRIPT) == [f"{v:.3g}" for v in values]
    assert page_functions(tmp_path, "eFormat", [[v, 2] for v in values + [0.0]], SCRIPT) == [f"{v:.2e}" for v in values + [0.0]]


def test_the_lesson_bench_reports_each_time_against_its_target():
    """app/bench/lessons.py's table: a control in the page is held to 0.1 s, a rerun to 0.5 s, first
    paints to 5 s cold and 2 s warm (the issue's targets); a lesson not drawn says so."""
    from glassbox.app.bench.lessons import table

    def moves(*drawn):
        return [{"drawn_s": d, "server_s": 0.0} for d in drawn]

    rows = table(
        [
            {
                "slug": "attention",
                "cold_s": 4.9,
                "warm_s": 2.1,
                "control": {"label": "Angle", "where": "in the page", "moves": moves(0.01, 0.2, 0.02)},
            },
            {
                "slug": "mask",
                "cold_s": 5.1,
                "warm_s": 1.0,
                "control": {"label": "Head", "where": "rerun", "moves": moves(0.4, 0.45, 0.9)},
            },
            {
                "slug": "mlp",
                "cold_s": 1.0,
                "warm_s": 1.0,
                "control": {
                    "label": "Neuron",
                    "where": "rerun",
                    "moves": moves(0.2),
                    "error": "the page was not drawn again within 60 s",
                },
            },
            {"slug": "tokens", "error": "not drawn within 300 s"},
        ]
    ).splitlines()
    assert rows[2] == "| attention | 4.90 s ✓ | 2.10 s ✗ | Angle | in the page | 0.020 s ✓ | 0.00 s | ≤ 0.1 s |"
    assert rows[3] == "| mask | 5.10 s ✗ | 1.00 s ✓ | Head | rerun | 0.450 s ✓ | 0.00 s | ≤ 0.5 s |"
    assert "the page was not drawn again within 60 s" in rows[4] and rows[5].startswith("| tokens | not drawn within 300 s |")


def test_the_shipped_variances_are_the_lessons_samples(sqrt_dk_page):
    """Reference: the lesson's own sampled_variances (seed 0) sampled again here for d_k = 4 … 64
    (the generator draws each d_k in turn, so these are the shipped rows' first five; the rest
    would take 1–2 s): equal to 1e-12 (a variance's sum may be split otherwise on other threads)."""
    shipped = scale.shipped_variances()
    assert [r["d_k"] for r in shipped["rows"]] == scale.D_KS and shipped["command"] == "glassbox course sqrt-dk --remeasure"
    for again, row in zip(scale.sampled_variances(scale.D_KS[:5]), shipped["rows"]):
        assert again["variance"] == pytest.approx(row["variance"], rel=1e-12)
        assert again["scaled_variance"] == pytest.approx(row["scaled_variance"], rel=1e-12)
    assert any("Sampled once (seed 0) by `glassbox course sqrt-dk --remeasure`" in c.value for c in sqrt_dk_page.caption)
