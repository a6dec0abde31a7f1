"""A lesson's small math answered in the page (lesson_controls.js): the lesson's fixed numbers are
sent once and a slider redraws at once, with no rerun. The page's arithmetic is the engine's
written again; tests/test_course_in_page.py holds it to the lesson module's to 1e-12."""

from __future__ import annotations

from glassbox.app.components.page_kit import page_component

_component = page_component("glassbox_lesson_controls", "lesson_controls.js", "lesson_controls.css")


def saturation(
    scores: list[float], scales: list[float], curve: list[float], value: float, limits: tuple[float, float, float], key: str
) -> None:
    """sqrt-dk's score multiplier: the softmax of ``scores`` × c and its Jacobian's norm at the
    learner's c, computed in the page; ``curve``, the norm at each of ``scales``, computed here."""
    low, high, step = limits
    _component(
        data={
            "kind": "saturation",
            "label": "Score multiplier c",
            "scores": scores,
            "scales": scales,
            "curve": curve,
            "slider": {"min": low, "max": high, "step": step, "value": value},
            "x_title": "c: the scores [1.0, 0.0125, −0.0375] × c",
            "y_title": "‖diag(p) − p·pᵀ‖ (Frobenius)",
        },
        key=key,
    )


def attention(
    tokens: tuple[str, ...],
    keys,
    values,
    queries: dict[str, tuple[float, float]],
    d_k: int,
    walkthrough: tuple[str, float, float],
    geometry: dict,
    colours: dict,
    caption: str,
    key: str,
) -> None:
    """Attention by hand: the token, its query's angle and length and the walk-through preset, the
    vectors' plot (labels placed as ``geometry`` says), the scores, weights and output, and every
    token's q_i·k_j, all computed in the page from the lesson's four tokens' vectors sent here;
    ``caption`` is written under the plot."""
    from glassbox.app.components.labels import NEGLIGIBLE
    from glassbox.model.plot.heatmap import colour_stops

    token, angle, length = walkthrough
    _component(
        data={
            "kind": "attention",
            "tokens": list(tokens),
            "keys": [list(k) for k in keys],
            "values": [list(v) for v in values],
            "d_k": d_k,
            "queries": {t: [int(a), float(n)] for t, (a, n) in queries.items()},
            "walkthrough": {"token": token, "angle": int(angle), "length": float(length)},
            "angle": {"min": -180, "max": 180, "step": 1},
            "length": {"min": 0.0, "max": 3.0, "step": 0.1},
            "geometry": geometry,
            "colours": colours,
            "caption": caption,
            "negligible": NEGLIGIBLE,
            "palette": colour_stops("diverging", 256),
        },
        key=key,
    )


def positions(
    base: float,
    positions: int,
    widths: tuple[int, ...],
    width: int,
    offsets: tuple[int, int],
    between: str,
    caption: str,
    colours: dict,
    key: str,
) -> None:
    """The positions lesson's sinusoids: the table PE(pos, ·) for ``positions`` rows at a width d
    (one of ``widths``), an offset k (``offsets``: lowest, highest), each pair turning on a dial
    and the largest error of the rotation M_k, all computed in the page; ``between`` is written
    between the table and the offset, ``caption`` under the error."""
    from glassbox.model.plot.heatmap import colour_stops

    low, high = offsets
    _component(
        data={
            "kind": "positions",
            "base": base,
            "positions": positions,
            "d": {"options": list(widths), "value": width},
            "k": {"min": low, "max": high, "step": 1, "value": low},
            "between": between,
            "caption": caption,
            "colours": colours,
            "palette": colour_stops("diverging", 256),
        },
        key=key,
    )
