"""Large arrays made small enough to draw: block means, and many panels tiled into one."""

from __future__ import annotations

import numpy as np


def downsample(values: np.ndarray, max_rows: int, max_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of blocks of adjacent cells so that the result is at most max_rows × max_cols.
    Returns it with the first row and column index of each block. NaN cells are left out of
    the means (−∞, a masked score, counts as NaN here)."""
    values = np.asarray(values, dtype=np.float32)
    row_starts = np.unique(np.linspace(0, values.shape[0], min(max_rows, values.shape[0]) + 1).astype(int))[:-1]
    col_starts = np.unique(np.linspace(0, values.shape[1], min(max_cols, values.shape[1]) + 1).astype(int))[:-1]
    if np.isfinite(values).all():  # the common case: plain block means, rows first (the big reduction)
        sums = np.add.reduceat(np.add.reduceat(values, row_starts, 0), col_starts, 1)
        counts = np.outer(np.diff(np.append(row_starts, values.shape[0])), np.diff(np.append(col_starts, values.shape[1])))
        return (sums / counts).astype(np.float32), row_starts, col_starts
    values = np.where(np.isfinite(values), values, np.nan)
    present = ~np.isnan(values)
    sums = np.add.reduceat(np.add.reduceat(np.where(present, values, 0), row_starts, 0), col_starts, 1)
    counts = np.add.reduceat(np.add.reduceat(present.astype(np.float32), row_starts, 0), col_starts, 1)
    with np.errstate(invalid="ignore"):
        return (sums / counts).astype(np.float32), row_starts, col_starts


def tile(panels: list[list[np.ndarray]], size: int) -> np.ndarray:
    """A grid of square panels (each downsampled to at most size × size) in one array, NaN in
    the one-cell gutters: one heatmap draws all layers × heads at once."""
    n_rows, n_cols = len(panels), len(panels[0])
    out = np.full((n_rows * (size + 1) - 1, n_cols * (size + 1) - 1), np.nan, dtype=np.float32)
    for r, row in enumerate(panels):
        for c, panel in enumerate(row):
            small = downsample(panel, size, size)[0]
            out[r * (size + 1) : r * (size + 1) + small.shape[0], c * (size + 1) : c * (size + 1) + small.shape[1]] = small
    return out
