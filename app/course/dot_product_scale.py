"""Lesson 2, why divide by √d_k: the variance of q·k against d_k, the course's two softmaxes, the
softmax's Jacobian as the scores grow, the bundled model without its scale, a wide head trained with and
without it (shipped, and trained again on the page at a click), and the story model's two shipped training runs."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components import lesson_controls
from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain
from glassbox.model.course.dot_product_scale import (
    COURSE_SCORES,
    COURSE_SOFTMAX,
    PROMPT,
    TAIL,
    WIDE,
    WIDE_D_HEADS,
    head_table,
    jacobian_norm,
    shipped_curves,
    shipped_variances,
    shipped_wide_head,
    softmax,
    wide_head,
)
from glassbox.model.engine import GlassboxError, check_prompt
from glassbox.model.io.checkpoint import LoadedModel

SCALES = [0.1 * 1.1**i for i in range(60)]  # the Jacobian curve's multipliers, 0.1 … 28
SCALE_SLIDER = (0.25, 24.0, 0.25)  # the multiplier c: lowest, highest, step
SCALED_COLOUR, UNSCALED_COLOUR = "#1f6feb", "#d9480f"  # with 1/√d_head; without


@st.cache_data(max_entries=len(WIDE_D_HEADS), show_spinner="Training a head with and without the scale…")
def wide_curves(d_head: int) -> dict:
    return wide_head(d_head)


def two_curves(scaled: list[float], unscaled: list[float], y_title: str, log: bool = True) -> go.Figure:
    steps = list(range(1, len(scaled) + 1))
    fig = go.Figure(
        [
            go.Scatter(x=steps, y=scaled, mode="lines", name="with 1/√d_head", line=dict(color=SCALED_COLOUR, width=2)),
            go.Scatter(
                x=steps,
                y=unscaled,
                mode="lines",
                name="without (scale 1)",
                line=dict(color=UNSCALED_COLOUR, width=2, dash="dash"),
            ),
        ]
    )
    fig.update_layout(
        xaxis_title="training step",
        yaxis=log_axis(scaled + unscaled, y_title) if log else dict(title=y_title, rangemode="tozero"),
        height=320,
        margin=dict(t=10, b=10),
        legend=dict(orientation="h", y=1.12, x=0),
    )
    return fig


@st.cache_data(show_spinner=False)
def variances() -> dict:
    return shipped_variances()


def variance_chart(rows: list[dict]) -> go.Figure:
    d = [r["d_k"] for r in rows]
    fig = go.Figure(
        [
            go.Scatter(x=d, y=d, mode="lines", name="d_k (the derivation)", line=dict(dash="dot")),
            go.Scatter(x=d, y=[r["variance"] for r in rows], mode="markers", name="Var(q·k), sampled", marker=dict(size=10)),
            go.Scatter(x=d, y=[r["scaled_variance"] for r in rows], mode="markers+lines", name="Var(q·k/√d_k), sampled"),
        ]
    )
    values = [r["variance"] for r in rows] + [r["scaled_variance"] for r in rows]
    fig.update_layout(
        xaxis=dict(title="d_k", type="log", tickvals=d),
        yaxis=log_axis(values, "variance"),
        height=340,
        margin=dict(t=10, b=10),
        legend=dict(orientation="h", y=1.12, x=0),
    )
    return fig


def spread() -> None:
    st.subheader("The scores grow with d_k")
    st.markdown(
        "Take q and k with d_k independent entries of mean 0 and variance 1. Each product q_i·k_i has variance 1, "
        "and the d_k products are independent, so their sum q·k has variance d_k: its typical size is √d_k. "
        "Dividing by √d_k brings the variance back to 1 whatever the head's width. Below, 20,000 sampled pairs "
        "for each d_k."
    )
    shipped = variances()
    show(variance_chart(shipped["rows"]), config={"displayModeBar": False})
    st.caption(
        f"Sampled once (seed 0) by `{shipped['command']}` and shipped: 41 million samples would take this "
        "page's first open a second or two. The tests sample them again."
    )


def two_softmaxes() -> None:
    st.subheader("What large scores do to the softmax")
    raw, scaled = softmax(COURSE_SCORES), softmax([s / 8 for s in COURSE_SCORES])
    st.dataframe(
        [
            {
                "scores": "[8.0, 0.1, −0.3] (d_k = 64, unscaled)",
                "softmax (exact)": [round(p, 5) for p in raw],
                "the course prints": COURSE_SOFTMAX["raw"],
            },
            {
                "scores": "[1.0, 0.0125, −0.0375] (÷ √64 = 8)",
                "softmax (exact)": [round(p, 5) for p in scaled],
                "the course prints": COURSE_SOFTMAX["scaled"],
            },
        ],
        hide_index=True,
    )
    st.markdown(
        f"The course rounds the first to (0.9997, 0.0002, 0.0001); exactly it is ({raw[0]:.5f}, "
        f"{raw[1]:.5f}, {raw[2]:.5f}): still nearly one-hot, but the small weights are about twice what it "
        f"prints. The scaled one is ({scaled[0]:.3f}, {scaled[1]:.3f}, {scaled[2]:.3f})."
    )


def saturation() -> None:
    st.markdown(
        "How much can the weights still move? The softmax's Jacobian, diag(p) − p·pᵀ, says how the weights answer "
        "a small change of the scores. Multiply the scaled scores by c (c = 8 gives the unscaled ones) and watch "
        "its norm: once one weight is near 1 it is near 0, and almost no gradient reaches the scores."
    )
    base = [s / 8 for s in COURSE_SCORES]
    # the curve is computed here; the page computes the norm and the softmax at the learner's c (lesson_controls.js)
    lesson_controls.saturation(base, SCALES, [jacobian_norm(base, x) for x in SCALES], 1.0, SCALE_SLIDER, key="sqrtdk_saturation")
    st.caption("The page answers c itself, with the same arithmetic as the curve's.")


@st.cache_data(max_entries=16, show_spinner=False)
def heads(prompt: str, _loaded: LoadedModel) -> list[dict]:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    with lesson_pass("the model with and without its score scale", _loaded, len(tokens), backward=True, passes=2):
        return head_table(_loaded.model, tokens)


@fragment
def on_the_model(loaded: LoadedModel) -> None:
    st.subheader("The bundled model without its scale")
    st.markdown(
        f"The story model's heads are {loaded.cfg.d_head} wide, so its scores are multiplied by "
        f"1/√{loaded.cfg.d_head}. Below, the same weights run with that scale set to 1 (the engine's own "
        "attn_scale, not a copy of the code): each head's attention entropy, low when a head looks at one position, "
        "and the norm of the loss's gradient with respect to its scores."
    )
    prompt = prompt_box(loaded, "sqrtdk_prompt", PROMPT)
    try:
        rows = heads(prompt, loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    labels = [f"{r['block'] + 1}.{r['head'] + 1}" for r in rows]  # block.head, counted from 1 as on every page
    left, right = st.columns(2)
    for column, key, title in (
        (left, "entropy", "pattern entropy (nats, mean over queries)"),
        (right, "grad_norm", "‖∂L/∂scores‖"),
    ):
        fig = go.Figure(
            [
                go.Bar(x=labels, y=[r[f"{key}_scaled"] for r in rows], name="with 1/√d_head"),
                go.Bar(x=labels, y=[r[f"{key}_unscaled"] for r in rows], name="without"),
            ]
        )
        fig.update_layout(
            barmode="group",
            xaxis_title="block.head (from 1)",
            yaxis_title=title,
            height=300,
            margin=dict(t=10, b=10),
            legend=dict(orientation="h", y=1.15, x=0),
        )
        show(fig, column, config={"displayModeBar": False})
    st.caption(
        "Without the scale every head's pattern is sharper (lower entropy). A trained model's scores are "
        "small enough that its softmaxes are not yet saturated at this width: the gradient reaching the "
        "scores is still there."
    )


@fragment
def wide() -> None:
    st.subheader("Where training without the scale fails")
    w = WIDE
    st.markdown(
        "A model with one attention head and nothing else (d_model = d_head, no MLP, learned positions) learns to "
        f"output the token before each position, from random tokens over a vocabulary of {w['vocab']}: only attention "
        "can do it, by looking one position back. Trained twice from the same start on the same batches: "
        f"with the 1/√d_head scale and without it (the engine's attn_scale = 1). AdamW at η = {w['lr']:g}, "
        f"{w['steps']} steps of {w['batch']} sequences of {w['length']} tokens."
    )
    left, right = st.columns([3, 1], vertical_alignment="bottom")
    d_head = int(left.select_slider("d_head (the head's width)", WIDE_D_HEADS, value=WIDE_D_HEADS[-1], key="sqrtdk_dhead"))
    trained = st.session_state.setdefault("sqrtdk_trained_now", [])
    if right.button("Train it now", key="sqrtdk_train", help="Train both runs at this d_head again, here"):
        trained.append(d_head)
    now = d_head in trained
    run = wide_curves(d_head) if now else shipped_wide_head(d_head)
    show(two_curves(run["scaled"], run["unscaled"], "batch loss (nats)"), config={"displayModeBar": False})
    cells = st.columns(3)
    cells[0].metric(f"with the scale: mean loss, last {TAIL} steps", f"{run['tail_scaled']:.3f} nats")
    cells[1].metric(f"without: mean loss, last {TAIL} steps", f"{run['tail_unscaled']:.3f} nats")
    cells[2].metric("a uniform guess", f"{np.log(w['vocab']):.3f} nats", help=f"ln {w['vocab']}")
    worse = run["tail_unscaled"] - run["tail_scaled"]
    threads = f"on {run['threads']} CPU thread{'s' * (run['threads'] != 1)}: a sum's rounding depends on how many"
    made = (
        f"Trained now in {run['seconds']:.1f} s; the same seed gives the same curves ({threads})."
        if now
        else f"These are the shipped runs, made by `{run['command']}` (torch {run['torch']}, {run['seconds']:.1f} s, "
        f"{threads}); Train it now trains them again here, from the same seed."
    )
    st.caption(
        f"At d_head = {d_head}, without the scale the last {TAIL} steps' loss is {abs(worse):.3f} nats "
        f"{'above' if worse >= 0 else 'below'} the scaled run's. The wider the head, the larger the unscaled scores (√{d_head} ≈ {np.sqrt(d_head):.0f} times the "
        "scaled ones): at 256 the unscaled softmax saturates early, little gradient reaches the scores (the Jacobian "
        "above), and the unscaled head ends far above the scaled one; at 16 both learn. " + made
    )


def training() -> None:
    st.subheader("The story model with and without the scale")
    curves = shipped_curves()
    s = curves["settings"]
    show(two_curves(curves["scaled"], curves["unscaled"], "batch loss (nats)"), config={"displayModeBar": False})
    st.markdown(
        f"Two models of the bundled one's shape (d_head = 32), from the same start, on the same {s['batch']}-story "
        f"batches, AdamW, {s['steps']} steps, warmup then cosine from η = {s['peak_lr']:g}. Measured by "
        f"`{curves['command']}` ({curves['seconds']:.0f} s on this project's 2-core machine, torch "
        f"{curves['torch']}). Here the two end within a few hundredths: at d_head = 32 the unscaled scores are "
        "only √32 ≈ 5.7 times larger, and a fresh model's scores start near 0, so neither run reaches the "
        "saturated softmax above. The scale matters as heads widen (d_head = 128 in the large models; 256 above) "
        "and as training makes scores large."
    )


lesson = lesson_page("sqrt-dk")
spread()
two_softmaxes()
saturation()
on_the_model(course_model())
wide()
training()
lesson_end(lesson)
