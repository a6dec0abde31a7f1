"""Tensors out of the browser: one tensor as CSV, a whole trace as .npz."""

from __future__ import annotations

import io

import numpy as np

from glassbox.model.engine import Trace


def to_csv(array: np.ndarray, axes: tuple[str, ...]) -> str:
    """One row per cell: its index along every axis, then its value, with enough digits to
    read back the exact float (17 for float64, 9 for float32)."""
    array = np.asarray(array)
    index = np.indices(array.shape).reshape(array.ndim, -1).T
    table = np.column_stack([index.astype(np.float64), array.ravel().astype(np.float64)])
    digits = 9 if array.dtype == np.float32 else 17
    buffer = io.StringIO()
    np.savetxt(
        buffer, table, fmt=["%d"] * array.ndim + [f"%.{digits}g"], delimiter=",", header=",".join(axes + ("value",)), comments=""
    )
    return buffer.getvalue()


def npz_bytes(trace: Trace) -> bytes:
    buffer = io.BytesIO()
    # mypy matches the arrays' dict against savez's allow_pickle flag too; no tensor is named so
    np.savez(buffer, **trace.to_numpy())  # type: ignore[arg-type]
    return buffer.getvalue()
