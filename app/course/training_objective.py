"""The lesson on the training objective: −log p with a slider on p; teacher forcing on a prompt, every
position's loss from one pass; the learning-rate schedules Train it live offers."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number, plain
from glassbox.model.course.training_objective import PROMPT, TeacherForcing, loss_of, schedule_curve, teacher_forcing
from glassbox.model.engine import GlassboxError, check_prompt
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.labels import token_text
from glassbox.model.training.schedules import SCHEDULES

CURVE = [i / 1000 for i in range(1, 1001)]  # p from 0.001 to 1, where the loss curve is drawn


@fragment
def one_prediction() -> None:
    st.subheader("One prediction: −log p")
    st.markdown(
        "At each position the model gives every token of the vocabulary a probability. Training looks at one "
        "number only: p, the probability it gave the token that actually came next. The loss is −log p. It is 0 "
        "when p = 1, grows without bound as p falls towards 0, and a model that spreads its bets evenly over V "
        "tokens pays log V. Drag p and watch the cost of a confident mistake."
    )
    p = st.slider(
        "p(correct next token)", min_value=0.001, max_value=1.0, value=0.25, step=0.001, format="%.3f", key="objective_p"
    )
    left, right = st.columns([3, 2])
    fig = go.Figure(go.Scatter(x=CURVE, y=[loss_of(x) for x in CURVE], mode="lines", name="−log p", line=dict(color="#0068C9")))
    fig.add_trace(
        go.Scatter(
            x=[p],
            y=[loss_of(p)],
            mode="markers+text",
            text=[f"p = {p:.3f}, loss = {number(loss_of(p), 3)}"],
            # right of the point, or left of it near p = 1, where the plot ends
            textposition="top right" if p < 0.6 else "top left",
            marker=dict(size=11, color="#d9480f"),
            name="your p",
        )
    )
    fig.update_layout(
        xaxis_title="p, the probability of the correct token",
        yaxis_title="loss = −log p (nats)",
        height=320,
        margin=dict(t=20, b=10),
        showlegend=False,
    )
    show(fig, left, config={"displayModeBar": False})
    right.metric("loss = −log p", number(loss_of(p)))
    right.markdown(
        f"Halving p adds log 2 = {loss_of(0.5):.4f} to the loss, whatever p was. The gradient of the loss "
        f"with respect to the correct token's logit is p − 1 = {number(p - 1, 3)}: the surer and more wrong, the "
        "harder the push."
    )


@st.cache_data(max_entries=16, show_spinner=False)
def forced(prompt: str, _loaded: LoadedModel) -> TeacherForcing:
    """The prompt's one pass (always the course's model: the key is the prompt)."""
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens, "The text")
    with lesson_pass("teacher forcing", _loaded, len(tokens)):
        return teacher_forcing(_loaded.model, tokens)


@fragment
def every_position(loaded: LoadedModel) -> None:
    st.subheader("Every position at once: teacher forcing")
    st.markdown(
        "A text of n tokens holds n − 1 predictions: each prefix and the token that follows it. One forward pass "
        "makes all of them, because the causal mask (its own lesson) keeps each position from seeing its own answer. "
        "The inputs are the true tokens, never the model's own guesses: that is teacher forcing. The targets are "
        "the same tokens shifted by one, and the loss is the mean of the positions' −log p."
    )
    prompt = prompt_box(loaded, "objective_prompt", PROMPT, "Text", 500)
    try:
        result = forced(prompt, loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    pieces = loaded.pieces
    st.dataframe(
        {
            "position": [x.position for x in result.positions],
            "input (what the model reads)": [token_text(pieces[x.input_id]) for x in result.positions],
            "target (the next true token)": [token_text(pieces[x.target_id]) for x in result.positions],
            "p(target)": [x.p_target for x in result.positions],
            "loss = −log p": [x.loss for x in result.positions],
        },
        hide_index=True,  # p below 0.00005 in 4 significant digits (4.2e-06), not as 0.0000
        column_config={
            "p(target)": st.column_config.NumberColumn(format="%.4g"),
            "loss = −log p": st.column_config.NumberColumn(format="%.4f"),
        },
    )
    last = token_text(pieces[loaded.encode(prompt)[-1]])
    st.markdown(
        f"Mean over the {len(result.positions)} positions: **{result.mean:.4f}**; the model's own loss from "
        f"the same pass: **{result.model_loss:.4f}**. The last token, {plain(last)}, has no next token, so "
        "it predicts nothing here."
    )


@fragment
def schedules() -> None:
    st.subheader("How big each step is: the learning-rate schedule")
    st.markdown(
        "Each update moves the weights against the gradient by η times a step (SGD) or a per-weight normalised "
        "step (AdamW). A constant η is the simplest. Warmup + cosine starts small, while the weights are random "
        "and AdamW's running averages are still empty, climbs to the peak, then falls along half a cosine, so "
        "that late steps settle into a minimum instead of bouncing around it. The bundled story model was "
        "trained this way: 100 warmup steps, peak 0.003, 5,000 steps, down to a tenth."
    )
    c1, c2, c3, c4 = st.columns(4)
    steps = c1.number_input("Steps", min_value=10, max_value=20000, value=5000, step=100, key="objective_steps")
    peak = c2.select_slider("Peak η", [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.5], value=3e-3, key="objective_peak")
    warmup = c3.number_input(
        "Warmup steps", min_value=0, max_value=int(steps), value=min(100, int(steps)), step=10, key="objective_warmup"
    )
    floor = c4.slider("Floor (a fraction of the peak)", 0.0, 1.0, 0.1, 0.05, key="objective_floor")
    fig = go.Figure(
        [
            go.Scatter(x=list(range(int(steps))), y=schedule_curve(s, int(steps), peak, int(warmup), floor), mode="lines", name=s)
            for s in SCHEDULES
        ]
    )
    fig.update_layout(
        xaxis_title="step",
        yaxis_title="learning rate η",
        yaxis_range=[0, 1.15 * peak],
        height=300,
        margin=dict(t=44, b=10),  # the legend above the plot, the constant line below its top
        legend=dict(orientation="h", y=1.12, x=0),
    )
    show(fig, config={"displayModeBar": False})
    st.page_link(
        "screens/train_live.py",
        label="Train it live offers both schedules (and each optimizer's own η)",
        icon=":material/model_training:",
    )


lesson = lesson_page("objective")
one_prediction()
every_position(course_model())
schedules()
lesson_end(lesson)
