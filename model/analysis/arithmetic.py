"""One cell's arithmetic, written out: what the worked example's steps and any model's backward
pass (gradient_cells.py) explain a clicked cell with."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Arithmetic:
    """How one cell is computed: LaTeX lines with the operands written out, the value those
    operands give, and the input cells it reads ((grid label, row or None, column or None))."""

    lines: list[str]
    value: float
    uses: list[tuple[str, int | None, int | None]] = field(default_factory=list)
