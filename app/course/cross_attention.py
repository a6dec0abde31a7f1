"""The lesson on encoders, decoders and cross-attention: the encoder-decoder micro-model reversing a
source (typed, or drawn with a Random button), its encoder's unmasked self-attention beside its
decoder's causal one, and a cross-attention head's (target × source) pattern with the anti-diagonal
outlined and its share measured; every head's share on held-out sources. Computed by
model/course/cross_attention.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import lesson_end, lesson_page, lesson_pass
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number, plain
from glassbox.app.resources import shared_model
from glassbox.model.course.cross_attention import (
    LENGTH,
    MODEL,
    Reversal,
    copy_share,
    random_source,
    repeated,
    reverse,
    trained_length,
)
from glassbox.model.engine import GlassboxError, block_label, check_prompt, head_label
from glassbox.model.micro import seq2seq
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import position_labels, token_text


@st.cache_data(max_entries=32, show_spinner=False)
def reversed_by_model(source: tuple[int, ...], _loaded) -> Reversal:
    # one generation (a pass per output token) and one traced pass
    with lesson_pass("reversing a source", _loaded, len(source), passes=len(source) + 1):
        return reverse(_loaded, list(source))


@st.cache_data(max_entries=2, show_spinner="Measuring every head on held-out sources…")
def held_out_figures(_loaded) -> dict:
    return seq2seq.figures(_loaded)


def pattern_grid(
    pattern: np.ndarray,
    rows: list[str],
    cols: list[str],
    title: str,
    row_title: str,
    col_title: str,
    marks: list[tuple[int, int]] = (),
) -> go.Figure:
    """One head's weights, each row a query summing to 1; the cells of ``marks`` outlined."""
    fig = heatmap_figure(
        pattern,
        rows,
        cols,
        title,
        row_title=row_title,
        col_title=col_title,
        colour="sequential",
        zmax=1.0,
        fixed=True,
        colorbar="weight",
        marks=marks,
        hover=f"{row_title} %{{y}}<br>{col_title} %{{x}}<br>%{{z:.4f}}<extra></extra>",
    )
    fig.update_layout(height=150 + 32 * len(rows), margin=dict(l=10, r=10, t=40, b=10))
    return fig


def the_source(loaded) -> tuple[list[int], Reversal] | None:
    """The source box with its Random button, and the model's reversal of it (None: an error shown)."""
    st.session_state.setdefault("cross_source", " ".join(loaded.pieces[t] for t in random_source(0)))
    if st.button("Random source", icon=":material/shuffle:"):
        st.session_state.cross_seed = st.session_state.get("cross_seed", 0) + 1
        st.session_state.cross_source = " ".join(loaded.pieces[t] for t in random_source(st.session_state.cross_seed))
    text = st.text_input(
        "Source (syllables, separated by spaces)",
        key="cross_source",
        max_chars=200,
        help=f"Words this model knows: {plain(loaded.tokenizer.known_words())}; "
        f"{seq2seq.LENGTHS[0]} to {seq2seq.LENGTHS[1]} of them, as it was trained on.",
    )
    try:
        source = loaded.encode(text)
        check_prompt(loaded.cfg, source, what="The source")
    except GlassboxError as exc:
        st.error(plain(exc))
        return None
    low, high = seq2seq.LENGTHS
    if not trained_length(source):
        st.warning(
            plain(
                f"This source has {len(source)} syllables. The model was trained on sources of {low} to "
                f"{high} syllables only: at any other length it was never taught anything, and it may fail "
                "(compare the output with the source reversed). Add or remove syllables to come back into its "
                "range."
            ),
            icon=":material/warning:",
        )
    return source, reversed_by_model(tuple(source), loaded)


def self_attention(loaded, seen: Reversal, block: int, head: int) -> None:
    st.subheader("Self-attention: the encoder sees everything, the decoder the past")
    st.markdown(
        "The **encoder** reads the whole source at once and builds a vector per source token. Nothing it does is "
        "generated, so nothing has to be hidden: its self-attention has no mask, and a token can read the tokens to "
        "its right as well as those to its left. The **decoder** writes the output one token at a time; when it is "
        "trained, every output position is computed in one pass, so each must be kept from the tokens it is about "
        "to predict: its self-attention is causal, the upper triangle is zero."
    )
    source_labels = position_labels(loaded.pieces, seen.source)
    read = position_labels(loaded.pieces, [loaded.cfg.decoder_start_token_id] + seen.output[:-1])
    left, right = st.columns(2)
    show(
        pattern_grid(
            seen.encoder[block, head],
            source_labels,
            source_labels,
            f"Encoder, {block_label(block)}, {head_label(head)}",
            "query (source)",
            "key (source)",
        ),
        left,
        config={"displayModeBar": False},
    )
    show(
        pattern_grid(
            seen.decoder[block, head],
            read,
            read,
            f"Decoder, {block_label(block)}, {head_label(head)}",
            "query (what the decoder read)",
            "key (what the decoder read)",
        ),
        right,
        config={"displayModeBar": False},
    )
    after = [float(np.triu(p[block, head], 1).sum(-1).mean()) for p in (seen.encoder, seen.decoder)]
    st.caption(
        f"Mean weight a query puts on keys after it: {number(after[0], 3)} in the encoder's head, "
        f"{number(after[1], 3)} "
        "in the decoder's (the mask makes it exactly 0). The decoder reads the start token `<s>` first, then "
        "its own output so far."
    )


