"""What the Backward view sends its in-page steps (app/components/backward_player.py): a step's
gradients as the page draws them, each the window of its grid a heatmap would show (exact, or
block means past MAX_ROWS × MAX_COLS, narrowed by the view's zoom sliders), kept with the trace;
and the address where the page fetches any other step itself (app/served.py)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np

from glassbox.app import served
from glassbox.app.explore.common import MAX_COLS, MAX_ROWS, Explorer, derived, window, zoom_range
from glassbox.model.engine import GRAD, Trace
from glassbox.model.plot.grid import tensor_grid
from glassbox.model.plot.heatmap import abs_max

Zooms = tuple[tuple[str, tuple[int, int]], ...]  # (slider key, (first, past the last)): the view's zoom sliders' values


def cached_grid(ctx: Explorer, trace: Trace, name: str, head: int, expert: int = 0):
    """``tensor_grid`` of a traced gradient, made once per trace: ∂L/∂logits alone is T × vocabulary."""
    return derived(trace, ("grad grid", name, head, expert), lambda: tensor_grid(ctx, name, trace[name], head, expert))


def zoom_key(name: str) -> str:
    """The zoom sliders' key of a step's tensor (``:rows``, ``:cols`` appended), as heatmap() names them."""
    return "bw:" + name.removeprefix(GRAD)


def grid_payload(ctx: Explorer, trace: Trace, name: str, head: int, expert: int, zooms: dict, cell: bool) -> dict:
    """One gradient as the page draws it: its window (``window``), float32 in base64, labelled."""
    values, rows, cols, row_title, col_title, note = cached_grid(ctx, trace, name, head, expert)
    # the sliders' values as set (common.zoom_span draws them below the maps, after this is sent)
    r0, r1 = zoom_range(values.shape[0], MAX_ROWS, zooms.get(zoom_key(name) + ":rows"))
    c0, c1 = zoom_range(values.shape[1], MAX_COLS, zooms.get(zoom_key(name) + ":cols"))
    shown, shown_rows, shown_cols, exact = window(values, rows, cols, r0, r1, c0, c1)
    size = f"{name.removeprefix(GRAD)}{note}: {values.shape[0]}×{values.shape[1]}"
    if (r0, r1, c0, c1) != (0, values.shape[0], 0, values.shape[1]):
        size += f", rows {r0}–{r1 - 1} and columns {c0}–{c1 - 1} shown"
    if not exact:
        size += f"; drawn as block means ({r1 - r0}×{c1 - c0} → {shown.shape[0]}×{shown.shape[1]}): zoom below for exact values"
    if not np.any(shown):  # an expert no position chose, a position past the one the loss reads
        size += "; every entry exactly 0: no gradient reaches it"
    return {
        "name": name,
        "title": "∂L/∂" + name.removeprefix(GRAD).split(".")[-1] + note,
        "label": name + note,
        "rows": list(shown_rows),
        "cols": list(shown_cols),
        "row_title": row_title,
        "col_title": col_title,
        "values": base64.b64encode(np.ascontiguousarray(shown, dtype="<f4").tobytes()).decode("ascii"),
        "bytes": 4,  # tensor_grid's values are float32 (every model's gradients are drawn so)
        "exact": exact,
        "cell": cell and exact,  # a cell's arithmetic is written for the step's tensors, not its weights
        "r0": r0,
        "c0": c0,
        "zmax": abs_max(shown),
        "size": size,
    }


def step_payload(ctx: Explorer, trace: Trace, steps: list, index: int, head: int, expert: int, zooms: Zooms) -> dict:
    """Backward step ``index`` for the page: its gradients (``grid_payload``; those not on this
    loss's path named), with its title and sentence; kept with the trace."""

    def build() -> dict:
        step, zoom = steps[index], dict(zooms)
        present = [n for n in step.names if n in trace.grads]
        grids = [grid_payload(ctx, trace, n, head, expert, zoom, True) for n in present]
        grids += [grid_payload(ctx, trace, GRAD + w, head, expert, zoom, False) for w in step.weights]
        missing = [n for n in step.names if n not in trace.grads]
        return {
            "index": index,
            "key": step.key,
            "title": step.title,
            "sentence": step.sentence,
            "grids": grids,
            "missing": missing,
        }

    return derived(trace, ("backward step in the page", index, head, expert, zooms, tuple(ctx.labels)), build)


def fetch_address(
    ctx: Explorer, trace: Trace, steps: list, head: int, expert: int, zooms: Zooms, answerable: Callable[[int], bool]
) -> str:
    """Where the page fetches any step of ``trace`` that ``answerable`` allows (a whole trace: every
    one; a large model's trace of one block: that block's) itself (app/served.py); one token per
    trace, head, expert, zoom and prompt, so the element (and its address) stays the same across reruns."""

    def answer(trace: Trace, index: int) -> dict | None:
        ok = 0 <= index < len(steps) and answerable(index)
        return step_payload(ctx, trace, steps, index, head, expert, zooms) if ok else None

    key = ("served backward", head, expert, zooms, tuple(ctx.labels))
    return served.address(derived(trace, key, lambda: served.register(trace, answer)))
