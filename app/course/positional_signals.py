"""The lesson on positions: the sinusoidal table and its rotations (answered in the page:
app/components/lesson_controls.js), permutation equivariance on the
bundled model without positions and mask, its learned table, and RoPE's relative scores."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components import lesson_controls
from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain
from glassbox.model.course.positional_signals import (
    BASE,
    POSITIONS,
    PROMPT,
    colour_limit,
    learned_table,
    permutation_error,
    rope_rotated,
    rope_scores,
    shuffled_order,
)
from glassbox.model.engine import GlassboxError, check_prompt
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import token_text

FIRST_COLOUR, LATER_COLOUR = "#868e96", "#d9480f"
WIDTHS = (16, 32, 64, 128)  # the sinusoidal table's widths d to choose from
BETWEEN = (
    "Moving k positions on turns each (sin, cos) pair by the angle k·ωᵢ, whatever the position: "
    "PE(pos + k) = Mₖ·PE(pos), where Mₖ is block-diagonal with one 2 × 2 rotation per pair. So "
    "“k tokens back” is one linear map, the same everywhere, which a layer can learn."
)
Q_COLOUR, K_COLOUR = "#d9480f", "#1f6feb"


def table_figure(values, title: str, colour_title: str, cols: list[str], col_title: str, zmax: float | None = None):
    fig = heatmap_figure(
        values,
        [str(p) for p in range(len(values))],
        cols,
        title,
        row_title="position",
        col_title=col_title,
        colour="diverging",
        colorbar=colour_title,
        zmax=zmax,
        gaps=len(cols) <= 64,  # narrow cells: gaps would cover the colours
        hover="position %{y}, %{x}: %{z:.4f}<extra></extra>",
    )
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def sinusoids() -> None:
    st.subheader("The sinusoidal table")
    st.markdown(
        "Attention compares vectors; nothing in it knows where a vector sits. The original transformer adds "
        "each position a fixed vector: pairs of dimensions hold sin and cos of the position times a frequency, "
        "fast in the first pair, ever slower in the later ones, like the hands of a clock."
    )
    # the table, the dials and the rotation's error are computed in the page (lesson_controls.js), the same
    # arithmetic as sinusoidal_table and largest_shift_error, held to them in tests/test_course_in_page.py
    lesson_controls.positions(
        BASE,
        POSITIONS,
        WIDTHS,
        64,
        (1, 16),
        BETWEEN,
        "Computed in float64: the error is rounding, about 10⁻¹⁵.",
        {"first": FIRST_COLOUR, "later": LATER_COLOUR},
        key="positions_sinusoids",
    )


def circle(fig: go.Figure, row: int, col: int, radius: float = 1.0) -> None:
    angles = np.linspace(0, 2 * math.pi, 121)
    fig.add_trace(
        go.Scatter(
            x=radius * np.cos(angles),
            y=radius * np.sin(angles),
            mode="lines",
            hoverinfo="skip",
            line=dict(color="#dee2e6", width=1),
            showlegend=False,
        ),
        row=row,
        col=col,
    )


def dial_arrow(fig: go.Figure, x: float, y: float, colour: str, axes: tuple[str, str], width: float = 3) -> None:
    fig.add_annotation(
        x=x,
        y=y,
        ax=0,
        ay=0,
        xref=axes[0],
        yref=axes[1],
        axref=axes[0],
        ayref=axes[1],
        text="",
        showarrow=True,
        arrowhead=3,
        arrowwidth=width,
        arrowcolor=colour,
    )


@st.cache_data(max_entries=16, show_spinner=False)
def permutation_errors(prompt: str, seed: int, _loaded: LoadedModel) -> tuple[list[int], dict[str, float]]:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    order = shuffled_order(len(tokens), seed)
    with lesson_pass("shuffled prompts", _loaded, len(tokens), passes=6):
        return order, {
            label: permutation_error(_loaded.model, tokens, order, positions, causal)
            for label, positions, causal in (
                ("no positions, no mask", False, False),
                ("no positions, with the mask", False, True),
                ("positions, no mask", True, False),
            )
        }


@fragment
def shuffle(loaded: LoadedModel) -> None:
    st.subheader("Without positions, order is invisible")
    st.markdown(
        "Take the bundled model, set its position rows to zero (an edit of the pass, not of the model) and "
        "switch off the causal mask. Shuffle the prompt: every head's pattern is the old one with its rows and "
        "columns shuffled the same way, P·A·Pᵀ, and nothing else changes. The mask also carries order (who "
        "may see whom), so with the mask on, or with the positions back, the check fails."
    )
    prompt = prompt_box(loaded, "positions_prompt", PROMPT)
    seed = st.number_input("Shuffle (a seed)", 0, 10_000, 0, key="positions_seed")
    try:
        order, errors = permutation_errors(prompt, int(seed), loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    pieces = [token_text(loaded.pieces[t]) for t in loaded.encode(prompt)]
    st.markdown("Shuffled: " + plain(" · ".join(pieces[i] for i in order)))
    st.markdown("The largest |A(shuffled) − P·A·Pᵀ| over every block's and head's pattern:")
    for column, (label, error) in zip(st.columns(3), errors.items()):
        column.metric(label, f"{error:.3g}")
    st.caption(shuffle_caption(order, errors))


def shuffle_caption(order: list[int], errors: dict[str, float]) -> str:
    """What the three checks say, from their measured values: a shuffle that moves nothing (a
    one-token prompt) checks nothing."""
    if order == list(range(len(order))):
        return (
            "A single token has no other order: this shuffle moves nothing, so all three checks read 0 and say "
            "nothing. Give a longer prompt."
        )
    free, *ordered = errors.values()
    smallest = min(ordered)
    if free < 1e-4 and smallest > 1e-3:
        return (
            f"Without positions and mask the difference is float32 rounding ({free:.1e}); with either, it is "
            f"{smallest:.2g} or more, on weights between 0 and 1: the order shows."
        )
    return (
        f"Here the differences are {', '.join(f'{e:.2g}' for e in errors.values())}: this shuffle leaves "
        "the heads' view almost as it was (it may swap equal tokens). Try another seed."
    )


def learned(loaded: LoadedModel) -> None:
    st.subheader("Learned positions")
    st.markdown(
        "GPT-2 and the bundled model learn their position rows instead (W_pos, one row per position). "
        "Below, the first 32 rows and how alike they are: neighbours point the same way, far positions less."
    )
    rows, similarity = learned_table(loaded.model)
    limit = colour_limit(rows, 95.0)
    left, right = st.columns(2)
    show(
        table_figure(
            rows,
            "W_pos, the bundled model's first 32 rows",
            f"value (±{limit:.2f})",
            [str(i) for i in range(rows.shape[1])],
            "dimension",
            zmax=limit,
        ),
        left,
        config={"displayModeBar": False},
    )
    left.caption(
        f"The colours end at ±{limit:.3f}, the 95th percentile of |W_pos| here; the few larger entries "
        f"(up to {np.abs(rows).max():.3f}) are drawn at full colour. Hover for the exact values."
    )
    fig = heatmap_figure(
        similarity,
        [str(p) for p in range(POSITIONS)],
        [str(p) for p in range(POSITIONS)],
        "cosine similarity of two positions' rows",
        row_title="position",
        col_title="position",
        colour="diverging",
        colorbar="cosine",
        hover="%{y} and %{x}: %{z:.3f}<extra></extra>",
    )
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10))
    show(fig, right, config={"displayModeBar": False})


def rope() -> None:
    st.subheader("RoPE: rotate q and k instead")
    st.markdown(
        "Llama-style models add nothing to the embeddings. Each pair of a head's query and key features is "
        "rotated by its position times an angle θ before the dot product, and the score then depends on "
        "the offset between the two positions alone. Below, one pair (q = (1, 0.5), k = (0.8, −0.3), "
        "θ = 0.3) turned by the engine's own RoPE: move m and n together and both arrows turn, the angle between "
        "them and so their dot product staying the same."
    )
    rope_dial()
    pairs = [(0, 3), (5, 8), (20, 23), (3, 0), (8, 5), (23, 20)]
    scores = rope_scores((1.0, 0.5), (0.8, -0.3), 0.3, pairs)
    st.dataframe(
        [{"query at m": m, "key at n": n, "n − m": n - m, "q_m · k_n": round(s, 12)} for (m, n), s in zip(pairs, scores)],
        hide_index=True,
    )
    st.page_link(
        "screens/explore.py",
        label="The explorer's Tokens & embeddings view shows a RoPE model's rotated pairs",
        icon=":material/search:",
        query_params={"view": "Tokens & embeddings"},
    )


ROPE_Q, ROPE_K, ROPE_THETA = (1.0, 0.5), (0.8, -0.3), 0.3


@fragment
def rope_dial() -> None:
    cells = st.columns(2)
    m = cells[0].slider("Query's position m", 0, 23, 2, key="positions_rope_m")
    n = cells[1].slider("Key's position n", 0, 23, 5, key="positions_rope_n")
    show(rope_figure(m, n), config={"displayModeBar": False})


def rope_figure(m: int, n: int) -> go.Figure:
    """q turned by m·θ and k by n·θ (the engine's RoPE), the unturned pair faint: the angle between
    them, and so q_m·k_n, depends on n − m alone."""
    q, k = rope_rotated(ROPE_Q, ROPE_THETA, m), rope_rotated(ROPE_K, ROPE_THETA, n)
    score = rope_scores(ROPE_Q, ROPE_K, ROPE_THETA, [(m, n)])[0]
    fig = go.Figure()
    radius = max(math.hypot(*ROPE_Q), math.hypot(*ROPE_K))
    angles = np.linspace(0, 2 * math.pi, 121)
    for v in (ROPE_Q, ROPE_K):
        r = math.hypot(*v)
        fig.add_trace(
            go.Scatter(
                x=r * np.cos(angles),
                y=r * np.sin(angles),
                mode="lines",
                hoverinfo="skip",
                line=dict(color="#dee2e6", width=1),
                showlegend=False,
            )
        )
    for v, colour, width in ((ROPE_Q, Q_COLOUR, 1), (ROPE_K, K_COLOUR, 1), (q, Q_COLOUR, 3), (k, K_COLOUR, 3)):
        fig.add_annotation(
            x=v[0],
            y=v[1],
            ax=0,
            ay=0,
            xref="x",
            yref="y",
            axref="x",
            ayref="y",
            text="",
            showarrow=True,
            arrowhead=3,
            arrowwidth=width,
            arrowcolor=colour,
            opacity=1 if width > 1 else 0.45,
        )
    for v, text, colour, size in (
        (q, f"q at m = {m}: turned by {m}θ", Q_COLOUR, 9),
        (k, f"k at n = {n}: turned by {n}θ", K_COLOUR, 9),
        (ROPE_Q, "q before turning (pale)", Q_COLOUR, 5),
        (ROPE_K, "k before turning (pale)", K_COLOUR, 5),
    ):
        fig.add_trace(
            go.Scatter(
                x=[v[0]],
                y=[v[1]],
                mode="markers",
                name=text,
                opacity=1 if size > 5 else 0.5,
                marker=dict(color=colour, size=size),
                hovertemplate=f"{text}: (%{{x:.3f}}, %{{y:.3f}})<extra></extra>",
            )
        )
    span = radius * 1.45
    axis = dict(range=[-span, span], zeroline=True, zerolinecolor="#ced4da", fixedrange=True, showgrid=False)
    fig.update_layout(
        title=dict(
            text=f"<b>RoPE: q at m = {m}, k at n = {n}: k has turned (n − m)·θ = {(n - m) * ROPE_THETA:.1f} rad "
            f"more than q; q_m·k_n = {score:.4f}</b>",
            font=dict(size=13),
            x=0,
        ),
        height=440,
        margin=dict(l=10, r=10, t=40, b=10),
        plot_bgcolor="white",
        legend=dict(x=1.02, y=1, xanchor="left", yanchor="top"),
        xaxis=axis | dict(title="first feature of the pair", constrain="domain"),
        yaxis=axis | dict(title="second feature", scaleanchor="x", scaleratio=1),
    )
    return fig


lesson = lesson_page("positions")
sinusoids()
shuffle(course_model())
learned(course_model())
rope()
lesson_end(lesson)
