"""The lesson on the causal mask: the four tokens' scores before and after the mask and their weights;
the bundled model's attention on a prompt with the mask and without it (an encoder's view); what
that changes in the last position's prediction and in the earlier positions."""

from __future__ import annotations

import math

import numpy as np
import streamlit as st

from glassbox.app.components.charts import paired_bars, show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, knows
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import cell_text, number, plain, token_labels
from glassbox.model.course.mask import PROMPT, TOP, Comparison, compare, later_share, top_tokens, total_variation, toy
from glassbox.model.engine import GlassboxError, block_label, check_prompt, head_label
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.heatmap import abs_max, heatmap_figure
from glassbox.model.plot.labels import position_labels, token_text

WRITTEN = 10  # prompts up to this many tokens get every weight written in its cell
MASKED_COLOUR, OPEN_COLOUR = "#1f6feb", "#d9480f"


@st.cache_data(max_entries=16, show_spinner=False)
def comparison(prompt: str, _loaded: LoadedModel) -> Comparison:
    """The prompt with the mask and without it (always the course's model: the key is the prompt)."""
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    with lesson_pass("the causal mask, on and off", _loaded, len(tokens), passes=5):
        return compare(_loaded.model, tokens)


def grid(values: np.ndarray, labels: list[str], title: str, probability: bool, written: bool = True):
    """A query × key heatmap with its values written in (−∞ as such) and every exact value on hover."""
    largest = abs_max(values)
    text = [[cell_text(v, largest, ".2f") for v in row] for row in values] if written else None
    fig = heatmap_figure(
        values,
        labels,
        labels,
        title,
        row_title="query (the token that looks)",
        col_title="key (the token looked at)",
        colour="sequential" if probability else "diverging",
        zmax=1.0 if probability else None,
        text=text,
        text_size=11,
        fixed=len(labels) <= 24,
        colorbar="weight" if probability else "score",
        hover="query %{y}<br>key %{x}<br>%{z:.6g}<extra></extra>",
    )
    fig.update_layout(height=min(160 + 34 * len(labels), 640), margin=dict(l=10, r=10, t=40, b=10))
    return fig


def by_hand() -> None:
    st.subheader("By hand: the four tokens of the attention lesson")
    small = toy()
    st.markdown(
        "Each of the four tokens has its own query from the attention lesson; the scores q·k/√2 fill a 4 × 4 grid, one row per "
        "query. The mask writes −∞ above the diagonal, where a key comes after its query. The softmax turns "
        "exp(−∞) into 0, so every row's weights sum to 1 over the token itself and the ones before it: the grid "
        "of weights is lower-triangular."
    )
    columns = st.columns(3)
    labels = list(small.tokens)
    for column, values, title, probability in (
        (columns[0], small.scores, "Scores q·k/√2", False),
        (columns[1], small.masked, "After the mask", False),
        (columns[2], small.weights, "Weights: softmax of each row", True),
    ):
        show(grid(values.numpy(), labels, title, probability), column, config={"displayModeBar": False})


def patterns(seen: Comparison, labels: list[str], block: int, head: int) -> None:
    written = len(labels) <= WRITTEN
    left, right = st.columns(2)
    for column, run, title in (
        (left, seen.masked, "With the mask (as trained)"),
        (right, seen.open, "Without the mask (as an encoder)"),
    ):
        show(grid(run.pattern[block, head], labels, title, True, written), column, config={"displayModeBar": False})
    share = later_share(seen.open.pattern[block, head])
    if share is not None:
        st.markdown(
            f"Without the mask, {block_label(block)}, {head_label(head)} puts on average "
            f"**{100 * share:.2f}%** of a position's weight on later tokens, over all {len(labels)} "
            "positions (the last has no later token: its share is 0). With the mask: 0%."
        )


