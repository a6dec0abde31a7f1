"""The worked example, step by step: the article's forward pass, backward pass and update,
every grid computed by the engine, any cell's arithmetic on demand."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app.components.course import lessons_about
from app.components.errors import fragment
from app.components.charts import paired_bars, show
from app.components.heatmap import PAGE_PX, abs_max, grid_figure, shared_scales
from app.components.labels import HIGHLIGHT, plain, pretty
from app.components.latex import wrapped
from app.components.pipeline import pipeline_strip
from app.components.stepper import stepper
from app.resources import shared_model
from app.state import followed_link, per_training_run, set_url
from model.course import lessons_for_step
from model.engine import block_label
from model.lesson.steps import Grid, Panel, Step, stages, worked_example_steps
from model.lesson.training import AfterUpdate
from model.lesson.article import ARTICLE_URL, published

PHASE_COLOURS = {"forward": "blue", "backward": "orange", "update": "green"}


def article_provenance(printed: set[str]):
    return lambda weight: "printed by the article" if weight in printed else "reconstructed"


@st.cache_resource(show_spinner="Tracing the worked example…")
def article_steps() -> list[Step]:
    """The article's weights: the same steps for every session."""
    loaded = shared_model("worked-example")
    return worked_example_steps(loaded.model, loaded.tokenizer, published(),
                                article_provenance(set(loaded.about.get("printed_weights", []))))


def trained_steps(run) -> list[Step]:
    """The steps of this session's trained weights: traced once per training run."""
    loaded = shared_model("worked-example")
    return worked_example_steps(run.model, loaded.tokenizer, published(), lambda weight: "trained")


def current_steps() -> list[Step]:
    """The article's weights, or (once this session has trained) the choice of them or the trained ones."""
    run = st.session_state.get("training_run")
    if run is None:
        return article_steps()
    choice = st.radio("Weights", ["the article's", f"trained in this session ({run.optimizer}, {run.steps} steps)"],
                      horizontal=True, key="weights_choice", persist_state="session")
    if choice == "the article's":
        return article_steps()
    return per_training_run("worked_example_steps", trained_steps)


def pipeline_diagram(step: Step, n_layers: int) -> None:
    """The article's stages in forward order; the current step's stage is filled."""
    colour = {"forward": "#1f6feb", "backward": "#d9480f", "update": "#2f9e44"}[step.phase]
    groups: list = []
    for stage, label in stages(n_layers):
        block = block_label(int(stage.split('.')[0][1:]) - 1) if "." in stage else None  # "b1.attn": block 1
        if not groups or groups[-1][0] != block or block is None:
            groups.append((block, []))
        groups[-1][1].append((label, stage == step.stage, 0, ""))
    direction = "← backward" if step.phase == "backward" else ("update" if step.phase == "update" else "forward →")
    pipeline_strip(groups, f"<b style='color:{colour}'>{direction}</b>", colour=colour)


def navigation(steps: list[Step]) -> Step:
    keys = [s.key for s in steps]
    labels = {s.key: f"{i + 1}/{len(steps)} · {s.phase} · {s.title}" for i, s in enumerate(steps)}
    asked = followed_link("step")
    if asked in keys:  # the first run on a shared URL, or a link to a step from another page
        st.session_state.step = asked
    elif st.session_state.get("step") not in keys:
        st.session_state.step = keys[0]
    if asked is not None and asked not in keys:
        st.session_state.unknown_step = asked
    if "unknown_step" in st.session_state:  # said once, on the run that opened the page
        st.warning(f"There is no step called “{plain(st.session_state.pop('unknown_step'))}”: here is the first step. "
                   "The list below has every step.", icon=":material/info:")
    index = stepper(keys, "step", "Step", labels.get, shortcuts=True,
                    help="Jump to any step. The URL holds the step, so it can be shared.")
    set_url({"step": st.session_state.step})
    return steps[index]


def chosen_panel(step: Step):
    if len(step.panels) == 1:
        return step.panels[0]
    labels = [p.label for p in step.panels]
    if len(labels) <= 4:
        label = st.segmented_control("Head", labels, default=labels[0], key=f"panel:{step.key}", required=True)
    else:
        label = st.selectbox("Weight", labels, key=f"panel:{step.key}")
    return step.panels[labels.index(label)]


def select_cell(base: str, chart_key: str, output: int) -> None:
    """A click on an output grid selects that cell (on_select callback, before the rerun)."""
    points = st.session_state[chart_key].selection.points
    if points:
        st.session_state[base + ":grid"] = output
        st.session_state[base + ":row"] = int(points[0]["y"])
        st.session_state[base + ":col"] = int(points[0]["x"])


