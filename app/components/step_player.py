"""The worked example, played in the page (step_player.js): every step's grids, every output
cell's arithmetic and the update's payoff are sent to the browser once, so stepping (◀ ▶, the
arrow keys, the jump list), choosing a head or a weight and clicking a cell answer at once, with
no round trip to the server. The step lives in the URL (?step=), written by the page.

Everything shown is computed here from the engine's steps (``model.worked_example.steps``) and only
laid out by the script: the cells' text and colours, the LaTeX of each cell's arithmetic."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import streamlit as st

from glassbox.app.components.heatmap import grid_colour, grid_text
from glassbox.app.components.labels import pretty
from glassbox.app.components.latex import wrapped, written
from glassbox.app.components.page_kit import katex_module, page_component
from glassbox.app.components.pipeline import pipeline_html
from glassbox.model.course import LESSON, LESSONS, lessons_for_step
from glassbox.model.engine import block_label
from glassbox.model.plot.heatmap import abs_max, cell_fills, colour_stops
from glassbox.model.worked_example.steps import Grid, Step, stages
from glassbox.model.worked_example.training import AfterUpdate

PHASE_COLOURS = {"forward": "#1f6feb", "backward": "#d9480f", "update": "#2f9e44"}
TRAIN_PAGE = "screens/train_live.py"


def grid_payload(grid: Grid, zmax: float | None = None) -> dict:
    """One grid as the page draws it: cells' text, fills and exact values, its labels and scale."""
    power, text = grid_text(grid)
    colour = grid_colour(grid)
    top = 1.0 if grid.probability else zmax if zmax is not None else abs_max(grid.values)
    fills, inks = cell_fills(grid.values, colour, top)
    changed = grid.changed is not None and not grid.changed.all()
    n_rows, n_cols = grid.shape
    return {
        "label": grid.label,
        "title": pretty(grid.label),
        "power": power,
        "name": grid.name,
        "size": f"{n_rows}×{n_cols}",
        "provenance": grid.provenance or "",
        "rows": list(grid.rows),
        "cols": list(grid.cols),
        "row_title": grid.row_title,
        "col_title": grid.col_title,
        "text": text,
        "fill": fills,
        "ink": inks,
        "exact": [[repr(float(v)) for v in row] for row in grid.values],
        "changed": grid.changed.tolist() if changed else None,
        # the scale's ends in the grid's own unit (×10^power, as its cells are written)
        "scale": None
        if colour == "plain"
        else {
            "stops": colour_stops(colour),
            "high_text": f"{top / 10.0**power:.3g}",
            "low_text": "0" if colour == "sequential" else f"{-top / 10.0**power:.3g}",
        },
    }


def cell_payload(grid: Grid) -> list[list[dict]] | None:
    """Every cell's arithmetic: its LaTeX lines (long ones broken, see latex.written) and the input
    cells it reads (grid label, row or None for all, column or None)."""
    if grid.explain is None:
        return None
    cells = []
    for r in range(grid.shape[0]):
        row = []
        for c in range(grid.shape[1]):
            arithmetic = grid.explain(r, c)
            row.append({"lines": written(arithmetic.lines), "uses": [list(use) for use in arithmetic.uses]})
        cells.append(row)
    return cells


def first_cell(grid: Grid) -> list[int]:
    """Where a step opens: its first output's largest entry."""
    values = np.where(np.isfinite(grid.values), np.abs(grid.values), -1)
    return [int(i) for i in np.unravel_index(int(np.argmax(values)), values.shape)]


def comparison(grid: Grid, zmax: float | None = None) -> dict:
    """The article's printed figure beside the computed one, and their difference, on one scale
    (``zmax``: the step's; a 0.001 difference stays pale); a weight the article printed and that is
    used exactly, in a sentence."""
    printed_rows = [r for r in range(grid.shape[0]) if np.isfinite(grid.printed[r]).any()]
    difference = grid.values[printed_rows] - grid.printed[printed_rows]
    largest = float(np.nanmax(np.abs(difference)))
    label = pretty(grid.label)
    if grid.provenance == "printed by the article":
        return {"sentence": f"{label}: printed by the article and used exactly (largest difference {largest:.1e}).", "grids": []}
    rows = [grid.rows[r] for r in printed_rows]
    trio = [
        Grid(f"{label} computed", grid.name, grid.values[printed_rows], rows, grid.cols, grid.row_title, grid.col_title),
        Grid(
            f"{label} in the article",
            "printed to 3 decimals",
            grid.printed[printed_rows],
            rows,
            grid.cols,
            grid.row_title,
            grid.col_title,
        ),
        Grid(
            "computed − article",
            f"largest |difference| {largest:.4f}",
            difference,
            rows,
            grid.cols,
            grid.row_title,
            grid.col_title,
        ),
    ]
    top = max(abs_max(trio[0].values), abs_max(trio[1].values), zmax or 0.0)
    return {"sentence": "", "grids": [grid_payload(g, zmax=top) for g in trio]}