def prediction(seen: Comparison, loaded: LoadedModel) -> None:
    st.subheader("What the last position predicts")
    masked, open_ = seen.masked.last_probs, seen.open.last_probs
    ids = list(dict.fromkeys([i for i, _ in top_tokens(masked)] + [i for i, _ in top_tokens(open_)]))
    labels = token_labels([loaded.pieces[i] for i in ids], ids)
    fig = paired_bars(
        labels,
        [
            ("with the mask", [float(masked[i]) for i in ids], MASKED_COLOUR),
            ("without the mask", [float(open_[i]) for i in ids], OPEN_COLOUR),
        ],
        f"<b>The top {TOP} next tokens each way</b>",
        "probability (log scale)",
        "next token",
    )
    # a log axis: the likeliest token often takes nearly all the probability, and on a linear axis the
    # others' bars are too short to see; every bar is labelled with its probability
    values = [float(p) for p in np.concatenate([masked[ids], open_[ids]])]
    low = math.log10(max(min(values), 1e-12))
    for trace in fig.data:
        trace.text = [f"{v:.2g}" for v in trace.x]
    # the legend above the bars: in a corner it can cover a long "without" bar's label
    fig.update_layout(
        legend=dict(orientation="h", x=0, y=1.0, xanchor="left", yanchor="bottom"),
        xaxis=dict(type="log", range=[math.floor(low) - 0.2, 0.35], dtick=1, exponentformat="power"),
        margin=dict(t=80),
        height=fig.layout.height + 20,
    )
    chart, numbers = st.columns([3, 2], gap="large")
    show(fig, chart, config={"displayModeBar": False})
    numbers.metric(
        "Total variation distance",
        f"{total_variation(masked, open_):.4f}",
        help="Half the summed |difference| of the two distributions: the share of probability that "
        "moves, from 0 (the same) to 1 (nothing in common).",
    )
    if seen.earlier_shift is not None:
        with_mask, without = seen.earlier_shift
        moved = (
            "do not move at all (the largest change is exactly 0)"
            if with_mask == 0
            else f"move by at most **{number(with_mask, 6)}**"
        )
        numbers.markdown(
            f"Replace the last token by “{plain(token_text(loaded.pieces[seen.replacement]))}”. With the mask, the "
            f"logits of every earlier position {moved}: a position never reads what comes after it. Without the "
            f"mask they move by up to **{number(without, 3)}**."
        )


@fragment
def on_the_model() -> None:
    st.subheader("On the model: with and without the mask")
    loaded = course_model()
    st.markdown(
        "The bundled story model was trained with the mask. Switch it off and the same weights attend both ways, "
        "as a BERT-style encoder does; Glassbox's support for encoder models builds on this same switch. The model "
        "never saw such inputs in training, so read the change as what the mask holds back, not as a better model."
    )
    st.session_state.setdefault("mask_prompt", PROMPT)
    knows(loaded, "mask_prompt")
    settings = st.columns([3, 2, 4], vertical_alignment="bottom")
    prompt = settings[0].text_input("Prompt", key="mask_prompt", max_chars=2000)
    block = settings[1].selectbox("Block", range(loaded.cfg.n_layers), format_func=block_label, key="mask_block")
    head = settings[2].radio(
        "Head", range(loaded.cfg.n_heads), format_func=lambda h: f"head {h + 1}", key="mask_head", horizontal=True
    )
    try:
        seen = comparison(prompt, loaded)
    except GlassboxError as exc:
        st.error(plain(str(exc)))
        return
    fit_note(loaded, prompt)
    labels = position_labels(loaded.pieces, seen.tokens)
    patterns(seen, labels, block, head)
    st.caption(
        "In block 1 the last row is the same both ways: the last position sees every token anyway. Its "
        "prediction still changes, because the earlier positions now read later tokens and the blocks "
        "after it read those positions."
    )
    prediction(seen, loaded)


lesson = lesson_page("mask")
st.markdown(
    "A decoder such as GPT writes one token at a time, so in training each position must predict its next token "
    "without seeing it. The causal mask does this: before the softmax, every score of a key that comes after its "
    "query is set to −∞, and its weight becomes exactly 0. All positions are then trained at once, each on only "
    "what came before it."
)
by_hand()
on_the_model()
lesson_end(lesson)
