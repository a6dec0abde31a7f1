"""Train it live: a copy of the worked-example model trained for N steps in this session;
the loss, p(target), the attention patterns and the target's embedding, before and after."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.errors import fragment
from glassbox.app.components.expert_training import expert_training
from glassbox.app.components.heatmap import PAGE_PX, grid_figure
from glassbox.app.components.labels import plain
from glassbox.app.components.long_task import cancelled_note, limit_note, long_computation
from glassbox.app.resources import shared_model
from glassbox.app.state import per_training_run
from glassbox.model.analysis import plans
from glassbox.model.engine import run_trace
from glassbox.model.engine.work import report
from glassbox.model.serving.sizing import training_bytes
from glassbox.model.worked_example.article import published
from glassbox.model.worked_example.steps import Grid
from glassbox.model.worked_example.training import (
    DATASETS,
    DEFAULT_LEARNING_RATE,
    OPTIMIZERS,
    SCHEDULES,
    toy_corpus,
    train_copy,
    training_batch,
)

OWN_RATE = "the optimizer's own"
MAX_STEPS = 2000
loaded = shared_model("worked-example")
config = published()["config"]
example, target = config["input_ids"], config["target_id"]
pieces = loaded.tokenizer.pieces
word = pieces[target]


@st.cache_resource(show_spinner=False)
def untrained_patterns():
    """The shared model's attention on the example: the same for every session."""
    return loaded.trace(example, names=["*hook_pattern"])


def pattern_grids(run) -> list[list[Grid]]:
    """Per head: its pattern before and after training and the change, traced once per run."""
    labels = [f"{i} {pieces[t]}" for i, t in enumerate(example)]
    before, after = untrained_patterns(), run_trace(run.model, example, names=["*hook_pattern"])
    heads = []
    for b in range(loaded.cfg.n_layers):
        for h in range(loaded.cfg.n_heads):
            name = f"blocks.{b}.attn.hook_pattern"
            grids = [
                Grid(
                    f"A({b + 1},{h + 1}) {when}",
                    f"{name}[{h}]",
                    trace[name][h].double().cpu().numpy(),
                    labels,
                    labels,
                    "query position",
                    "key position",
                    probability=True,
                )  # on 0..1, as on every page
                for when, trace in (("before", before), ("after", after))
            ]
            grids.append(
                Grid(
                    f"A({b + 1},{h + 1}) change",
                    "after − before",
                    grids[1].values - grids[0].values,
                    labels,
                    labels,
                    "query position",
                    "key position",
                )
            )
            heads.append(grids)
    return heads


def lowered_note(run) -> str | None:
    """Why the loss fell while p(target | example) fell, where it did: the loss is not the example's."""
    if not (run.p_target[-1] < run.p_target[0] and run.loss[-1] < run.loss[0]):
        return None
    low = min(range(len(run.p_target)), key=run.p_target.__getitem__)
    inputs, targets = training_batch(loaded.tokenizer, example, target, run.dataset)
    n_targets, n_sentences = int((targets >= 0).sum()), int(inputs.shape[0])
    rising = low < len(run.p_target) - 1 and run.p_target[-1] > run.p_target[low]
    where = (
        f"It bottomed out at step {low} ({run.p_target[low]:.3f}) and is climbing again: more steps carry it past where it began."
        if rising
        else "It is still falling at the last step: this run stopped early in the descent."
    )
    steps_note = (
        f" {run.optimizer} at η = {run.learning_rate:g} moves each weight by about η a step, so "
        f"{run.steps} steps is a short way; more steps, or a larger η (0.01), let p({word}) turn round and "
        "rise."
        if run.optimizer == "AdamW"
        else " More steps let it turn round and rise."
    )
    return (
        f"The loss fell ({run.loss[0]:.3f} → {run.loss[-1]:.3f}) but p({word} | example) fell too "
        f"({run.p_target[0]:.3f} → {run.p_target[-1]:.3f}). The loss is the mean over all {n_targets} "
        f"next-token predictions of the {n_sentences} sentences, and the example's “{word}” is one of them: the "
        "first steps go to what most positions share (the next word after “the”, “and”, “on”), and those moves "
        f"also take some probability from “{word}” at the example's last position. {where}{steps_note}"
    )