def after_payload(after: AfterUpdate, vocab: list[str]) -> dict:
    """The update's payoff: the forward pass again with the new weights, beside the old."""
    word = vocab[after.target_id]
    loss, p = after.loss, after.p_target
    others = len(vocab) - 1
    return {
        "metrics": [
            {
                "label": f"loss −log p({word})",
                "value": f"{loss[1]:.4f}",
                "delta": f"{loss[1] - loss[0]:+.4f} from {loss[0]:.4f}",
                "good": bool(loss[1] < loss[0]),
            },
            {
                "label": f"p({word})",
                "value": f"{p[1]:.4f}",
                "delta": f"{p[1] - p[0]:+.4f} from {p[0]:.4f}",
                "good": bool(p[1] > p[0]),
            },
        ],
        "train": {"label": "Train it live: many such steps →", "href": "train", "page": TRAIN_PAGE},
        "sentence": f"One step made “{word}” {p[1] / p[0]:.2f} times as likely. The probability it gained came from the "
        f"other {others} words, which held {1 - p[0]:.4f} together before and {1 - p[1]:.4f} after: a "
        "softmax's outputs always sum to 1. The learning rate η sets how far one step goes.",
        "words": list(vocab),
        "target": after.target_id,
        "before": [float(x) for x in after.probs[0]],
        "after": [float(x) for x in after.probs[1]],
    }


def pipeline(step: Step, n_layers: int) -> str:
    """The article's stages in forward order, the step's own filled (the strip the explorer draws too)."""
    colour = PHASE_COLOURS[step.phase]
    groups: list = []
    for stage, label in stages(n_layers):
        block = block_label(int(stage.split(".")[0][1:]) - 1) if "." in stage else None  # "b1.attn": block 1
        if not groups or groups[-1][0] != block or block is None:
            groups.append((block, []))
        groups[-1][1].append((label, stage == step.stage, 0, ""))
    direction = "← backward" if step.phase == "backward" else ("update" if step.phase == "update" else "forward →")
    return pipeline_html(groups, f"<b style='color:{colour}'>{direction}</b>", colour=colour)


def scale_group(grid: Grid) -> str:
    """Which of a step's colour scales a grid is drawn on: its gradients share one, its values another."""
    return "gradient" if grid.label.startswith("dL/d") else "value"


def step_scales(step: Step) -> dict[str, float]:
    """One colour scale per group for the whole step, every panel (head, weight) included: within a
    step one value has one colour (W and W_new, Q and K, head 1 and head 2 alike). Probabilities
    keep 0..1 and labels no colour."""
    tops: dict[str, float] = {}
    for panel in step.panels:
        for grid in panel.inputs + panel.outputs:
            if grid.quantity and not grid.probability:
                tops[scale_group(grid)] = max(tops.get(scale_group(grid), 0.0), abs_max(grid.values))
    return tops


def step_payload(step: Step, n_layers: int, vocab: list[str]) -> dict:
    panels = []
    tops = step_scales(step)
    draw = lambda g: grid_payload(g, zmax=tops.get(scale_group(g)))  # noqa: E731
    for panel in step.panels:
        outputs = [draw(g) | {"cells": cell_payload(g)} for g in panel.outputs]
        changed = [g.changed for g in panel.outputs if g.changed is not None]
        panels.append(
            {
                "label": panel.label,
                "inputs": [draw(g) for g in panel.inputs],
                "outputs": outputs,
                "first": first_cell(panel.outputs[0]),
                "changed": (
                    ""
                    if not changed
                    else "Every cell changed in this step."
                    if all(c.all() for c in changed)
                    else "Dotted outline: the cells this step changed; the others kept their value."
                ),
                "compared": [comparison(g, tops.get(scale_group(g))) for g in panel.outputs if g.printed is not None],
            }
        )
    lessons = [LESSON[slug] for slug in lessons_for_step(step.key)]
    return {
        "key": step.key,
        "phase": step.phase,
        "colour": PHASE_COLOURS[step.phase],
        "title": step.title,
        "sentence": step.sentence,
        "formula": wrapped(step.formula),
        "pipeline": pipeline(step, n_layers),
        "panels": panels,
        "after": after_payload(step.after, vocab) if step.after is not None else None,
        "lessons": [
            {"label": f"{LESSONS.index(lesson) + 1}. {lesson.title}", "href": lesson.url_path, "page": lesson.page}
            for lesson in lessons
        ],
    }


def player_payload(steps: list[Step], n_layers: int, vocab: list[str]) -> dict:
    """Everything the page shows, for every step (about 1 MB of JSON for the article's 67 steps)."""
    shown = [step_payload(step, n_layers, vocab) for step in steps]
    return {"steps": shown, "id": hashlib.sha1(json.dumps(shown).encode()).hexdigest()[:16]}


_component = page_component("glassbox_step_player", "step_player.js", "step_player.css")


def step_player(payload: dict, step: str | None, key: str = "step_player") -> None:
    """The worked example in the page, opening on ``step`` (the URL's) or, without one, on the step
    this browser tab showed last (or the first). Its links to other pages (Train it live, the
    lessons) come back here and are followed with ``st.switch_page``, so the session stays."""
    result = _component(data={**payload, "step": step, "katex": katex_module()}, key=key, on_navigate_change=lambda: None)
    if result.navigate is None:  # most runs: nothing followed, and the pages need not be gathered
        return
    pages = {TRAIN_PAGE} | {lesson["page"] for s in payload["steps"] for lesson in s["lessons"]}
    if result.navigate in pages:  # only the pages it links to: the message comes from a browser
        st.switch_page(result.navigate)
