"""Lesson 1, attention by hand: pick one of four tokens, turn and stretch its 2-D query, and see
its scores, scaled scores, causal softmax weights and output move together; the course's
walk-through recomputed exactly; every token's similarity with every other."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import lesson_end, lesson_page
from glassbox.app.components.heatmap import heatmap_figure
from glassbox.app.components.labels import cell_text, number
from glassbox.model.course.attention_by_hand import (
    COURSE_WEIGHTS, D_K, KEYS, QUERIES, TOKENS, VALUES, WALKTHROUGH_QUERY, WALKTHROUGH_SCORES, WALKTHROUGH_TOKEN,
    Attention, attend, rounded_wrongly, similarity, walkthrough)

SPAN = 3.3  # the plot shows −SPAN..SPAN on both axes: the longest query (3) and every key fit
KEY_COLOUR, QUERY_COLOUR, OUTPUT_COLOUR = "#1f6feb", "#d9480f", "#2f9e44"
VALUE_COLOUR, HIDDEN_COLOUR = "#868e96", "#ced4da"  # the values; the keys of masked (later) tokens


def start_state() -> None:
    """Each token keeps its own query while the learner moves between tokens."""
    s = st.session_state
    s.setdefault("attn_queries", {t: (int(a), float(n)) for t, (a, n) in QUERIES.items()})
    s.setdefault("attn_token", WALKTHROUGH_TOKEN)
    if "attn_angle" not in s or "attn_length" not in s:
        s.attn_angle, s.attn_length = s.attn_queries[s.attn_token]


def load_query() -> None:
    s = st.session_state
    s.attn_angle, s.attn_length = s.attn_queries[s.attn_token]


def save_query() -> None:
    s = st.session_state
    s.attn_queries[s.attn_token] = (s.attn_angle, s.attn_length)


def walkthrough_preset() -> None:
    s = st.session_state
    s.attn_token = WALKTHROUGH_TOKEN
    s.attn_angle, s.attn_length = int(WALKTHROUGH_QUERY[0]), float(WALKTHROUGH_QUERY[1])
    save_query()


def arrow(fig: go.Figure, x: float, y: float, colour: str, width: float = 2.0) -> None:
    fig.add_annotation(x=x, y=y, ax=0, ay=0, xref="x", yref="y", axref="x", ayref="y", text="", showarrow=True,
                       arrowhead=3, arrowsize=1, arrowwidth=width, arrowcolor=colour)


CHAR, LINE, PAD = 0.12, 0.3, 0.05  # a label's size in plot units: ~7 px a character, 15 px a line
MARKER = 0.09  # half the side of the square a marker covers, in plot units
SHAFT, SHAFT_STEPS = 0.03, [i / 40 for i in range(2, 37)]  # an arrow's shaft, as small squares from near 0 to 0.9 of it


def label_box(x: float, y: float, text: str, position: str) -> tuple[float, float, float, float]:
    """The box (left, bottom, right, top, plot units) that ``text`` covers when plotly writes it at
    (x, y) with ``textposition`` ``position`` ("top right", …)."""
    v, h = position.split()
    width, height = CHAR * len(text) + 0.1, LINE
    left = {"right": x + PAD, "left": x - PAD - width, "center": x - width / 2}[h]
    bottom = {"top": y + PAD, "bottom": y - PAD - height, "middle": y - height / 2}[v]
    return left, bottom, left + width, bottom + height


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return not (a[2] <= b[0] or a[0] >= b[2] or a[3] <= b[1] or a[1] >= b[3])


def outward(x: float, y: float, text: str, placed: list[tuple[float, float, float, float]]) -> str | None:
    """Where to write a label at a vector's tip: beyond the tip, away from the origin (where the
    arrows are), else on another side; never outside the plot (±SPAN) nor over a box already
    ``placed`` (labels and the markers, appended to; the tip's own marker is not in the way);
    None where every side does, leaving that label to the hover."""
    vertical = ["top", "bottom"] if y >= 0 else ["bottom", "top"]
    horizontal = ["center"] if abs(x) < 0.3 else ["right", "left"] if x > 0 else ["left", "right"]
    sides = [f"{v} {h}" for v in vertical for h in horizontal + ["center"] * (horizontal != ["center"])]
    sides += [f"middle {h}" for h in (["right", "left"] if x >= 0 else ["left", "right"])]
    for position in sides:
        box = label_box(x, y, text, position)
        inside = -SPAN <= box[0] and box[2] <= SPAN and -SPAN <= box[1] and box[3] <= SPAN
        own = (x - MARKER, y - MARKER, x + MARKER, y + MARKER)
        if inside and not any(overlaps(box, b) for b in placed if b != own):
            placed.append(box)
            return position
    return None


def leader_spot(x: float, y: float, text: str, placed: list[tuple[float, float, float, float]]
                ) -> tuple[float, float] | None:
    """Where to centre a label that ``outward`` could not put at its tip: further out, at 0.5 to 1.5
    units in one of 16 directions (the one away from the origin first), inside the plot and clear
    of ``placed`` (appended to); None where there is no such place."""
    width, height = CHAR * len(text) + 0.1, LINE
    away = math.atan2(y, x) if (x, y) != (0.0, 0.0) else math.pi / 2
    for distance in (0.5, 0.8, 1.1, 1.5):
        for turn in sorted(range(16), key=lambda i: min(i, 16 - i)):
            angle = away + turn * math.pi / 8
            cx, cy = x + distance * math.cos(angle), y + distance * math.sin(angle)
            box = (cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2)
            inside = -SPAN <= box[0] and box[2] <= SPAN and -SPAN <= box[1] and box[3] <= SPAN
            if inside and not any(overlaps(box, b) for b in placed):
                placed.append(box)
                return cx, cy
    return None


def vector_plot(result: Attention, token: str) -> go.Figure:
    """The keys as arrows labelled with their tokens (the masked ones pale), the values as grey
    diamonds, the selected query and the output as arrows."""
    fig = go.Figure()
    q, out = result.query.tolist(), result.output.tolist()
    # (x, y, label, colour, symbol), labelled at the tips so that no two labels overlap: the query
    # and the output first, the keys next, the values last (their labels may be left to the hover)
    points = [(*q, f"q({token})", QUERY_COLOUR, "circle"), (*out, "output", OUTPUT_COLOUR, "square")]
    for j, key in enumerate(KEYS):
        colour = KEY_COLOUR if result.visible(j) else HIDDEN_COLOUR
        arrow(fig, *key, colour, 1.5)
        points.append((*key, f"k({TOKENS[j]})" + ("" if result.visible(j) else " masked"), colour, "circle"))
    points += [(*value, f"v({t})", VALUE_COLOUR, "diamond") for t, value in zip(TOKENS, VALUES)]  # ours
    arrow(fig, *q, QUERY_COLOUR, 3)
    arrow(fig, *out, OUTPUT_COLOUR, 3)
    placed = [(x - MARKER, y - MARKER, x + MARKER, y + MARKER) for x, y, *_ in points]  # no label over a marker
    tips = [q, out] + [list(key) for key in KEYS]  # nor over an arrow's shaft (the tip is its marker)
    placed += [(t * x - SHAFT, t * y - SHAFT, t * x + SHAFT, t * y + SHAFT) for x, y in tips for t in SHAFT_STEPS]
    for x, y, text, colour, symbol in points:
        position = outward(x, y, text, placed)
        spot = None if position or symbol == "diamond" else leader_spot(x, y, text, placed)
        if spot:  # the query and the output, and the keys, are always labelled: off the crowd, with a leader line
            fig.add_annotation(x=x, y=y, ax=spot[0], ay=spot[1], xref="x", yref="y", axref="x", ayref="y", text=text,
                               showarrow=True, arrowhead=0, arrowwidth=1, arrowcolor=colour, standoff=3,
                               xanchor="center", yanchor="middle", font=dict(color=colour, size=12))
        fig.add_trace(go.Scatter(x=[x], y=[y], mode="markers+text" if position else "markers", text=[text],
                                 textposition=position or "top center", showlegend=False,
                                 marker=dict(color=colour, size=8 if symbol != "circle" else 5, symbol=symbol),
                                 textfont=dict(color=colour, size=12),
                                 hovertemplate=f"{text}: (%{{x:.3f}}, %{{y:.3f}})<extra></extra>"))
    axis = dict(range=[-SPAN, SPAN], zeroline=True, zerolinecolor="#adb5bd", fixedrange=True, dtick=1)
    fig.update_layout(
        title=dict(text=f"<b>Keys, values, the query of “{token}” and its output</b>", font=dict(size=13), x=0),
        height=500, margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white",
        xaxis=axis | dict(title="first coordinate", constrain="domain"),
        yaxis=axis | dict(title="second coordinate", scaleanchor="x", scaleratio=1))
    return fig


def score_text(value: float) -> str:
    """A score or weight as a reader expects it (labels.number: never −0.0000), −∞ where masked."""
    return "−∞ (masked)" if value == -math.inf else number(value)


def score_table(result: Attention) -> pd.DataFrame:
    """Each token's score, scaled score and weight as the page writes them (4 decimals)."""
    rows = []
    for j, token in enumerate(TOKENS):
        rows.append({"token": token, "q·k": score_text(result.scores[j].item()),
                     f"q·k / √{D_K}": score_text(result.scaled[j].item()),
                     "weight (softmax)": number(result.weights[j].item())})
    return pd.DataFrame(rows).set_index("token")


def explore(token: str, result: Attention) -> None:
    left, right = st.columns([6, 5], gap="medium")
    with left:
        show(vector_plot(result, token), config={"displayModeBar": False})
        st.caption("Blue: the keys k (pale: masked, later tokens); grey diamonds: the values v, which are ours (the "
                   "course gives no value vectors); orange: the query q; green: the output Σ w·v. A label that would "
                   "cover another is left to the hover.")
    with right:
        st.markdown(f"**What “{token}” computes**")
        st.table(score_table(result))
        seen = result.position + 1
        terms = " + ".join(f"{number(result.weights[j].item())}·v({TOKENS[j]})" for j in range(seen))
        x, y = result.output.tolist()
        st.markdown(f"output = {terms} = **({number(x)}, {number(y)})**")
        if result.position == 0:
            st.caption("“the” comes first: it can see only itself, so its weight is 1 whatever its query.")
        else:
            later = " and ".join(f"“{t}”" for t in TOKENS[seen:])
            verbs = "comes later and is" if len(TOKENS) - seen == 1 else "come later and are"
            st.caption(f"“{token}” sees itself and the tokens before it"
                       + (f"; {later} {verbs} masked: score −∞, weight 0." if later else "."))


def walkthrough_section() -> None:
    """The course's one worked token, recomputed: its scores, our exact weights, its printed ones."""
    shown = walkthrough()
    seen = shown.position + 1
    weights = shown.weights[:seen].tolist()
    st.subheader("The course's walk-through, recomputed")
    st.markdown(
        f"The course works through “{WALKTHROUGH_TOKEN}” attending to “the”, “cat” and “sat” with the scores "
        f"{', '.join(f'{s:g}' for s in WALKTHROUGH_SCORES)}, and those are the numbers its softmax receives. So the "
        f"preset puts the query at {WALKTHROUGH_QUERY[0]:g}° with length {WALKTHROUGH_QUERY[1]:g}, which is "
        f"(√2, √2), and picks keys whose coordinates add up to each score: then q·k/√2 is exactly that score "
        f"(the raw q·k is the score times √2). The value vectors are ours: the course does not give its own.")
    st.table(pd.DataFrame({
        "token": TOKENS[:seen],
        "the course's score": [f"{s:g}" for s in WALKTHROUGH_SCORES],
        "our q·k / √2": [number(s) for s in shown.scaled[:seen].tolist()],
        "our weight (exact softmax)": [number(w) for w in weights],
        "the course prints": [f"{w:.2f}" for w in COURSE_WEIGHTS]}).set_index("token"))
    wrong = rounded_wrongly(weights, COURSE_WEIGHTS)
    notes = [f"{weights[i]:.4f} rounds to {weights[i]:.2f}, not {COURSE_WEIGHTS[i]:.2f}" for i in wrong]
    x, y = shown.output.tolist()
    st.markdown(
        f"The softmax of (0.7, 2.1, 1.3) is ({', '.join(f'{w:.4f}' for w in weights)}). "
        + (f"The course rounds the last one wrongly: {'; '.join(notes)} (its three printed weights add up to "
           f"{sum(COURSE_WEIGHTS):.2f}). " if wrong else "")
        + f"With our values, the output is ({number(x)}, {number(y)}).")


def similarity_section(token: str, queries: dict[str, tuple[float, float]]) -> None:
    st.subheader("Every token's similarity with every other")
    st.markdown(
        "Here the similarity of two tokens is the raw dot product qᵢ·kⱼ of one token's query with the other's "
        "key, before the scale and before the mask. Each row is one token asking; the row of the token you "
        f"picked above (“{token}”, outlined) moves with its query. The cells right of the diagonal are later "
        "tokens: they get a score too, but the causal mask throws it away (lesson 4).")
    matrix = similarity(queries).numpy()
    largest = float(abs(matrix).max())
    text = [[cell_text(v, largest, ".2f") for v in row] for row in matrix]
    fig = heatmap_figure(matrix, [f"q({t})" for t in TOKENS], [f"k({t})" for t in TOKENS], "Similarity qᵢ·kⱼ",
                         row_title="query of", col_title="key of", text=text, text_size=13, fixed=True,
                         colorbar="q·k", marks=[(TOKENS.index(token), None)], height=300,
                         hover="%{y} · %{x} = %{z:.4f}<extra></extra>")
    fig.update_layout(width=560)
    show(fig, config={"displayModeBar": False}, width="content")


lesson = lesson_page("attention")
st.markdown(
    "Each token asks a question (its query), and every token it may look at offers a label (its key) and a "
    "content (its value). The query's dot product with each key is a score; the scores are divided by √d_k, "
    "turned into weights by a softmax, and the output is the weighted sum of the values. Here there are four "
    "tokens with 2-D vectors, so d_k = 2 and every step fits in a plot. The model is causal: a token attends to "
    "itself and the tokens before it, never to later ones. The keys reproduce the course's walk-through (below); "
    "the value vectors are ours, since the course does not give any.")
start_state()
controls = st.columns([5, 4, 4, 4], vertical_alignment="bottom")
token = controls[0].radio("Token", TOKENS, key="attn_token", horizontal=True, on_change=load_query)
controls[1].slider("Angle of its query (degrees)", -180, 180, step=1, key="attn_angle", on_change=save_query)
controls[2].slider("Length of its query", 0.0, 3.0, step=0.1, key="attn_length", on_change=save_query)
controls[3].button("The course's walk-through", key="attn_walkthrough", on_click=walkthrough_preset,
                   help=f"“{WALKTHROUGH_TOKEN}” with the query that gives the course's scores")
result = attend(TOKENS.index(token), st.session_state.attn_angle, st.session_state.attn_length)
explore(token, result)
walkthrough_section()
similarity_section(token, st.session_state.attn_queries)
lesson_end(lesson)
