"""The lesson on LayerNorm: centring and scaling drawn in 3-D and 2-D with a vector to move, RMSNorm
beside it, the course model's γ and β, and the gradient through the norm, orthogonal to 1 and to the
centred input. Computed by model/course/layernorm.py."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, knows
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number, plain
from glassbox.model.course.layernorm import (
    PROMPT,
    START_3D,
    centre_and_scale,
    gammas_betas,
    gradient_through,
    jacobian,
    on_the_model,
    rms_norm,
)
from glassbox.model.engine import GlassboxError, block_label, check_prompt
from glassbox.model.io.checkpoint import LoadedModel

X_COLOUR, CENTRED_COLOUR, LN_COLOUR, RMS_COLOUR = "#495057", "#f08c00", "#1f6feb", "#ae3ec9"
UPSTREAM = (1.0, -2.0, 0.5)  # the toy gradient arriving at the norm's output


def intro() -> None:
    st.markdown(
        "Before every attention and every MLP, each position's vector x (d numbers) is normalised: "
        "**LayerNorm(x) = γ ⊙ (x − mean(x)) / std(x) + β**. Two steps, each a piece of geometry. "
        "Subtracting the mean from every entry removes x's component along the all-ones vector 1: it projects x "
        "onto the plane orthogonal to 1. Dividing by the standard deviation (over the d entries, divided by d) "
        "then puts it on the sphere of radius √d in that plane, since ‖y‖² = d·var(y) = d. Whatever the size of "
        "x, the next layer reads a vector of one size. **RMSNorm** (Llama, Gemma) skips the centring and divides "
        "by the root mean square: the sphere of radius √d, without the plane. γ and β, learned, then scale and "
        "shift each coordinate."
    )


def vector_inputs(prefix: str, start: tuple[float, ...]) -> np.ndarray:
    columns = st.columns(len(start))
    return np.array([columns[i].slider(f"x{i + 1}", -3.0, 3.0, float(v), 0.1, key=f"{prefix}_{i}") for i, v in enumerate(start)])


def arrow(fig: go.Figure, tip: np.ndarray, name: str, colour: str, dash: str = "solid") -> None:
    points = np.stack([np.zeros_like(tip), tip])
    fig.add_trace(
        go.Scatter3d(
            x=points[:, 0],
            y=points[:, 1],
            z=points[:, 2],
            name=name,
            mode="lines+markers",
            line=dict(color=colour, width=6, dash=dash),
            marker=dict(size=[0, 5], color=colour),
            hovertemplate=name + ": (%{x:.3f}, %{y:.3f}, %{z:.3f})<extra></extra>",
        )
    )


def figure_3d(x: np.ndarray) -> go.Figure:
    ln, rms = centre_and_scale(x), rms_norm(x)
    u1, u2 = np.array([1, -1, 0]) / np.sqrt(2), np.array([1, 1, -2]) / np.sqrt(6)  # the plane ⟂ 1
    s = np.linspace(-3.5, 3.5, 2)
    a, b = np.meshgrid(s, s)
    plane = a[..., None] * u1 + b[..., None] * u2
    fig = go.Figure(
        go.Surface(
            x=plane[..., 0],
            y=plane[..., 1],
            z=plane[..., 2],
            opacity=0.15,
            showscale=False,
            colorscale=[[0, "#1f6feb"], [1, "#1f6feb"]],
            name="the plane ⟂ 1",
            showlegend=True,
            hoverinfo="skip",
        )
    )
    t = np.linspace(0, 2 * np.pi, 121)
    circle = np.sqrt(3) * (np.cos(t)[:, None] * u1 + np.sin(t)[:, None] * u2)
    fig.add_trace(
        go.Scatter3d(
            x=circle[:, 0],
            y=circle[:, 1],
            z=circle[:, 2],
            mode="lines",
            name="radius √3 in the plane",
            line=dict(color=LN_COLOUR, width=2, dash="dot"),
            hoverinfo="skip",
        )
    )
    ones = np.array([[-2.5] * 3, [2.5] * 3])
    fig.add_trace(
        go.Scatter3d(
            x=ones[:, 0],
            y=ones[:, 1],
            z=ones[:, 2],
            mode="lines",
            name="the direction 1",
            line=dict(color="#adb5bd", width=3),
            hoverinfo="skip",
        )
    )
    step = np.stack([ln["x"], ln["centred"]])  # the step the centring takes: along 1, by the mean
    fig.add_trace(
        go.Scatter3d(
            x=step[:, 0],
            y=step[:, 1],
            z=step[:, 2],
            mode="lines",
            name="− mean · 1",
            line=dict(color=CENTRED_COLOUR, width=3, dash="dot"),
            hoverinfo="skip",
        )
    )
    arrow(fig, ln["x"], "x", X_COLOUR)
    arrow(fig, ln["centred"], "x − mean (centred)", CENTRED_COLOUR, "dash")
    arrow(fig, ln["out"], "LayerNorm(x)", LN_COLOUR)
    arrow(fig, rms["out"], "RMSNorm(x)", RMS_COLOUR)
    axis = dict(range=[-3.5, 3.5])
    fig.update_layout(
        height=520,
        margin=dict(l=0, r=0, t=10, b=0),
        legend=dict(orientation="h", y=1.02, x=0),
        scene=dict(
            xaxis=dict(title="x1", **axis),
            yaxis=dict(title="x2", **axis),
            zaxis=dict(title="x3", **axis),
            aspectmode="cube",
            # looking across 1, not along it (plotly's default eye is on it): the plane slants
            camera=dict(eye=dict(x=1.9, y=-1.1, z=0.5)),
        ),
    )
    return fig


@fragment
def in_3d() -> None:
    st.subheader("In 3-D: onto the plane, then the circle")
    x = vector_inputs("ln3", START_3D)
    if np.ptp(x) == 0:
        st.warning(
            plain(
                "All three entries are equal: x lies along 1, centring leaves 0 and there is no standard "
                "deviation to divide by. Move one slider."
            ),
            icon=":material/warning:",
        )
        return
    ln, rms = centre_and_scale(x), rms_norm(x)
    left, right = st.columns([3, 2])
    show(figure_3d(x), left, config={"displayModeBar": False})
    right.dataframe(
        [
            {"step": "x", "vector": fmt(ln["x"])},
            {"step": f"mean = {number(ln['mean'])}", "vector": ""},
            {"step": "x − mean", "vector": fmt(ln["centred"])},
            {"step": f"std = {number(ln['std'])}", "vector": ""},
            {"step": "LayerNorm(x)", "vector": fmt(ln["out"])},
            {"step": f"rms = {number(rms['rms'])}", "vector": ""},
            {"step": "RMSNorm(x)", "vector": fmt(rms["out"])},
        ],
        hide_index=True,
    )
    right.markdown(
        f"‖x − mean‖ = {number(np.linalg.norm(ln['centred']))}; ‖LayerNorm(x)‖ = {number(np.linalg.norm(ln['out']))} "
        f"and ‖RMSNorm(x)‖ = {number(np.linalg.norm(rms['out']))}: both √3 = {number(np.sqrt(3))}. The sum of "
        f"LayerNorm(x)'s entries is {number(ln['out'].sum())}: it lies in the plane; RMSNorm(x)'s is "
        f"{number(rms['out'].sum())}. Multiply x by any positive number, or add any multiple of 1: LayerNorm(x) does "
        "not move (γ = 1, β = 0 here; eps = 0)."
    )
    gradient(x)


def fmt(v: np.ndarray) -> str:
    return "(" + ", ".join(number(float(c), 3) for c in v) + ")"


def gradient(x: np.ndarray) -> None:
    st.subheader("The gradient through the norm")
    J = jacobian(x)
    seen = gradient_through(x, UPSTREAM)
    st.markdown(
        "Since the output does not change when x moves along 1 or along its own centred direction (a shift, or a "
        "rescaling), the Jacobian J = ∂y/∂x sends both to 0: J·1 = 0 and J·(x − mean) = 0. J is symmetric, so the "
        "gradient the norm passes back, ∂L/∂x = Jᵀ·g for whatever g arrives at its output, is orthogonal to both. "
        "The norm's input gets no gradient to grow or shrink, or to shift: only to turn. Below, J computed by "
        f"torch's autograd at your x, and g = {fmt(np.array(UPSTREAM))}."
    )
    left, right = st.columns(2)
    left.dataframe([{f"∂y/∂x{j + 1}": number(float(J[i, j]), 4) for j in range(3)} for i in range(3)], hide_index=True)
    left.caption("J, row i = ∂y_i/∂x (float64 autograd).")
    right.markdown(
        f"- largest |J·1|: {number(seen['J_ones'], 3)}\n"
        f"- largest |J·(x − mean)|: {number(seen['J_centred'], 3)}\n"
        f"- ∂L/∂x = Jᵀg = {fmt(seen['grad'])}\n"
        f"- ∂L/∂x · 1 = {number(seen['dot_ones'], 3)} (against ‖∂L/∂x‖·‖1‖ = {number(seen['scale_ones'], 3)})\n"
        f"- ∂L/∂x · (x − mean) = {number(seen['dot_centred'], 3)} (against {number(seen['scale_centred'], 3)})"
    )
    right.caption("Zero up to float64 rounding (about 1e-16).")


def figure_2d(x: np.ndarray) -> go.Figure:
    ln, rms = centre_and_scale(x), rms_norm(x)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[-3.5, 3.5], y=[3.5, -3.5], mode="lines", name="the line ⟂ 1 (x1 + x2 = 0)", line=dict(color="#1f6feb", width=1)
        )
    )
    t = np.linspace(0, 2 * np.pi, 121)
    fig.add_trace(
        go.Scatter(
            x=np.sqrt(2) * np.cos(t),
            y=np.sqrt(2) * np.sin(t),
            mode="lines",
            name="radius √2 (RMSNorm's circle)",
            line=dict(color=RMS_COLOUR, width=1, dash="dot"),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[1, -1],
            y=[-1, 1],
            mode="markers",
            name="LayerNorm's only two outputs",
            marker=dict(color=LN_COLOUR, size=14, symbol="circle-open", line=dict(width=2)),
        )
    )
    for tip, label, colour in (
        (ln["x"], "x", X_COLOUR),
        (ln["centred"], "x − mean", CENTRED_COLOUR),
        (ln["out"], "LayerNorm(x)", LN_COLOUR),
        (rms["out"], "RMSNorm(x)", RMS_COLOUR),
    ):
        fig.add_trace(
            go.Scatter(
                x=[0, tip[0]],
                y=[0, tip[1]],
                mode="lines+markers",
                name=label,
                line=dict(color=colour, width=3),
                marker=dict(size=[0, 9], color=colour),
            )
        )
    fig.update_layout(
        height=460,
        margin=dict(l=10, r=10, t=80, b=10),
        legend=dict(orientation="h", y=1.02, x=0, yanchor="bottom"),
        xaxis=dict(title="x1", range=[-3.5, 3.5]),
        yaxis=dict(title="x2", range=[-3.5, 3.5], scaleanchor="x", scaleratio=1),
    )
    return fig


@fragment
def in_2d() -> None:
    st.subheader("In 2-D: only two outputs")
    x = vector_inputs("ln2", (2.0, 0.6))
    if x[0] == x[1]:
        st.warning(plain("x1 = x2: x lies along 1, and centring leaves 0. Move a slider."), icon=":material/warning:")
        return
    left, right = st.columns([3, 2])
    show(figure_2d(x), left, config={"displayModeBar": False})
    ln = centre_and_scale(x)
    right.markdown(
        f'With d = 2 the plane orthogonal to 1 is a line, and its "sphere" of radius √2 is two points: '
        f"LayerNorm(x) = {fmt(ln['out'])}, whatever x's size. It keeps one bit, whether x1 > x2. That is why a norm "
        "needs many dimensions to keep information: in d dimensions the output keeps d − 2 degrees of freedom, "
        "a direction on a (d − 2)-sphere."
    )


@st.cache_data(max_entries=2, show_spinner=False)
def parameters(_loaded: LoadedModel, name: str) -> list[dict]:
    return gammas_betas(_loaded)


def norm_label(name: str) -> str:
    if name == "ln_final":
        return "final norm"
    return f"block {int(name.split('.')[1]) + 1} {name.split('.')[-1]}"  # short: a tick label


def learned(loaded: LoadedModel) -> None:
    st.subheader("γ and β in the course's model")
    rows = parameters(loaded, loaded.name)
    labels = [norm_label(r["norm"]) for r in rows]
    left, right = st.columns(2)
    for column, key, title, ref in ((left, "gamma", "γ (scale)", 1.0), (right, "beta", "β (shift)", 0.0)):
        fig = go.Figure(
            [
                go.Box(
                    y=r[key],
                    name=label,
                    boxpoints="outliers",
                    marker_color=LN_COLOUR,
                    hovertemplate="%{y:.4f}<extra>" + label + "</extra>",
                )
                for r, label in zip(rows, labels)
            ]
        )
        fig.add_hline(y=ref, line=dict(dash="dot", color="#868e96"))
        fig.update_layout(
            title=dict(text=f"{title}: its {loaded.cfg.d_model} entries per norm", font=dict(size=13), x=0),
            height=360,
            margin=dict(l=10, r=10, t=40, b=10),
            showlegend=False,
            xaxis_title="norm",
            yaxis_title=title,
        )
        show(fig, column, config={"displayModeBar": False})
    gamma = np.array([r["gamma"] for r in rows])
    st.caption(
        f"Each box: one norm's {loaded.cfg.d_model} values; block 1's ln1 is blocks.0.ln1. The line at γ = 1, β = 0 is where they started. "
        f"Training moved them: γ ranges from {gamma.min():.3f} to {gamma.max():.3f}. The final norm's γ "
        "scales what the unembedding reads."
    )


@st.cache_data(max_entries=32, show_spinner=False)
def model_gradient(prompt: str, block: int, _loaded: LoadedModel) -> dict:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    with lesson_pass("the gradient through a norm", _loaded, len(tokens), backward=True, passes=2):
        return on_the_model(_loaded, prompt, block)


@fragment
def on_model(loaded: LoadedModel) -> None:
    st.subheader("The same on the model's stream")
    st.markdown(
        "The model's ln1 at the prompt's last position: x is the residual stream there, and g the gradient that "
        "arrives at its normalised vector from the loss of the model's own top prediction (the engine's backward "
        "pass). Taken back through the normalisation, with the model's eps:"
    )
    st.session_state.setdefault("ln_prompt", PROMPT)
    knows(loaded, "ln_prompt")
    left, right = st.columns([3, 1])
    prompt = left.text_input("Prompt", max_chars=300, key="ln_prompt")
    block = right.selectbox("Block", range(loaded.cfg.n_layers), format_func=block_label, key="ln_block")
    try:
        seen = model_gradient(prompt, int(block), loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    cells = st.columns(3)
    cells[0].metric("cos(∂L/∂x, 1)", number(seen["dot_ones"] / seen["scale_ones"], 3) if seen["scale_ones"] else "0")
    cells[1].metric(
        "cos(∂L/∂x, x − mean)", number(seen["dot_centred"] / seen["scale_centred"], 3) if seen["scale_centred"] else "0"
    )
    cells[2].metric("eps / (var + eps)", number(seen["eps_share"], 3))
    st.caption(
        f"d = {loaded.cfg.d_model}, var(x) = {number(seen['var'])}, eps = {seen['eps']:g}. The gradient is orthogonal "
        "to 1 up to rounding. Against the centred x it is small, not 0: eps in the square root makes the output "
        "shrink a little as x shrinks, so J·(x − mean) = eps/(var + eps) · (x − mean)/√(var + eps) (largest entry "
        f"here {number(seen['J_centred'], 3)}), and the smaller x's variance, the larger that share."
    )


lesson = lesson_page("layernorm")
intro()
in_3d()
in_2d()
model = course_model()
learned(model)
on_model(model)
lesson_end(lesson)
