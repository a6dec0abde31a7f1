"""Long written arithmetic broken into lines (app/components/latex.py). Reference: the worked
example's own arithmetic, every output cell of all 67 steps: after breaking, each display line
holds at most 80 visible characters, and the lines hold the same terms in the same order (the
alignment marks and line breaks removed, the text is the original's)."""

import itertools
import re

from glassbox.app.components.latex import LINE, visible, wrapped, written
from glassbox.model.io.checkpoint import load
from glassbox.model.worked_example.article import published
from glassbox.model.worked_example.steps import worked_example_steps


def widest(display: str) -> int:
    """The visible width of a display line: an aligned block's is its left-hand side plus its widest right."""
    if not display.startswith(r"\begin{aligned}"):
        return visible(display)
    rows = display.removeprefix(r"\begin{aligned} ").removesuffix(r" \end{aligned}").split(r" \\ ")
    left = rows[0].split("&")[0]
    return max(visible(left) + visible(row.split("&", 1)[1]) for row in rows)


def unwrapped(lines: list[str]) -> str:
    text = " ".join(lines).replace(r"\begin{aligned}", "").replace(r"\end{aligned}", "")
    text = text.replace(r"\quad", "").replace(r",\ ", "").replace(r"\\", "").replace("&", "")
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
        assert unwrapped(shown) == re.sub(r"[\s,]+", "", line.replace(r"\quad", "").replace(r",\ ", "")), line


def test_short_lines_and_lines_without_an_equals_sign_stay_as_they_are():
    assert wrapped("a = b") == ["a = b"]
    sum_only = " + ".join(["0.1234"] * 30)
    assert wrapped(sum_only) == [sum_only]


def test_a_chain_of_arithmetic_is_one_block_with_its_sum_continued_under_it():
    """Step 48's ∂Q cell: a five-term sum the engine writes over two lines, then its value. Written
    as one aligned block: the sum's head, each "= …" under it, the sum's continuation indented;
    every cell of every step keeps its terms and fits (reference: the lines as the engine writes them)."""
    lines = [
        r"\sum_k \partial L/\partial\,\text{scores(2,1)}_{4,k}\,\text{K(2,1)}_{k,1}",
        r"= (-0.0016)\times(-0.4196) + 0.0024\times0.2552 + (-0.0013)\times(-0.6132) + 0.0030\times0.2996",
        r"+ (-0.0024)\times(-0.7009)",
        "= 0.0047",
        r"0.0047 / \sqrt{2} = 0.0033",
    ]
    (block, last) = written(lines)
    assert block.startswith(r"\begin{aligned} & \sum_k") and block.count("&= ") == 2  # the sum, then its value
    assert r"\\ &\quad + " in block and block.index(r"(-0.7009)") < block.index("&= 0.0047")  # continued, in order
    assert last == lines[-1]
    loaded = load("worked-example")
    for step in worked_example_steps(loaded.model, loaded.tokenizer, published(), lambda w: ""):
        for grid in (g for p in step.panels for g in p.outputs if g.explain):
            for r, c in itertools.product(*map(range, grid.shape)):
                cell = grid.explain(r, c).lines
                shown = written(cell)
                assert all(widest(display) <= 80 for display in shown), shown
                assert unwrapped(shown) == re.sub(r"[\s,]+", "", " ".join(cell).replace(r"\quad", "").replace(r",\ ", "")), cell


def test_statements_side_by_side_go_on_lines_of_their_own():
    """The Backward view's LayerNorm cell: four statements joined by ",\\ " on one long line become
    four lines, not one chain of "=" (reference: the statements as written)."""
    line = (
        r"g = \partial L/\partial\,\text{blocks.0.ln1.out}\times\gamma,\ \bar g = 0.00123456,\ "
        r"\overline{g\hat x} = -0.00234567,\ \sigma_{3,1} = 1.02345678"
    )
    assert wrapped(line) == [
        r"g = \partial L/\partial\,\text{blocks.0.ln1.out}\times\gamma",
        r"\bar g = 0.00123456",
        r"\overline{g\hat x} = -0.00234567",
        r"\sigma_{3,1} = 1.02345678",
    ]
