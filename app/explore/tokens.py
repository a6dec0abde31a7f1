"""Tokens and embeddings: ids and pieces, the vectors looked up for them, where they sit in the
embedding matrix (PCA, cosine neighbours), and the positional table."""

from functools import partial

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import place_labels, show
from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer, choose_position, heatmap, lazy_tabs, positions_heatmap
from glassbox.model.analysis import EmbeddingPCA, nearest_tokens, positional_table
from glassbox.model.analysis.architecture import NO_POSITIONS
from glassbox.model.engine import block_label
from glassbox.model.serving import Needs

# most vocabulary points drawn in the PCA: SVG, one node per point (a GPU-less browser starts a
# WebGL context slowly). Chromium here draws 1,500 in ~70 ms, 3,000 in ~160 ms.
CLOUD = 1500
PCA_PX = (440, 300)  # the PCA's plot area in pixels, about, in its column at 1280–1400 px wide
NEEDS = Needs(("hook_embed", "hook_pos_embed", "hook_token_type_embed", "blocks.0.hook_resid_pre"))


def lit(ctx: Explorer) -> set[str]:
    return {"embed", "pos"}


@st.cache_resource(show_spinner="Finding the embedding matrix's principal components…", max_entries=8)
def components(model_key: str, _ctx: Explorer, unit: bool) -> EmbeddingPCA:
    """Per model and scaling, once: the vocabulary is the same for every prompt."""
    return EmbeddingPCA(_ctx.model.embed.W_E, unit)


@st.cache_resource(max_entries=16)
def pca(model_key: str, _ctx: Explorer, unit: bool, first: int):
    return components(model_key, _ctx, unit).project(first)


@st.cache_resource(max_entries=4)
def raw_pc1(model_key: str, _ctx: Explorer) -> tuple[float, float]:
    """The raw PCA's first share of the variance and how closely it follows the embeddings' lengths."""
    raw = components(model_key, _ctx, False)
    return float(raw.eigenvalues[0] / raw.eigenvalues.sum()), raw.length_correlation()


SCALINGS = {"raw": False, "unit length (cosine)": True}


@st.cache_resource(max_entries=64)
def neighbours_of(model_key: str, token_id: int, _ctx: Explorer) -> list[tuple[int, float]]:
    """Per model and token: a cosine over the whole vocabulary, not redone on every rerun."""
    return nearest_tokens(_ctx.model.embed.W_E, token_id, 10)


def stream_parts(ctx: Explorer, trace) -> None:
    """What enters the residual stream, one part a tab: the token rows, the position rows, the
    token types and their sum; the positional table and where the tokens sit in the embedding matrix."""
    cfg = ctx.cfg
    rows = partial(positions_heatmap, ctx, trace)
    parts = {"Token embeddings": partial(rows, "hook_embed", "Token embeddings W_E[token]", "tok:embed")}
    if cfg.positional == "table":
        parts["Position rows"] = partial(rows, "hook_pos_embed", "Position rows W_pos[position]", "tok:pos")
    if cfg.n_token_types:  # BERT: one prompt is one sentence, type 0 at every position
        parts["Token types"] = partial(
            rows, "hook_token_type_embed", "Token-type rows W_type[0] (one sentence: type 0)", "tok:type"
        )
    if cfg.positional == "table" and cfg.n_layers:  # with no block, the sum is traced nowhere
        summed = f"Their sum, normed by ln_embed ({cfg.norm})" if cfg.embed_norm else "Their sum"
        parts["Their sum"] = partial(
            rows, "blocks.0.hook_resid_pre", f"{summed}: the residual stream entering block 1 (blocks.0)", "tok:sum"
        )
    parts["The positional table"] = partial(positional_part, ctx)
    parts["The embedding matrix"] = partial(embedding_matrix, ctx)
    lazy_tabs(parts, "explore_tokens_part")


def render(ctx: Explorer) -> None:
    trace = ctx.trace(NEEDS)
    st.subheader(f"{len(ctx.tokens)} tokens")
    st.dataframe(
        pd.DataFrame(
            [ctx.pieces, [str(t) for t in ctx.tokens]],
            index=["piece", "token id"],
            columns=[str(i) for i in range(len(ctx.tokens))],
        ),
        width="stretch",
    )

    stream_parts(ctx, trace)


def positional_part(ctx: Explorer) -> None:
    if ctx.cfg.positional == "none":
        st.info(plain(NO_POSITIONS))
        return
    layer = 0
    if ctx.cfg.positional == "rope" and ctx.cfg.local_rope_base is not None:  # local and global layers differ
        layer = st.selectbox(
            "RoPE of block",
            range(ctx.cfg.n_layers),
            key="explore_rope_layer",
            format_func=lambda i: block_label(i) + (" (local)" if ctx.cfg.is_local(i) else ""),
            help="This model's layers rotate at different frequencies (local and global layers).",
        )
    table, what, col_title = positional_table(ctx.model, layer, rows=max(64, len(ctx.tokens)))
    st.caption(what + f". The prompt uses rows 0–{len(ctx.tokens) - 1}.")
    shown = f"Positions: the first {len(table)} of {ctx.cfg.n_ctx}" if len(table) < ctx.cfg.n_ctx else "Positions"
    heatmap(
        table,
        [str(i) for i in range(len(table))],
        None,
        shown,
        "pos_embed.W_pos" if ctx.cfg.positional == "table" else "rope_cos",
        col_title=col_title,
        zoom_key="tok:table",
    )


