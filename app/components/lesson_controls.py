"""A lesson's small math answered in the page (lesson_controls.js): the lesson's fixed numbers are
sent once and a slider redraws at once, with no rerun. The page's arithmetic is the engine's
written again; tests/test_course_in_page.py holds it to the lesson module's to 1e-12."""

from __future__ import annotations

from glassbox.app.components.page_kit import page_component

_component = page_component("glassbox_lesson_controls", "lesson_controls.js", "lesson_controls.css")


def saturation(scores: list[float], scales: list[float], curve: list[float], value: float,
               limits: tuple[float, float, float], key: str) -> None:
    """sqrt-dk's score multiplier: the softmax of ``scores`` × c and its Jacobian's norm at the
    learner's c, computed in the page; ``curve``, the norm at each of ``scales``, computed here."""
    low, high, step = limits
    _component(data={"kind": "saturation", "label": "Score multiplier c", "scores": scores, "scales": scales,
                      "curve": curve, "slider": {"min": low, "max": high, "step": step, "value": value},
                      "x_title": "c: the scores [1.0, 0.0125, −0.0375] × c",
                      "y_title": "‖diag(p) − p·pᵀ‖ (Frobenius)"}, key=key)
