"""The efficiency lesson: flash attention's tiles and online softmax, a sliding window's mask and
cost, ring attention over simulated devices, grouped-query attention's cache, each on one head of
the bundled model reading a story, every result held to plain attention on the page."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number
from glassbox.model.course.efficiency import (
    GQA_MODELS,
    causal_scores,
    flash_attention,
    flash_held_formula,
    gqa_table,
    head_qkv,
    plain_attention,
    plain_held,
    ring_attention,
    story_prompt,
    window_mask,
    window_scores,
)
from glassbox.model.course.real_model_configs import MODEL
from glassbox.model.engine import block_label, head_label
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import position_labels

BLOCK_SIZES = [4, 8, 16, 32, 64, 128]
DEVICE_COUNTS = [1, 2, 3, 4, 6, 8]
LENGTHS = [2**i for i in range(6, 18)]  # 64 … 131,072 tokens, for the memory and cost curves


@st.cache_data(max_entries=32, show_spinner=False)
def story_head(block: int, head: int, _loaded: LoadedModel) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    tokens = story_prompt(_loaded)
    with lesson_pass("one head's queries, keys and values", _loaded, len(tokens)):
        q, k, v = head_qkv(_loaded, tokens, block, head)
    return tokens, q.numpy(), k.numpy(), v.numpy()


def choose_head(loaded: LoadedModel):
    """The block and head the lesson reads (from 1 on the page, as everywhere), as float64 tensors."""
    left, right = st.columns(2)
    block = left.selectbox("Block", range(loaded.cfg.n_layers), format_func=block_label, key="eff_block")
    head = right.selectbox("Head", range(loaded.cfg.n_heads), format_func=head_label, key="eff_head")
    tokens, q, k, v = story_head(block, head, loaded)
    return tokens, *(torch.from_numpy(x) for x in (q, k, v))


def tile_grid(tiles: list[dict], n_q: int, n_k: int, block_q: int, block_k: int) -> go.Figure:
    order = np.full((n_q, n_k), np.nan)
    for i, t in enumerate(x for x in tiles if x["computed"]):
        order[t["query_block"], t["key_block"]] = i + 1
    rows = [f"queries {i * block_q}–{(i + 1) * block_q - 1}" for i in range(n_q)]
    cols = [f"keys {j * block_k}–{(j + 1) * block_k - 1}" for j in range(n_k)]
    fig = heatmap_figure(
        order,
        rows,
        cols,
        "Tiles computed, in order (blank: skipped, all in the future)",
        row_title="query block",
        col_title="key block",
        colour="sequential",
        colorbar="order",
        text=[["" if np.isnan(x) else f"{x:.0f}" for x in row] for row in order],
        fixed=True,
        hover="%{y}<br>%{x}<br>tile %{z}<extra></extra>",
    )
    fig.update_layout(height=min(140 + 34 * n_q, 560), margin=dict(l=10, r=10, t=40, b=10))
    return fig


@fragment
def flash(loaded: LoadedModel) -> None:
    st.subheader("Flash attention: the scores a tile at a time")
    tokens, q, k, v = choose_head(loaded)
    T, d = q.shape
    st.markdown(
        f"The head reads {T} tokens of bundled stories; its q, k and v (each {T} × {d}) are the model's own, "
        "captured by the engine and taken in float64. Plain attention computes all T × T scores, then the softmax. "
        "Flash attention takes a block of queries and runs through the key blocks one by one, keeping for each "
        "query row only a running max m, a running sum l of exp(score − m), and the weighted values so far. When "
        "a new block raises m, what was summed is multiplied by exp(old m − new m). Tiles wholly in the future are "
        "skipped."
    )
    left, right = st.columns(2)
    block_q = left.select_slider("Query block Bq", BLOCK_SIZES, value=16, key="eff_bq")
    block_k = right.select_slider("Key block Bk", BLOCK_SIZES, value=32, key="eff_bk")
    plain = plain_attention(q, k, v)
    tiled = flash_attention(q, k, v, block_q, block_k)
    n_q, n_k = -(-T // block_q), -(-T // block_k)
    cells = st.columns(3)
    cells[0].metric("largest |flash − plain|", f"{float((tiled.out - plain).abs().max()):.2e}")
    cells[1].metric(
        "elements held at once",
        f"{tiled.held:,}",
        help="Q tile + K and V tiles + score tile + output accumulator + running max and sum, counted "
        "from the tensors in the loop",
    )
    cells[2].metric("plain attention holds", f"{plain_held(T, d):,}", help="q, k, v, the output and T × T scores")
    st.caption(
        f"Held, by the formula: 2·Bq·d + 2·Bk·d + Bq·Bk + 2·Bq = {flash_held_formula(T, d, block_q, block_k):,} "
        f"(Bq = {min(block_q, T)}, Bk = {min(block_k, T)}, d = {d}); the loop counts {tiled.held:,}. "
        f"{sum(t['computed'] for t in tiled.tiles)} of {len(tiled.tiles)} tiles computed, "
        f"{tiled.scores_computed:,} scores in them (T² = {T * T:,})."
    )
    show(tile_grid(tiled.tiles, n_q, n_k, block_q, block_k), config={"displayModeBar": False})
    row = st.slider("Follow one query position", 0, T - 1, value=T - 1, key="eff_row")
    history = tiled.histories[row // block_q]
    within = row % block_q
    steps = [f"keys {h['keys'][0]}–{h['keys'][1] - 1}" for h in history]
    fig = go.Figure(
        [
            go.Scatter(x=steps, y=[h["m"][within] for h in history], mode="lines+markers", name="running max m"),
            go.Scatter(x=steps, y=[h["l"][within] for h in history], mode="lines+markers", name="running sum l", yaxis="y2"),
        ]
    )
    fig.update_layout(
        xaxis_title="after the key block",
        yaxis_title="m (score)",
        yaxis2=dict(title="l = Σ exp(score − m)", overlaying="y", side="right"),
        height=300,
        margin=dict(t=10, b=10),
        legend=dict(orientation="h", y=1.15, x=0),
    )
    show(fig, config={"displayModeBar": False})
    label = position_labels(loaded.pieces, tokens)[row]
    st.caption(
        f"Query {label}: the max only rises, and each rise shrinks the sum before the new block's terms "
        f"are added. At the end l is the softmax's denominator: {number(history[-1]['l'][within])}."
    )
    fig = go.Figure(
        [
            go.Scatter(x=LENGTHS, y=[t * t for t in LENGTHS], name="T × T scores (plain)", mode="lines"),
            go.Scatter(
                x=LENGTHS,
                y=[block_q * block_k + 2 * block_q] * len(LENGTHS),
                mode="lines",
                name=f"one {block_q} × {block_k} tile + max and sum (flash)",
            ),
        ]
    )
    fig.update_layout(
        xaxis=log_axis(LENGTHS, "sequence length T (tokens)"),
        yaxis=log_axis([LENGTHS[0] ** 2, LENGTHS[-1] ** 2, block_q * block_k], "score elements held, one head"),
        height=300,
        margin=dict(t=10, b=10),
        legend=dict(orientation="h", y=1.15, x=0),
    )
    show(fig, config={"displayModeBar": False})
    st.caption(
        "The flash tile does not grow with T: the memory for scores is constant. The work does not shrink "
        "(every visible score is still computed); what is saved is the trips to slow memory."
    )


@fragment
def sliding_window(loaded: LoadedModel) -> None:
    st.subheader("Sliding-window attention: fewer scores")
    tokens, q, k, v = story_head(0, 0, loaded)
    T = len(tokens)
    st.markdown(
        "Each query sees only itself and the w − 1 keys before it (Mistral, Gemma's local layers). The mask "
        "below is the engine's own, the one a model with a window uses. Block 1, head 1 reads the story."
    )
    w = st.slider("Window w", 1, T, value=16, key="eff_window")
    mask = window_mask(T, w).numpy()
    labels = position_labels(loaded.pieces, tokens)
    fig = heatmap_figure(
        mask.astype(float),
        labels,
        labels,
        f"Keys each query sees (w = {w})",
        row_title="query (the token that looks)",
        col_title="key (the token looked at)",
        colour="sequential",
        zmax=1.0,
        colorbar=None,
        gaps=False,
        hover="query %{y}<br>key %{x}<br>seen: %{z}<extra></extra>",
    )
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10))
    show(fig, config={"displayModeBar": False})
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    change = float((plain_attention(q, k, v, window=w) - plain_attention(q, k, v)).abs().max())
    cells = st.columns(3)
    cells[0].metric("scores computed", f"{int(mask.sum()):,}", help="cells seen in the mask, counted")
    cells[1].metric("full causal", f"{causal_scores(T):,}", help="T(T + 1)/2")
    cells[2].metric("largest change of the head's output", number(change))
    st.caption(
        f"By the formula: w(w + 1)/2 + (T − w)·w = {window_scores(T, w):,} for T ≥ w (T(T + 1)/2 when "
        f"T < w); here T = {T}. The cost grows as T·w, not T²/2; the price is the change in the output "
        "when the head wanted keys further back (stacked layers reach further: each sees w back from the last)."
    )
    fig = go.Figure(
        [go.Scatter(x=LENGTHS, y=[causal_scores(t) for t in LENGTHS], mode="lines", name="full causal")]
        + [
            go.Scatter(x=LENGTHS, y=[window_scores(t, x) for t in LENGTHS], mode="lines", name=f"w = {x}")
            for x in sorted({w, 4096})
        ]
    )
    fig.update_layout(
        xaxis=log_axis(LENGTHS, "sequence length T (tokens)"),
        yaxis=log_axis([1, causal_scores(LENGTHS[-1])], "scores computed, one head"),
        height=300,
        margin=dict(t=10, b=10),
        legend=dict(orientation="h", y=1.15, x=0),
    )
    show(fig, config={"displayModeBar": False})


@fragment
def ring(loaded: LoadedModel) -> None:
    st.subheader("Ring attention: the sequence split over devices")
    q, k, v = (torch.from_numpy(x) for x in story_head(0, 0, loaded)[1:])
    st.markdown(
        "Each of N devices keeps one block of queries (and starts with the keys and values of the same "
        "positions). At every step each device folds the key/value block it holds into its running softmax "
        "(the same update as flash attention's) and passes the block to the next device round the ring. "
        "After N steps every device has seen every block. Simulated here, one after another, on block 1, "
        "head 1."
    )
    devices = st.select_slider("Devices N", DEVICE_COUNTS, value=4, key="eff_devices")
    result = ring_attention(q, k, v, devices)
    plain = plain_attention(q, k, v)
    held = np.array([[cell["key_block"] + 1 for cell in row] for row in result.steps], float)
    text = [[f"K/V {cell['key_block'] + 1}" + ("" if cell["used"] else " (future)") for cell in row] for row in result.steps]
    fig = heatmap_figure(
        held,
        [f"step {s + 1}" for s in range(devices)],
        [f"device {i + 1}" for i in range(devices)],
        "The key/value block each device holds (future: passed on unused)",
        row_title="step",
        col_title="device (its queries: block of the same number)",
        colour="sequential",
        colorbar="K/V block",
        text=text,
        fixed=True,
        hover="%{y}, %{x}<br>%{text}<extra></extra>",
    )
    fig.update_layout(height=140 + 34 * devices, margin=dict(l=10, r=10, t=40, b=10))
    show(fig, config={"displayModeBar": False})
    cells = st.columns(3)
    cells[0].metric("largest |ring − plain|", f"{float((result.out - plain).abs().max()):.2e}")
    cells[1].metric("elements one device holds", f"{result.per_device_held:,}")
    cells[2].metric("elements passed round the ring", f"{result.sent:,}")
    st.caption(
        "No device ever holds the whole sequence's keys and values, yet every query's result is exact: the "
        "online softmax does not care in which order the blocks arrive. With the causal mask "
        f"{sum(not c['used'] for row in result.steps for c in row)} of the {devices * devices} arrivals are "
        "wholly in the future and go unused, most of them on the first devices; real systems even this out "
        "by giving each device two mirrored blocks."
    )


@fragment
def grouped_query() -> None:
    st.subheader("Grouped-query attention: a smaller cache")
    st.markdown(
        "Several query heads share one key/value head, so the KV cache keeps fewer heads per token. The "
        "bytes per token are the KV lesson's: 2 (K and V) × layers × key/value heads × d_head × bytes."
    )
    name = st.selectbox("Model", GQA_MODELS, index=GQA_MODELS.index("Llama-3-70B"), key="eff_gqa_model")
    s = MODEL[name].shape
    rows = gqa_table(name)
    fig = go.Figure(
        go.Bar(
            x=[str(r["kv_heads"]) for r in rows],
            y=[r["bytes_per_token"] for r in rows],
            marker_color=["#d9480f" if r["the model's own"] else "#1f6feb" for r in rows],
            text=[f"{r['bytes_per_token'] / 1024:,.0f} KiB" for r in rows],
            textposition="outside",
            cliponaxis=False,
        )
    )
    fig.update_layout(
        xaxis=dict(title="key/value heads (orange: the model's own)", type="category"),
        yaxis=log_axis([r["bytes_per_token"] for r in rows], "KV cache, bytes per token (fp16)"),
        height=320,
        margin=dict(t=20, b=10),
    )
    show(fig, config={"displayModeBar": False})
    own = next(r for r in rows if r["the model's own"])
    st.caption(
        f"{name}: {s.layers} layers, {s.heads} query heads, {s.kv_heads} key/value heads, d_head = "
        f"{s.d_head}. Its cache is {own['bytes_per_token']:,} bytes per token, {own['saving']:g} times less "
        f"than with one key/value head per query head ({rows[-1]['bytes_per_token']:,})."
    )
    st.page_link("course/kv_growth.py", label="The KV cache lesson: what this costs in serving", icon=":material/arrow_back:")


lesson = lesson_page("efficiency")
model = course_model()
flash(model)
sliding_window(model)
ring(model)
grouped_query()
lesson_end(lesson)