def embedding_matrix(ctx: Explorer) -> None:
    """Where the prompt's tokens sit in the embedding matrix: its PCA and a token's nearest neighbours."""
    left, right = st.columns([3, 2])
    with right:
        share, r = raw_pc1(ctx.model_key, ctx)
        skip = r > 0.9 and ctx.cfg.d_model > 2  # a PC1 that is only the embeddings' length: start at PC2
        scaling = st.radio(
            "Embeddings as",
            list(SCALINGS),
            key="explore_pca_scaling",
            horizontal=True,
            help="Raw: as stored. Unit length: each embedding divided by its length first, the "
            "geometry the cosine neighbours use.",
        )
        pairs = min(3, max(ctx.cfg.d_model - 1, 1))
        first = st.selectbox(
            "Components", range(pairs), index=int(skip), key="explore_pca_first", format_func=lambda i: f"PC{i + 1} and PC{i + 2}"
        )
        st.caption(
            f"The raw embeddings' PC1 holds {share:.1%} of the variance; its correlation with their "
            f"lengths is |r| = {r:.3f}"
            + (
                ": it mostly says how long each embedding is (frequent tokens grow long), so the map opens on PC2 and PC3."
                if skip
                else "."
            )
        )
        position = choose_position(ctx, "Token", help="Its nearest neighbours by cosine similarity of embeddings")
        token = ctx.tokens[position]
        neighbours = neighbours_of(ctx.model_key, token, ctx)
        st.dataframe(
            pd.DataFrame(
                {
                    "token": [ctx.piece(i) for i, _ in neighbours],
                    "id": [i for i, _ in neighbours],
                    "cosine": [round(c, 4) for _, c in neighbours],
                }
            ),
            hide_index=True,
            width="stretch",
        )
    coords, explained = pca(ctx.model_key, ctx, SCALINGS[scaling], first)
    with left:
        stride = -(-len(coords) // CLOUD)  # a large vocabulary is drawn every stride-th token
        cloud = np.arange(0, len(coords), stride)
        fig = go.Figure(
            go.Scatter(
                x=coords[cloud, 0],
                y=coords[cloud, 1],
                mode="markers",
                name="vocabulary" + (f" (every {stride}th token)" if stride > 1 else ""),
                marker=dict(size=4, color="#bbb"),
                text=[ctx.piece(i) for i in cloud],
                hovertemplate="%{text}<extra></extra>",
            )
        )
        ids = list(dict.fromkeys(ctx.tokens))  # in the prompt's order: its first words are labelled first
        pieces = [ctx.piece(i) for i in ids]
        # a label that would cover another is left to the hover
        drawn = np.concatenate([coords[cloud], coords[ids]])
        where = place_labels(
            coords[ids, 0],
            coords[ids, 1],
            pieces,
            (drawn[:, 0].min(), drawn[:, 0].max()),
            (drawn[:, 1].min(), drawn[:, 1].max()),
            PCA_PX,
        )
        fig.add_trace(
            go.Scatter(
                x=coords[ids, 0],
                y=coords[ids, 1],
                mode="markers+text",
                name="this prompt",
                text=[p if w else "" for p, w in zip(pieces, where)],
                hovertext=pieces,
                hovertemplate="%{hovertext}<extra></extra>",
                textposition=[w or "top center" for w in where],
                marker=dict(size=9, color="#1f6feb"),
            )
        )
        labelled = sum(w is not None for w in where)
        near = [i for i, _ in neighbours]  # named in the table beside, and on hover
        fig.add_trace(
            go.Scatter(
                x=coords[near, 0],
                y=coords[near, 1],
                mode="markers",
                name=f"neighbours of {ctx.pieces[position]}",
                text=[ctx.piece(i) for i in near],
                hovertemplate="%{text}<extra>neighbour</extra>",
                marker=dict(size=8, color="#f2a900", symbol="diamond"),
            )
        )
        fig.update_layout(
            title=dict(
                text=f"<b>PCA of embed.W_E</b> {ctx.cfg.vocab_size:,} tokens × {ctx.cfg.d_model}, "
                + ("each scaled to unit length" if SCALINGS[scaling] else "raw"),
                font=dict(size=13),
                x=0,
            ),
            xaxis_title=f"PC{first + 1} ({explained[0]:.1%} of variance)",
            yaxis_title=f"PC{first + 2} ({explained[1]:.1%})",
            height=460,
            margin=dict(l=10, r=10, t=40, b=10),
            legend=dict(orientation="h", y=-0.15),
        )
        show(fig, width="stretch")
        if labelled < len(ids):
            st.caption(
                f"{labelled} of the prompt's {len(ids)} distinct tokens are labelled; the others would print "
                "over them. Hover over any point to read it."
            )
