"""Long written arithmetic broken into lines (app/components/latex.py). Reference: the worked
example's own arithmetic, every output cell of all 67 steps: after breaking, each display line
holds at most 80 visible characters, and the lines hold the same terms in the same order (the
alignment marks and line breaks removed, the text is the original's)."""

import itertools
import re

from app.components.latex import LINE, visible, wrapped
from model.io.checkpoint import load
from model.lesson.article import published
from model.lesson.steps import worked_example_steps


def widest(display: str) -> int:
    """The visible width of a display line: an aligned block's is its left-hand side plus its widest right."""
    if not display.startswith(r"\begin{aligned}"):
        return visible(display)
    rows = display.removeprefix(r"\begin{aligned} ").removesuffix(r" \end{aligned}").split(r" \\ ")
    left = rows[0].split("&")[0]
    return max(visible(left) + visible(row.split("&", 1)[1]) for row in rows)


def unwrapped(lines: list[str]) -> str:
    text = " ".join(lines).replace(r"\begin{aligned}", "").replace(r"\end{aligned}", "")
    text = text.replace(r"\quad", "").replace(r"\\", "").replace("&", "")
    return re.sub(r"[\s,]+", "", text)


def test_every_worked_example_line_fits_and_keeps_its_terms():
    loaded = load("worked-example")
    lines = []
    for step in worked_example_steps(loaded.model, loaded.tokenizer, published(), lambda w: ""):
        lines.append(step.formula)
        for grid in (g for p in step.panels for g in p.outputs if g.explain):
            for r, c in itertools.product(*map(range, grid.shape)):
                lines += grid.explain(r, c).lines
    long = [line for line in lines if visible(line) > LINE]
    assert len(long) > 100  # the worked example has lines that need breaking
    for line in lines:
        shown = wrapped(line)
        assert all(widest(display) <= 80 for display in shown), shown
        assert unwrapped(shown) == re.sub(r"[\s,]+", "", line.replace(r"\quad", "")), line


def test_short_lines_and_lines_without_an_equals_sign_stay_as_they_are():
    assert wrapped("a = b") == ["a = b"]
    sum_only = " + ".join(["0.1234"] * 30)
    assert wrapped(sum_only) == [sum_only]