def results(run) -> None:
    peak = "peak " if run.schedule != "constant" else ""
    st.subheader(f"{run.steps} steps of {run.optimizer}, {peak}η = {run.learning_rate:g} ({run.schedule}), on {run.dataset}")
    m1, m2, m3 = st.columns(3)
    m1.metric(
        "training loss", f"{run.loss[-1]:.4f}", f"{run.loss[-1] - run.loss[0]:+.4f} from {run.loss[0]:.4f}", delta_color="inverse"
    )
    m2.metric(f"p({word} | example)", f"{run.p_target[-1]:.4f}", f"{run.p_target[-1] - run.p_target[0]:+.4f}")
    m3.metric(f"−log p({word})", f"{-math.log(run.p_target[-1]):.4f}")
    why = lowered_note(run)
    if why:
        st.info(plain(why))

    left, middle, right = st.columns(3)
    steps_axis = list(range(run.steps + 1))
    with left:
        fig = go.Figure(go.Scatter(x=steps_axis, y=run.loss, mode="lines", name="loss"))
        fig.update_layout(
            title="Training loss",
            xaxis_title="step",
            yaxis_title="cross-entropy",
            height=320,
            margin=dict(t=40, b=10, l=10, r=10),
        )
        show(fig)
    with middle:
        fig = go.Figure(go.Scatter(x=steps_axis[1:], y=run.learning_rates, mode="lines", name="η", line=dict(color="#6D3FC0")))
        fig.update_layout(
            title=f"Learning rate ({run.schedule})",
            xaxis_title="step",
            yaxis_title="η",
            xaxis_range=[0, run.steps],
            yaxis_range=[0, 1.1 * run.learning_rate],
            height=320,
            margin=dict(t=40, b=10, l=10, r=10),
        )
        show(fig)
    with right:
        fig = go.Figure(go.Scatter(x=steps_axis, y=run.p_target, mode="lines", name=f"p({word})", line=dict(color="#2f9e44")))
        fig.update_layout(
            title=f"p({word} | {' '.join(pieces[t] for t in example)})",
            xaxis_title="step",
            yaxis_title="probability",
            yaxis_range=[0, 1],
            height=320,
            margin=dict(t=40, b=10, l=10, r=10),
        )
        show(fig)

    st.subheader(f"How the “{word}” embedding moved")
    fig = go.Figure(
        [
            go.Scatter(x=steps_axis, y=[e[d] for e in run.target_embedding], mode="lines", name=f"d{d}")
            for d in range(loaded.cfg.d_model)
        ]
    )
    fig.update_layout(
        xaxis_title="step", yaxis_title=f"W_E[{word}] component", height=300, margin=dict(t=20, b=10), legend_title="dimension"
    )
    show(fig)
    st.caption(
        f"W_E[{word}] before: {[round(v, 3) for v in run.target_embedding[0]]} · after: "
        f"{[round(v, 3) for v in run.target_embedding[-1]]}. The head is tied, so this row is also what the "
        f"last position's vector is compared with to score “{word}”."
    )

    st.subheader("Attention on the example, before and after")
    for grids in per_training_run("pattern_grids", pattern_grids):
        for column, grid in zip(st.columns(3), grids):
            show(grid_figure(grid, width=PAGE_PX // 3), column, key=f"pattern:{grid.label}", config={"displayModeBar": False})
    st.page_link(
        "screens/worked_example.py",
        label="Step through the trained weights in the worked example",
        icon=":material/arrow_forward:",
    )


@fragment
def training() -> None:
    """The settings, training and its results: pressing Train reruns only this."""
    with st.form("training"):
        c1, c2, c3, c4, c5 = st.columns([1.2, 1, 1.6, 1.2, 0.8])
        dataset = c1.radio("Data", DATASETS, key="train_data", persist_state="session")
        optimizer = c2.radio(
            "Optimizer",
            OPTIMIZERS,
            key="train_optimizer",
            persist_state="session",
            help="SGD: W ← W − η ∂L/∂W, the article's update. AdamW: per-weight step sizes, weight decay 0.01.",
        )
        chosen_rate = c3.select_slider(
            "Learning rate η",
            [OWN_RATE, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 0.5, 1.0],
            value=OWN_RATE,
            key="train_lr",
            persist_state="session",
            help=f"The optimizer's own: {DEFAULT_LEARNING_RATE['SGD']:g} for SGD (the article's), "
            f"{DEFAULT_LEARNING_RATE['AdamW']:g} for AdamW (torch's default; at 0.5 its loss on the corpus "
            "jumps about instead of falling).",
        )
        schedule = c4.radio(
            "Schedule",
            SCHEDULES,
            key="train_schedule",
            persist_state="session",
            help="Constant: η every step. Warmup + cosine: η rises over the first tenth of the steps, "
            "then falls along half a cosine to η/10 (the course's training-objective lesson draws both).",
        )
        steps = c5.number_input(
            "Steps",
            min_value=1,
            max_value=MAX_STEPS,
            value=100,
            step=10,
            key="train_steps",
            persist_state="session",
            help=f"1 to {MAX_STEPS}",
        )
        submitted = st.form_submit_button("Train", type="primary")

    inputs, targets = training_batch(loaded.tokenizer, example, target, dataset)
    st.caption(
        plain(
            limit_note(
                loaded.model,
                plans.train_it_live(MAX_STEPS, *inputs.shape, len(example)),
                at=f"{MAX_STEPS:,} steps, the most here",
            )
        )
    )
    cancelled_note()
    if submitted:
        learning_rate = None if chosen_rate == OWN_RATE else chosen_rate
        run = long_computation(
            "Training",
            (dataset, optimizer, learning_rate, int(steps), schedule),
            plans.train_it_live(int(steps), *inputs.shape, len(example)),
            loaded.model,
            lambda: train_copy(
                loaded.model,
                inputs,
                targets,
                example,
                target,
                optimizer,
                learning_rate,
                int(steps),
                dataset=dataset,
                schedule=schedule,
                on_step=report,
            ),
            training_bytes(loaded.model, inputs.shape[1], inputs.shape[0]),
            shared=False,
        )
        if run is not None:
            st.session_state.training_run = run

    run = st.session_state.get("training_run")
    if run is None:
        st.info("Choose the settings and press **Train**.")
        return
    results(run)


st.title("Train it live")
article_tab, experts_tab = st.tabs(["The article's model", "A mixture of experts"])
with article_tab:
    st.markdown(
        f"Train a copy of the worked-example model (the shared one is never changed) to predict “{word}” "
        f"after “{' '.join(pieces[t] for t in example)}”. Full-batch training: every step uses all the data. "
        "LayerNorm's γ and β stay at 1 and 0, as in the article, so the step-through's arithmetic still "
        "applies."
    )
    corpus = toy_corpus()
    with st.expander(f"The corpus: the example and {len(corpus)} sentences like it"):
        st.markdown("\n".join(f"- {s}" for s in corpus))
        st.caption(
            "With the corpus, the loss is the mean next-token cross-entropy over every position of every "
            f"sentence; with the example alone it is the article's loss, −log p({word}) at the last position."
        )
    training()
with experts_tab:
    expert_training()
