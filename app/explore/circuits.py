"""Circuits: a head read from its weights alone (QK: who attends to whom; OV: what attending
copies), the direct path's bigram table, and every head's induction and previous-token scores
on a repeated random sequence. Computed by model/analysis/circuits.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer, choose_head, choose_layer, heatmap, lacks
from glassbox.app.resources import model_pass
from glassbox.model.analysis.circuits import SCORED, bigram, ov_circuit, qk_circuit, random_tokens
from glassbox.model.engine import block_label, head_label
from glassbox.model.plot.labels import WORD_JOINER
from glassbox.model.serving import trace_cost

MOST_TOKENS = 24  # the prompt's distinct tokens shown in the circuit grids
# The worked example of this view: a two-block attention-only model trained on repeated syllables,
# whose block 1 has a previous-token head and block 2 induction heads; on this prompt it predicts
# "ne" (p ≈ 0.96) by copying what followed "li" the first time
INDUCTION_MODEL, INDUCTION_PROMPT = "micro-induction", "ba ko mi to ze li ne ga ba ko mi to ze li"
REPEAT = 20  # length of the random sequence that is repeated for the head scores
TOP = 5


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{i}.attn" for i in range(ctx.cfg.n_layers)}


@st.cache_resource(max_entries=8, show_spinner="Scoring every head on a repeated random sequence…")
def scores(model_key: str, _ctx: Explorer):
    prefix = _ctx.loaded.tokenizer.prefix()  # what the tokenizer puts first (Llama's and Gemma's BOS), as a prompt has it
    n = min(REPEAT, (_ctx.cfg.n_ctx - len(prefix)) // 2)  # twice over must fit in the context
    half = random_tokens(len(_ctx.loaded.tokenizer.pieces), n)
    length = len(prefix) + 2 * n
    cost = _ctx.check_cost("Scoring the heads", lambda t: trace_cost(_ctx.model, t, SCORED, False), length)
    with model_pass("head scores", cost):
        return half, *_ctx.loaded.circuits(half, prefix)


def circuits_cost(ctx: Explorer, tokens: tuple) -> int:
    """What a circuit over the whole vocabulary computes and keeps: its rows as computed and in
    float64 (up to 8 bytes a number, twice)."""
    return 2 * 8 * len(tokens) * (ctx.cfg.vocab_size + ctx.cfg.d_model)


@st.cache_resource(max_entries=8, show_spinner="Reading the head's weights…")
def circuits_of(model_key: str, layer: int, head: int, tokens: tuple, _ctx: Explorer):
    """The head's circuits over ``tokens`` and over the whole vocabulary: per model, head and
    token set, not per rerun."""
    tokens = list(tokens)
    with model_pass("circuits", circuits_cost(_ctx, tokens)):
        return (
            qk_circuit(_ctx.model, layer, head, tokens, tokens),
            ov_circuit(_ctx.model, layer, head, tokens, tokens),
            ov_circuit(_ctx.model, layer, head, tokens),
        )


@st.cache_resource(max_entries=8, show_spinner="Reading the direct path…")
def direct_path(model_key: str, tokens: tuple, _ctx: Explorer):
    """The bigram table over the whole vocabulary, per model and token set."""
    with model_pass("circuits", circuits_cost(_ctx, tokens)):
        return bigram(_ctx.model, list(tokens))


def open_induction_model() -> None:
    """What the model picker does when a model is chosen (the page then writes it into the URL),
    with a prompt that model reads."""
    st.session_state.explore_model = INDUCTION_MODEL
    st.session_state.explore_prompt = INDUCTION_PROMPT


def induction_example(ctx: Explorer) -> None:
    """Where the induction micro-model is not the open one, a click that opens it here."""
    if ctx.model_key == INDUCTION_MODEL:
        return
    st.markdown(
        f"**The worked example of this view** is {INDUCTION_MODEL}: two attention-only blocks trained on "
        "repeated syllables. Its head scores show a previous-token head in block 1 and induction heads in "
        "block 2, the circuit that continues a repeated sequence."
    )
    if st.button(f"Open {INDUCTION_MODEL} on “{INDUCTION_PROMPT}”", on_click=open_induction_model, icon=":material/open_in_new:"):
        st.rerun()  # the whole page: the model and the prompt are chosen above this view


def top_columns(matrix: np.ndarray, k: int) -> np.ndarray:
    """Per row, the columns of its k largest entries, largest first."""
    part = np.argpartition(-matrix, k - 1, axis=1)[:, :k]
    return np.take_along_axis(part, np.argsort(-np.take_along_axis(matrix, part, 1), axis=1, kind="stable"), 1)


def fragments(ctx: Explorer) -> np.ndarray:
    """Whether each vocabulary entry is a byte fragment, part of a character with no text of its
    own (labelled <0xD0> by the tokenizer's readable pieces)."""
    return np.array(["<0x" in piece.replace(WORD_JOINER, "") for piece in ctx.vocab_pieces])


def top_outputs(ctx: Explorer, circuit, text_only: bool = False) -> pd.DataFrame:
    """Per input token, the output tokens the circuit raises most; ``text_only``: of the outputs
    that are text, byte fragments left out (a table over the whole vocabulary)."""
    matrix = circuit.matrix
    if text_only:
        columns = fragments(ctx)[np.asarray(circuit.cols)]
        matrix = np.where(columns[None, :], -np.inf, matrix) if not columns.all() else matrix
    best = top_columns(matrix, min(TOP, circuit.matrix.shape[1]))
    return pd.DataFrame(
        {
            f"top {k + 1}": [f"{ctx.piece(circuit.cols[j])} {circuit.matrix[i, j]:.3g}" for i, j in enumerate(best[:, k])]
            for k in range(best.shape[1])
        },
        index=[ctx.piece(t) for t in circuit.rows],
    )


def circuit_tokens(ctx: Explorer) -> list[int]:
    """The tokens the grids and tables are read over: a typed text's distinct ones, else the prompt's."""
    typed = st.text_input(
        "Tokens to read the circuits over",
        key="explore_circuit_tokens",
        persist_state="session",
        placeholder="empty: this prompt's",
        help="Any text: its distinct tokens, in order, are the grids' rows and columns",
    )
    chosen = ctx.loaded.encode(typed) if typed else ctx.tokens
    tokens = list(dict.fromkeys(chosen))[:MOST_TOKENS]
    st.caption(
        f"Tokens: the {len(tokens)} distinct ones of "
        + ("the text above" if typed else "this prompt")
        + (f" (the first {MOST_TOKENS})" if len(set(chosen)) > MOST_TOKENS else "")
        + "."
    )
    return tokens


def direct_path_table(ctx: Explorer, tokens: list[int]) -> None:
    whole = ctx.cfg.n_layers == 0 and not ctx.cfg.final_norm and ctx.cfg.positional != "table"
    says = "stands where it is (an encoder predicts each position's own token)" if ctx.cfg.kind == "encoder" else "comes next"
    st.markdown(
        f"**The direct path (bigram table).** e W_U: what each token alone, through no block, says {says}"
        + ("; with no blocks, no positions and no final norm these are the model's logits." if whole else ".")
    )
    st.dataframe(top_outputs(ctx, direct_path(ctx.model_key, tuple(tokens), ctx)), width="stretch")


def render(ctx: Explorer) -> None:
    st.markdown(
        "A head read from its weights alone, as in Elhage et al., *A Mathematical Framework for Transformer "
        "Circuits*: norms, biases and positions left out, the head's input taken to be one token's embedding "
        "and its output read straight through the unembedding. Exact for the weights; an approximation of "
        "what the model computes on a prompt (the other views show that)."
    )
    induction_example(ctx)
    if lacks(ctx):  # no heads to read: the direct path is the whole model
        direct_path_table(ctx, circuit_tokens(ctx))
        return
    left, right = st.columns(2)
    with left:
        layer = choose_layer(ctx)
    with right:
        head = choose_head(ctx)
    tokens = circuit_tokens(ctx)
    labels = [ctx.piece(t) for t in tokens]
    where = f"blocks.{layer}.attn, {head_label(head)}"
    qk, ov, full = circuits_of(ctx.model_key, layer, head, tuple(tokens), ctx)
    a, b = st.columns(2)
    with a:
        heatmap(
            qk.matrix,
            labels,
            labels,
            "QK circuit: the score a query token gives a key token",
            f"{where}: (e_q W_Q)(e_k W_K)ᵀ × scale",
            row_title="query token",
            col_title="key token",
            width=450,
        )
    with b:
        heatmap(
            ov.matrix,
            labels,
            labels,
            "OV circuit: what attending to a token adds to each logit",
            f"{where}: e W_V W_O W_U",
            row_title="attended token",
            col_title="logit of",
            width=450,
        )

    def pairs(circuit) -> str:
        return ", ".join(f"{plain(ctx.piece(r))} → {plain(ctx.piece(c))} ({v:.3g})" for r, c, v in circuit.top_pairs(TOP))

    st.caption(f"Top pairs. QK (query → key): {pairs(qk)}. OV (attended → logit): {pairs(ov)}.")
    top = min(TOP, full.matrix.shape[1])
    diagonal = float(np.mean([t in top_columns(full.matrix[i : i + 1], top)[0] for i, t in enumerate(tokens)]))
    left_out = int(fragments(ctx).sum())
    st.markdown(
        f"**What {block_label(layer)}, {head_label(head)} copies.** Over the whole vocabulary, the logits "
        f"attending to each token raises most; the token itself is among its top {top} for {diagonal:.0%} of "
        "these tokens (a copying head: near 100%)."
        + plain(
            f" The table lists text only: the vocabulary's {left_out} byte fragments (part of a character, "
            "such as <0xD0>) are left out of it."
            if left_out
            else ""
        )
    )
    st.dataframe(top_outputs(ctx, full, text_only=True), width="stretch")
    direct_path_table(ctx, tokens)
    head_scores_view(ctx)


def strongest(scores: np.ndarray) -> str:
    """The block and head with the highest score, and the score."""
    block, head = np.unravel_index(np.argmax(scores), scores.shape)
    return f"{plain(block_label(int(block)))}, {plain(head_label(int(head)))} ({scores[block, head]:.2f})"


def head_scores_view(ctx: Explorer) -> None:
    st.subheader("Induction and previous-token heads")
    half, induction, previous = scores(ctx.model_key, ctx)
    n = len(half)
    rows = [block_label(i) for i in range(ctx.cfg.n_layers)]
    cols = [head_label(h) for h in range(ctx.cfg.n_heads)]
    # uniform attention: over the keys up to each query, or (an encoder) over every key of the sequence
    length = len(ctx.loaded.tokenizer.prefix()) + 2 * n
    uniform = np.mean([1 / (t + 1) for t in range(n, 2 * n)]) if ctx.cfg.causal else 1 / length
    st.caption(
        f"{n} random tokens, then the same {n} again. An induction head attends from each token of "
        f"the repeat to the token that followed it the first time (t − {n - 1}); a previous-token head to "
        f"t − 1. Each cell is that attention weight averaged over the positions; uniform attention would give "
        f"about {uniform:.2f}" + (f" (an encoder's query sees all {length} tokens)." if not ctx.cfg.causal else ".")
    )
    a, b = st.columns(2)
    with a:
        heatmap(
            induction,
            rows,
            cols,
            "Induction score",
            "mean pattern[t, t − n + 1]",
            row_title="block",
            col_title="head",
            sequential=True,
            width=450,
        )
    with b:
        heatmap(
            previous,
            rows,
            cols,
            "Previous-token score",
            "mean pattern[t, t − 1]",
            row_title="block",
            col_title="head",
            sequential=True,
            width=450,
        )
    st.caption(f"Most induction-like here: {strongest(induction)}. Most previous-token-like: {strongest(previous)}.")
