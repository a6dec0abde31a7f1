"""The lesson on attention by hand: pick one of four tokens, turn and stretch its 2-D query, and see
its scores, scaled scores, causal softmax weights and output move together, with every token's
similarity with every other: all answered in the page (app/components/lesson_controls.js, the
lesson module's arithmetic written again and held to it in tests/test_course_in_page.py); then the
course's walk-through recomputed exactly."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from glassbox.app.components import lesson_controls
from glassbox.app.components.course import lesson_end, lesson_page
from glassbox.app.components.labels import number
from glassbox.model.course.attention_by_hand import (
    COURSE_WEIGHTS,
    D_K,
    KEYS,
    QUERIES,
    TOKENS,
    VALUES,
    WALKTHROUGH_QUERY,
    WALKTHROUGH_SCORES,
    WALKTHROUGH_TOKEN,
    rounded_wrongly,
    walkthrough,
)

COLOURS = {
    "key": "#1f6feb",
    "query": "#d9480f",
    "output": "#2f9e44",
    "value": "#868e96",
    "hidden": "#ced4da",
}  # the values; the keys of masked (later) tokens
# where the page writes a vector's label, in plot units (the plot shows −SPAN..SPAN on both axes: the
# longest query, 3, and every key fit): ~7 px a character, 15 px a line, the box a marker covers, and
# an arrow's shaft as small squares from near 0 to 0.9 of it (its tip is its marker)
GEOMETRY = {
    "SPAN": 3.3,
    "CHAR": 0.12,
    "LINE": 0.3,
    "PAD": 0.05,
    "MARKER": 0.09,
    "SHAFT": 0.03,
    "SHAFT_STEPS": [i / 40 for i in range(2, 37)],
}
CAPTION = (
    "Blue: the keys k (pale: masked, later tokens); grey diamonds: the values v, which are ours (the course "
    "gives no value vectors); orange: the query q; green: the output Σ w·v. A label that would cover another "
    "is left to the hover."
)


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
        f"(the raw q·k is the score times √2). The value vectors are ours: the course does not give its own."
    )
    st.table(
        pd.DataFrame(
            {
                "token": TOKENS[:seen],
                "the course's score": [f"{s:g}" for s in WALKTHROUGH_SCORES],
                "our q·k / √2": [number(s) for s in shown.scaled[:seen].tolist()],
                "our weight (exact softmax)": [number(w) for w in weights],
                "the course prints": [f"{w:.2f}" for w in COURSE_WEIGHTS],
            }
        ).set_index("token")
    )
    wrong = rounded_wrongly(weights, COURSE_WEIGHTS)
    notes = [f"{weights[i]:.4f} rounds to {weights[i]:.2f}, not {COURSE_WEIGHTS[i]:.2f}" for i in wrong]
    x, y = shown.output.tolist()
    st.markdown(
        f"The softmax of (0.7, 2.1, 1.3) is ({', '.join(f'{w:.4f}' for w in weights)}). "
        + (
            f"The course rounds the last one wrongly: {'; '.join(notes)} (its three printed weights add up to "
            f"{sum(COURSE_WEIGHTS):.2f}). "
            if wrong
            else ""
        )
        + f"With our values, the output is ({number(x)}, {number(y)})."
    )


lesson = lesson_page("attention")
st.markdown(
    "Each token asks a question (its query), and every token it may look at offers a label (its key) and a "
    "content (its value). The query's dot product with each key is a score; the scores are divided by √d_k, "
    "turned into weights by a softmax, and the output is the weighted sum of the values. Here there are four "
    "tokens with 2-D vectors, so d_k = 2 and every step fits in a plot. The model is causal: a token attends to "
    "itself and the tokens before it, never to later ones. The keys reproduce the course's walk-through (below); "
    "the value vectors are ours, since the course does not give any."
)
st.markdown(
    "Below the plot, the similarity of every two tokens: the raw dot product qᵢ·kⱼ of one token's query with the "
    "other's key, before the scale and the mask. The cells right of the diagonal are later tokens: they get a "
    "score too, but the causal mask throws it away (the causal-mask lesson)."
)
lesson_controls.attention(
    TOKENS,
    KEYS,
    VALUES,
    QUERIES,
    D_K,
    (WALKTHROUGH_TOKEN, *WALKTHROUGH_QUERY),
    GEOMETRY,
    COLOURS,
    CAPTION,
    key="attention_by_hand",
)
walkthrough_section()
lesson_end(lesson)