def cross_attention(loaded, seen: Reversal, block: int, head: int) -> None:
    st.subheader("Cross-attention: the decoder reads the encoder")
    st.markdown(
        "Between its self-attention and its MLP, each decoder block has a second attention. Its queries come from "
        "the decoder's stream, its keys and values from the encoder's output: it is the only way anything of the "
        "source reaches the output. To reverse n tokens, the position that writes output token t needs source token "
        "n − 1 − t, so a head that fetches it puts its weight on the anti-diagonal, outlined in gold."
    )
    n = len(seen.source)
    read = [f"{t}: writes {token_text(loaded.pieces[o])}" for t, o in enumerate(seen.output)]
    fig = pattern_grid(
        seen.cross[block, head],
        read,
        position_labels(loaded.pieces, seen.source),
        f"Cross-attention, {block_label(block)}, {head_label(head)}",
        "target position",
        "source position",
        marks=[(t, n - 1 - t) for t in range(n)],
    )
    show(fig, config={"displayModeBar": False})
    share = seq2seq.aligned_share(seen.cross[block])[head]
    cells = st.columns(2)
    cells[0].metric(
        "Weight on the anti-diagonal",
        f"{share:.3f}",
        help="The mean over target positions t of the weight on source position n − 1 − t.",
    )
    cells[1].metric(
        "Output",
        "reversed exactly"
        if seen.correct
        else f"{sum(a == b for a, b in zip(seen.output, seen.source[::-1]))} of {n} tokens right",
    )
    twice = repeated(seen.source)
    if twice:
        fetched = copy_share(seen.cross[block], seen.source)[head]
        st.markdown(
            f"Your source repeats {plain(', '.join(loaded.pieces[t] for t in twice))}. The sources it was trained on "
            "never repeat a syllable. Where the syllable to write occurs twice, the head can fetch it from either "
            f"copy, and only one of them is on the anti-diagonal. So a reversal can come out right with a low "
            f"anti-diagonal share ({share:.3f}). Counting the weight on every copy of the syllable each target "
            f"position writes, this head puts **{fetched:.3f}** there."
        )


def every_head(loaded) -> None:
    st.subheader("Every cross-attention head, on held-out sources")
    figure = held_out_figures(loaded)
    table = pd.DataFrame(
        figure["aligned_share"],
        index=[block_label(b) for b in range(loaded.cfg.n_decoder_layers)],
        columns=[head_label(h) for h in range(loaded.cfg.n_heads)],
    ).map(lambda v: f"{v:.3f}")
    st.table(table)
    best = figure["best_head"]
    st.markdown(
        f"The mean weight on the anti-diagonal over {figure['held_out']} held-out random sources of "
        f"{seq2seq.LENGTHS[0]}–{seq2seq.LENGTHS[1]} syllables. The best head, {block_label(best['block'])} "
        f"{head_label(best['head'])}, puts **{best['share']:.3f}** of its weight there. Generating greedily, the "
        f"model reverses **{figure['exact_match']:.1%}** of these sources exactly."
    )


@fragment
def the_model_at_work(loaded) -> None:
    st.subheader("A source, reversed")
    st.markdown(
        f"Type {seq2seq.LENGTHS[0]} to {seq2seq.LENGTHS[1]} syllables (the lengths it was trained on, each syllable "
        f"once), or press **Random source** for {LENGTH} new ones. The model reads them with its encoder, "
        "then writes them back to front with its decoder, one token at a time, each time taking the most likely "
        "token (greedy)."
    )
    chosen = the_source(loaded)
    if chosen is None:
        return
    source, seen = chosen
    st.markdown(
        f"**Source:** {plain(' '.join(loaded.pieces[t] for t in source))}  \n"
        f"**Output:** {plain(' '.join(loaded.pieces[t] for t in seen.output))}"
    )
    figure = held_out_figures(loaded)
    settings = st.columns(2)
    block = settings[0].selectbox(
        "Block",
        range(loaded.cfg.n_decoder_layers),
        format_func=block_label,
        index=figure["best_head"]["block"],
        key="cross_block",
    )
    head = settings[1].selectbox(
        "Head", range(loaded.cfg.n_heads), format_func=head_label, index=figure["best_head"]["head"], key="cross_head"
    )
    cross_attention(loaded, seen, block, head)
    self_attention(loaded, seen, block, head)


lesson = lesson_page("cross-attention")
loaded = shared_model(MODEL)
st.markdown(
    "The models in the lessons so far are decoders: one stack of blocks that reads a prompt and continues it. "
    "A translator or a summariser reads one text and writes another. The original transformer, and T5, split the "
    "work between two stacks: an **encoder** that reads the source, and a **decoder** that writes the target while "
    "reading the encoder's output through **cross-attention**. The model here "
    f"({plain(loaded.about.get('card', {}).get('architecture', ''))}) was trained in a few minutes to do one thing: "
    "write its source backwards."
)
the_model_at_work(loaded)
every_head(loaded)
lesson_end(
    lesson,
    (
        (
            "The micro-model in the explorer: both stacks, every head, every gradient",
            MODEL,
            " ".join(loaded.pieces[t] for t in random_source(0)),
        ),
    ),
)  # no target: its own output