def grid_width(grid: Grid) -> float:
    """A grid's share of a row: its cells, room for the row labels and the colour bar."""
    return max(1.4 * grid.shape[1], 4) + 4.5


def grid_row(grids: list[Grid], draw, budget: int = 28) -> None:
    """Lay grids out left to right, each as wide as its columns need, wrapping at ``budget``;
    ``draw(index, grid, width)`` draws each, ``width`` its column's pixels at the narrowest layout."""
    rows, row, used = [], [], 0
    for i, grid in enumerate(grids):
        width = grid_width(grid)
        if row and used + width > budget:
            rows.append(row)
            row, used = [], 0
        row.append((i, grid, width))
        used += width
    rows.append(row)
    for row in rows:
        widths = [w for _, _, w in row]
        columns = st.columns(widths + [max(budget - sum(widths), 0.01)])
        for column, (i, grid, width) in zip(columns, row):
            with column:
                draw(i, grid, int(PAGE_PX * width / budget))


def comparison(grid: Grid, key: str) -> None:
    """The article's printed figure beside the computed one, and their difference."""
    printed_rows = [r for r in range(grid.shape[0]) if np.isfinite(grid.printed[r]).any()]
    difference = grid.values[printed_rows] - grid.printed[printed_rows]
    largest = float(np.nanmax(np.abs(difference)))
    if grid.provenance == "printed by the article":
        st.caption(f"{pretty(grid.label)}: printed by the article and used exactly (largest difference {largest:.1e}).")
        return
    rows = [grid.rows[r] for r in printed_rows]
    label = pretty(grid.label)
    trio = [Grid(f"{label} computed", grid.name, grid.values[printed_rows], rows, grid.cols, grid.row_title, grid.col_title),
            Grid(f"{label} in the article", "printed to 3 decimals", grid.printed[printed_rows], rows, grid.cols,
                 grid.row_title, grid.col_title),
            Grid("computed − article", f"largest |difference| {largest:.4f}", difference, rows, grid.cols,
                 grid.row_title, grid.col_title)]
    top = max(abs_max(trio[0].values), abs_max(trio[1].values))  # one scale: a 0.001 difference stays pale
    # one colour bar, on the last: the three share the scale
    grid_row(trio, lambda i, g, width: show(grid_figure(g, zmax=top, colorbar=i == 2, width=width), key=f"{key}:{i}",
                                            config={"displayModeBar": False}),
             budget=3 * grid_width(grid) + 2)


@fragment
def cell_view(base: str, panel: Panel) -> None:
    """The step's grids and one cell's arithmetic: a click or a Row/Column/Tensor choice reruns
    only this."""
    outputs = panel.outputs
    if any(base + part not in st.session_state for part in (":grid", ":row", ":col")):
        # start on the first output's largest entry (the Row/Column choices are forgotten on another page)
        values = np.where(np.isfinite(outputs[0].values), np.abs(outputs[0].values), -1)
        first = np.unravel_index(int(np.argmax(values)), values.shape)
        for part, value in ((":grid", 0), (":row", int(first[0])), (":col", int(first[1]))):
            st.session_state.setdefault(base + part, value)
    out_index = min(st.session_state[base + ":grid"], len(outputs) - 1)
    target = outputs[out_index]
    row = min(st.session_state[base + ":row"], target.shape[0] - 1)
    col = min(st.session_state[base + ":col"], target.shape[1] - 1)
    arithmetic = target.explain(row, col) if target.explain else None
    uses = {}
    for label, r, c in (arithmetic.uses if arithmetic else []):
        uses.setdefault(label, []).append((r, c))

    scales = shared_scales(panel.inputs + panel.outputs)
    if panel.inputs:
        st.markdown("**In**")
        grid_row(panel.inputs, lambda i, g, width: show(
            grid_figure(g, marks=uses.get(g.label, []), zmax=scales.get(g.scale), width=width), key=f"in:{base}:{i}",
            config={"displayModeBar": False}))
    st.markdown("**Out** — click a cell to see its arithmetic")

    def draw_output(i: int, grid: Grid, width: int) -> None:
        chart_key = f"out:{base}:{i}"
        show(grid_figure(grid, selected=(row, col) if i == out_index else None, clickable=True,
                         zmax=scales.get(grid.scale), width=width),
             key=chart_key, on_select=lambda: select_cell(base, chart_key, i), selection_mode="points",
             config={"displayModeBar": False})

    grid_row(outputs, draw_output)
    changed = [g.changed for g in outputs if g.changed is not None]
    if changed:
        st.caption("Every cell changed in this step." if all(c.all() for c in changed)
                   else "Dotted outline: the cells this step changed; the others kept their value.")

    st.markdown(f"**Arithmetic of one cell** (outlined in <span style='color:{HIGHLIGHT}'>gold</span>, with the "
                "cells it reads)", unsafe_allow_html=True)
    if len(outputs) > 1:
        c1, c2, c3 = st.columns(3)
        c1.selectbox("Tensor", range(len(outputs)), format_func=lambda i: pretty(outputs[i].label), key=base + ":grid")
    else:  # no empty column where there is only one tensor to choose
        c2, c3 = st.columns(2)
    c2.selectbox("Row", range(target.shape[0]), format_func=lambda r: target.rows[r], key=base + ":row")
    c3.selectbox("Column", range(target.shape[1]), format_func=lambda c: target.cols[c], key=base + ":col")
    if arithmetic:
        with st.container(border=True):
            for line in arithmetic.lines:
                for shown in wrapped(line):  # a long line broken at its = and + signs: the result stays on screen
                    st.latex(shown)


