"""Lesson 3, positions: the sinusoidal table and its rotations, permutation equivariance on the
bundled model without positions and mask, its learned table, and RoPE's relative scores."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.errors import fragment
from glassbox.app.components.heatmap import heatmap_figure
from glassbox.app.components.labels import plain, token_text
from glassbox.model.course.positional_signals import (POSITIONS, PROMPT, largest_shift_error, learned_table,
                                                      permutation_error, rope_scores, shuffled_order, sinusoidal_table)
from glassbox.model.engine import GlassboxError, check_prompt
from glassbox.model.io.checkpoint import LoadedModel


def table_figure(values, title: str, colour_title: str, cols: list[str], col_title: str):
    fig = heatmap_figure(values, [str(p) for p in range(len(values))], cols, title, row_title="position",
                         col_title=col_title, colour="diverging", colorbar=colour_title,
                         hover="position %{y}, %{x}: %{z:.4f}<extra></extra>")
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10))
    return fig


@fragment
def sinusoids() -> None:
    st.subheader("The sinusoidal table")
    st.markdown(
        "Attention compares vectors; nothing in it knows where a vector sits. The original transformer adds "
        "each position a fixed vector: pairs of dimensions hold sin and cos of the position times a frequency, "
        "fast in the first pair, ever slower in the later ones, like the hands of a clock.")
    d = st.select_slider("d (dimensions)", [16, 32, 64, 128], value=64, key="positions_d")
    table = sinusoidal_table(POSITIONS, d).numpy()
    show(table_figure(table, f"PE(pos, ·), positions 0–{POSITIONS - 1}, d = {d}", "value",
                      [str(i) for i in range(d)], "dimension (even: sin, odd: cos)"), config={"displayModeBar": False})
    st.markdown(
        "Moving k positions on turns each (sin, cos) pair by the angle k·ωᵢ, whatever the position: "
        "PE(pos + k) = Mₖ·PE(pos), where Mₖ is block-diagonal with one 2 × 2 rotation per pair. So "
        "“k tokens back” is one linear map, the same everywhere, which a layer can learn.")
    k = st.slider("Offset k", 1, 16, 1, key="positions_k")
    error = largest_shift_error(k, d)
    st.metric(f"largest |PE(pos + {k}) − M_{k}·PE(pos)| over positions 0–{POSITIONS - 1}", f"{error:.2e}")
    st.caption("Computed in float64: the error is rounding, about 10⁻¹⁵.")


@st.cache_data(max_entries=16, show_spinner=False)
def permutation_errors(prompt: str, seed: int, _loaded: LoadedModel) -> tuple[list[int], dict[str, float]]:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    order = shuffled_order(len(tokens), seed)
    with lesson_pass("shuffled prompts", _loaded, len(tokens), passes=6):
        return order, {label: permutation_error(_loaded.model, tokens, order, positions, causal)
                       for label, positions, causal in (("no positions, no mask", False, False),
                                                        ("no positions, with the mask", False, True),
                                                        ("positions, no mask", True, False))}


@fragment
def shuffle(loaded: LoadedModel) -> None:
    st.subheader("Without positions, order is invisible")
    st.markdown(
        "Take the bundled model, set its position rows to zero (an edit of the pass, not of the model) and "
        "switch off the causal mask. Shuffle the prompt: every head's pattern is the old one with its rows and "
        "columns shuffled the same way, P·A·Pᵀ, and nothing else changes. The mask also carries order (who "
        "may see whom), so with the mask on, or with the positions back, the check fails.")
    prompt = st.text_input("Prompt", PROMPT, max_chars=300, key="positions_prompt")
    seed = st.number_input("Shuffle (a seed)", 0, 10_000, 0, key="positions_seed")
    try:
        order, errors = permutation_errors(prompt, int(seed), loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    pieces = [token_text(loaded.pieces[t]) for t in loaded.encode(prompt)]
    st.markdown("Shuffled: " + plain(" · ".join(pieces[i] for i in order)))
    st.markdown("The largest |A(shuffled) − P·A·Pᵀ| over every block's and head's pattern:")
    for column, (label, error) in zip(st.columns(3), errors.items()):
        column.metric(label, f"{error:.3g}")
    st.caption("Without positions and mask the difference is float32 rounding; with either, it is as large as "
               "the weights themselves.")


def learned(loaded: LoadedModel) -> None:
    st.subheader("Learned positions")
    st.markdown(
        "GPT-2 and the bundled model learn their position rows instead (W_pos, one row per position). "
        "Below, the first 32 rows and how alike they are: neighbours point the same way, far positions less.")
    rows, similarity = learned_table(loaded.model)
    left, right = st.columns(2)
    show(table_figure(rows, "W_pos, the bundled model's first 32 rows", "value",
                      [str(i) for i in range(rows.shape[1])], "dimension"), left, config={"displayModeBar": False})
    fig = heatmap_figure(similarity, [str(p) for p in range(POSITIONS)], [str(p) for p in range(POSITIONS)],
                         "cosine similarity of two positions' rows", row_title="position", col_title="position",
                         colour="diverging", colorbar="cosine", hover="%{y} and %{x}: %{z:.3f}<extra></extra>")
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10))
    show(fig, right, config={"displayModeBar": False})


def rope() -> None:
    st.subheader("RoPE: rotate q and k instead")
    st.markdown(
        "Llama-style models add nothing to the embeddings. Each pair of a head's query and key features is "
        "rotated by its position times an angle θ before the dot product, and the score then depends on "
        "the offset between the two positions alone. Below, one pair (q = (1, 0.5), k = (0.8, −0.3), "
        "θ = 0.3) rotated by the engine's own RoPE:")
    pairs = [(0, 3), (5, 8), (20, 23), (3, 0), (8, 5), (23, 20)]
    scores = rope_scores((1.0, 0.5), (0.8, -0.3), 0.3, pairs)
    st.dataframe([{"query at m": m, "key at n": n, "n − m": n - m, "q_m · k_n": round(s, 12)}
                  for (m, n), s in zip(pairs, scores)], hide_index=True)
    st.page_link("screens/explore.py", label="The explorer's Tokens & embeddings view shows a RoPE model's rotated "
                 "pairs", icon=":material/search:", query_params={"view": "Tokens & embeddings"})


lesson = lesson_page("positions")
sinusoids()
shuffle(course_model())
learned(course_model())
rope()
lesson_end(lesson)