def after_update(after: AfterUpdate, vocab: list[str]) -> None:
    """The payoff of the update: the same forward pass with the new weights, beside the old."""
    word = vocab[after.target_id]
    st.markdown("**What the step bought.** The same forward pass again, now with every W_new:")
    loss, p = after.loss, after.p_target
    left, right = st.columns([2, 3])
    with left:
        c1, c2 = st.columns(2)
        c1.metric(f"loss −log p({word})", f"{loss[1]:.4f}", f"{loss[1] - loss[0]:+.4f} from {loss[0]:.4f}",
                  delta_color="inverse")
        c2.metric(f"p({word})", f"{p[1]:.4f}", f"{p[1] - p[0]:+.4f} from {p[0]:.4f}")
        others = len(vocab) - 1
        st.markdown(f"One step made “{word}” {p[1] / p[0]:.2f} times as likely. The probability it gained came from "
                    f"the other {others} words, which held {1 - p[0]:.4f} together before and {1 - p[1]:.4f} after: "
                    "a softmax's outputs always sum to 1. The learning rate η sets how far one step goes.")
        st.page_link("screens/train_live.py", label="Train it live: many such steps", icon=":material/model_training:",
                     help="SGD or AdamW, on the example or a small corpus: watch the loss fall")
    with right:
        show(paired_bars(vocab, [("before the update", after.probs[0], "#9db4d0"),
                      ("after the update", after.probs[1], "#2f9e44")],
              "Next-word probabilities at the last position", "probability", "next word",
              highlight=after.target_id), key="after_update", config={"displayModeBar": False})


@fragment
def step_view(steps: list[Step], n_layers: int) -> None:
    """The stepper and the current step: stepping reruns only this, not the page around it."""
    step = navigation(steps)
    pipeline_diagram(step, n_layers)
    st.badge(step.phase, color=PHASE_COLOURS[step.phase])
    st.subheader(step.title)
    st.markdown(step.sentence)
    for line in wrapped(step.formula):
        st.latex(line)
    panel = chosen_panel(step)
    base = f"cell:{step.key}:{panel.label}"
    cell_view(base, panel)
    compared = [g for g in panel.outputs if g.printed is not None]
    if compared:
        st.markdown("**Beside the article.** The article rounded each intermediate to 3 decimals before using it in "
                    "the next step; Glassbox computes exactly, so some figures differ by a few thousandths.")
        for i, grid in enumerate(compared):
            comparison(grid, f"article:{base}:{i}")
    if step.after is not None:
        after_update(step.after, shared_model("worked-example").tokenizer.pieces)
    lessons_about(lessons_for_step(step.key))


st.title("The worked example, step by step")
loaded = shared_model("worked-example")
st.caption(f"“{' '.join(loaded.tokenizer.pieces[t] for t in published()['config']['input_ids'])}” → "
           f"“{loaded.tokenizer.pieces[published()['config']['target_id']]}”, as in [Large Language Models from "
           f"scratch — Part 2]({ARTICLE_URL}): a model of 8 words, 4 numbers per word, 2 blocks of 2 heads, small enough "
           "to check by hand. Step with ◀ ▶ (or the arrow keys); click any output cell for its arithmetic. Where the "
           "weights come from: Welcome → About.")
step_view(current_steps(), loaded.cfg.n_layers)
