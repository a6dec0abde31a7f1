"""Attention: every head of every block at a glance, then one head in full: scores before and
after the mask, the pattern, one query·key dot product written out, the values and the head's
contribution after W_O, and where a chosen token looks, as lines."""

import hashlib
from functools import partial

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.attention_head import attention_head, fits, fits_computed, scale_note
from glassbox.app.components.charts import show
from glassbox.app.components.labels import plain
from glassbox.app.explore.attention_sent import can_fetch, fetched, how_notes, sent_block
from glassbox.app.explore.common import Explorer, array, choose_head, choose_layer, choose_position, derived, heatmap, lacks
from glassbox.model.analysis import attention_pair, per_head, scored, tile
from glassbox.model.engine import block_label, head_label
from glassbox.model.plot.heatmap import ClickLayer, heatmap_figure
from glassbox.model.serving import Needs

GRID_CELL = 40  # each head's pattern in the overview is at most this many cells square


def signed(v: float) -> str:
    return f"{v:.3g}" if v >= 0 else f"({v:.3g})"


def needs(layer: int) -> Needs:
    return Needs((f"blocks.{layer}.attn.*", "blocks.*.attn.hook_pattern", f"blocks.{layer}.ln1.hook_out"))


def needs_computed(cfg) -> Needs:
    """A long prompt's (the page computes the scores): every block's patterns and the q and k its
    scores multiply, one trace whichever block is chosen (a block's attn.* is 38 MB at 512 tokens)."""
    return Needs(("blocks.*.attn.hook_pattern", *(name for b in range(cfg.n_layers) for name in scored(cfg, b))))


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{st.session_state.explore_block}.attn"}


def select_head(chart_key: str, cell: int) -> None:
    """A click on the overview opens that head (before the rerun that draws it)."""
    points = st.session_state[chart_key].selection.points
    if points:
        st.session_state.explore_block = int(points[0]["y"]) // (cell + 1)
        st.session_state.explore_head = int(points[0]["x"]) // (cell + 1)


def overview(
    ctx: Explorer,
    trace,
    pattern: str = "blocks.{}.attn.hook_pattern",
    n_layers: int | None = None,
    title: str = "Every head's pattern",
    key: str = "attn:grid",
) -> None:
    """Every head of every block as one grid of patterns (``pattern``: a block's, by its index;
    ``n_layers`` blocks, by default the model's); a click opens that block and head."""
    cfg = ctx.cfg
    n_layers = cfg.n_layers if n_layers is None else n_layers
    n_queries, n_keys = trace[pattern.format(0)].shape[1:]
    cell = min(max(n_queries, n_keys), GRID_CELL)
    tiled = derived(
        trace,
        ("attention tiles", pattern, cell),
        lambda: tile([[array(trace[pattern.format(b)][h]) for h in range(cfg.n_heads)] for b in range(n_layers)], cell),
    )
    centres = [i * (cell + 1) + (cell - 1) / 2 for i in range(max(n_layers, cfg.n_heads))]
    bb, hh = np.meshgrid(range(n_layers), range(cfg.n_heads), indexing="ij")
    clicks = ClickLayer(  # one invisible square per head: what a click lands on
        [centres[h] for h in hh.ravel()],
        [centres[b] for b in bb.ravel()],
        "%{customdata[0]}, %{customdata[1]}: click to open<extra></extra>",
        np.array([[block_label(b), head_label(h)] for b, h in zip(bb.ravel(), hh.ravel())], dtype=object),
        size=max(12, min(60, 640 // max(cfg.n_heads, n_layers))),
        symbol="square",
    )
    panel = lambda i: range(i * (cell + 1), i * (cell + 1) + cell)  # noqa: E731 (a head's cells in the tiling)
    size = f"{n_layers} blocks × {cfg.n_heads} heads"
    if cell < max(n_queries, n_keys):
        size += f" (each {n_queries}×{n_keys} shown as {min(n_queries, cell)}×{min(n_keys, cell)} block means)"
    fig = heatmap_figure(
        tiled,
        {centres[b]: f"block {b + 1}" for b in range(n_layers)},
        {centres[h]: f"head {h + 1}" for h in range(cfg.n_heads)},
        title,
        pattern.format("*"),
        size=size,
        colour="sequential",
        colorbar="weight",
        gaps=False,
        fixed=True,
        clicks=clicks,
        image=cell < max(n_queries, n_keys),
        marks=[(panel(st.session_state.explore_block), panel(st.session_state.explore_head))],
        height=min(900, 110 + 110 * n_layers),
    )
    fig.update_layout(
        width=min(900, 160 + 110 * cfg.n_heads), xaxis=dict(constrain="domain"), yaxis=dict(scaleanchor="x", constrain="domain")
    )
    show(fig, key=key, on_select=partial(select_head, key, cell), selection_mode="points")


GAP = "⋮"  # positions left out between two written ones
SPAN = 40  # the most positions written in a row; past it, the query and the keys drawn alone


def line_rows(keys: list[int], query: int) -> list[int | None]:
    """The positions written beside the lines: every one from the first drawn to the last, or,
    where they span more than SPAN, the query and the keys alone with a gap (None) between two
    not adjacent (a long prompt's five strongest keys can be hundreds of positions apart)."""
    ends = sorted({*keys, query})
    if ends[-1] - ends[0] < SPAN:
        return list(range(ends[0], ends[-1] + 1))
    rows: list[int | None] = []
    for before, i in zip([None, *ends], ends):
        if before is not None and i - before > 1:
            rows.append(None)
        rows.append(i)
    return rows


def lines(ctx: Explorer, pattern: np.ndarray, query: int) -> go.Figure:
    """Where the query token looks: every token in two columns, the query on the left, a line to
    each key it may see, as thick and dark as its weight (under 1% left out on long prompts, but
    for the five strongest: a nearly even row has none over 1%)."""
    last = query + 1 if ctx.cfg.causal else len(pattern)  # an encoder's query sees the keys after it too
    weights = pattern[query, :last]
    strongest = set(np.argsort(-weights, kind="stable")[:5].tolist())
    keys = [j for j in range(last) if weights[j] >= 0.01 or last <= 40 or j in strongest]
    shown = line_rows(keys, query)
    row = {i: r for r, i in enumerate(shown) if i is not None}
    top = float(weights.max()) or 1.0
    fig = go.Figure()
    for j in keys:
        fig.add_trace(
            go.Scatter(
                x=[0, 1],
                y=[row[query], row[j]],
                mode="lines",
                showlegend=False,
                hoverinfo="text",
                line=dict(width=1 + 9 * weights[j] / top, color="#1f6feb"),
                opacity=min(1.0, float(0.1 + 0.9 * weights[j] / top)),  # 0.1 + 0.9 can be 1 + 2e-16
                text=f"{ctx.labels[query]} → {ctx.labels[j]}: {weights[j]:.4f}",
            )
        )
    left = [GAP if i is None else f"<b>{ctx.labels[i]}</b>" if i == query else ctx.labels[i] for i in shown]
    right = [
        GAP if j is None else f"{ctx.labels[j]}  <b>{pattern[query, j]:.3f}</b>" if j in keys else ctx.labels[j] for j in shown
    ]
    fig.add_trace(
        go.Scatter(
            x=[0] * len(shown),
            y=list(range(len(shown))),
            mode="text",
            textposition="middle left",
            showlegend=False,
            text=left,
            hoverinfo="skip",
            textfont=dict(color=["#000" if i == query else "#aaa" for i in shown]),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[1] * len(shown),
            y=list(range(len(shown))),
            mode="text",
            textposition="middle right",
            showlegend=False,
            text=right,
            hoverinfo="skip",
            textfont=dict(color=["#000" if j in keys else "#aaa" for j in shown]),
        )
    )
    fig.update_layout(
        title=dict(
            text=f"<b>Where “{ctx.labels[query]}” looks</b>: row {query} of the pattern, as lines "
            "(query on the left, keys and weights on the right)",
            font=dict(size=13),
            x=0,
        ),
        height=max(220, 70 + 20 * len(shown)),
        width=700,
        margin=dict(l=10, r=10, t=40, b=10),
        xaxis=dict(visible=False, range=[-0.9, 1.9]),
        yaxis=dict(visible=False, autorange="reversed"),
        plot_bgcolor="white",
    )
    return fig


HEAD_COLOURS = ["#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#e8590c", "#0c8599", "#c2255c", "#5c940d"]
LINE_LEVELS = (0.05, 0.2, 0.4, 0.6, 0.8)  # weights drawn as lines, binned by how strong they are
HEAD_VIEW_TOKENS = 32  # longer prompts: the lines of the chosen query only


SIDE_BY_SIDE = 4  # up to this many heads get a panel each; more are drawn over one another in colours


def head_view(ctx: Explorer, trace, layer: int, query: int) -> go.Figure:
    """Every head of one block as lines between the prompt's tokens: queries on the left, keys on
    the right, a line for each weight of at least 5%, darker and thicker as the weight grows
    (bertviz's head view): a panel per head for a few heads, else all heads over one another in
    their colours."""
    cfg, T = ctx.cfg, len(ctx.tokens)
    queries = range(T) if T <= HEAD_VIEW_TOKENS else [query]
    around = max(0, min(query - HEAD_VIEW_TOKENS // 2, T - HEAD_VIEW_TOKENS))  # an encoder's query sees both ways
    shown = (
        range(T)
        if T <= HEAD_VIEW_TOKENS
        else range(max(0, query - HEAD_VIEW_TOKENS + 1), query + 1)
        if cfg.causal
        else range(around, around + HEAD_VIEW_TOKENS)
    )
    panels = cfg.n_heads <= SIDE_BY_SIDE
    fig = go.Figure()
    for h in range(cfg.n_heads):
        pattern = array(trace[f"blocks.{layer}.attn.hook_pattern"][h])
        x0, colour = 2.2 * h if panels else 0.0, HEAD_COLOURS[h % len(HEAD_COLOURS)]
        first = True
        for low, high in zip(LINE_LEVELS, LINE_LEVELS[1:] + (1.01,)):
            xs, ys = [], []
            for q in queries:
                for k in shown:
                    if (k <= q or not cfg.causal) and low <= pattern[q, k] < high:
                        xs += [x0, x0 + 1, None]
                        ys += [q, k, None]
            if xs:
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=ys,
                        mode="lines",
                        hoverinfo="skip",
                        meta=h,
                        name=head_label(h),
                        legendgroup=str(h),
                        showlegend=not panels and first,
                        line=dict(color=colour, width=0.6 + 4 * low),
                        opacity=0.25 + 0.75 * low,
                    )
                )
                first = False
        if panels:
            fig.add_annotation(
                x=x0 + 0.5, y=min(shown) - 1.2, text=f"<b>{head_label(h)}</b>", showarrow=False, font=dict(size=11, color=colour)
            )
    if not any(t.mode == "lines" for t in fig.data):
        fig.add_annotation(
            x=0.5,
            y=(min(shown) + max(shown)) / 2,
            showarrow=False,
            font=dict(size=12, color="#666"),
            text="no weight reaches 5%:<br>attention here is spread thin",
        )
    labels = [ctx.labels[i] for i in shown]
    for x0 in [2.2 * h for h in range(cfg.n_heads)] if panels else [0.0]:
        for x, side in ((x0 - 0.04, "middle left"), (x0 + 1.04, "middle right")):  # clear of the lines' ends
            fig.add_trace(
                go.Scatter(
                    x=[x] * len(labels),
                    y=list(shown),
                    mode="text",
                    text=labels,
                    showlegend=False,
                    textposition=side,
                    textfont=dict(size=10),
                    hoverinfo="skip",
                )
            )
    what = "every query" if T <= HEAD_VIEW_TOKENS else f"query {ctx.labels[query]} (the prompt is over {HEAD_VIEW_TOKENS} tokens)"
    width = 2.2 * cfg.n_heads - 0.3 if panels else 1.9
    fig.update_layout(
        title=dict(
            text=f"<b>Every head of {block_label(layer)} as lines</b>: {what}, queries left, keys "
            "right, weights ≥ 5% (darker: stronger)",
            font=dict(size=13),
            x=0,
        ),
        height=120 + 16 * len(labels),
        margin=dict(l=10, r=10, t=50, b=10),
        plot_bgcolor="white",
        xaxis=dict(visible=False, range=[-0.9, width], fixedrange=True),
        yaxis=dict(visible=False, autorange="reversed", fixedrange=True),
        legend=dict(orientation="v", x=1.0, y=1.0),
        **({} if panels else {"width": 640}),
    )
    return fig


def pair_latex(cfg, pair, query: int, key: int) -> list[str]:
    """The score of (query, key) written out, a line each: the first five products, the sum (a line
    never runs off the page), the scale, the soft cap (attention_head.js writes the same lines)."""
    shown = min(len(pair.q), 5)
    terms = " + ".join(rf"{signed(qv)}\cdot{signed(kv)}" for qv, kv in zip(pair.q[:shown], pair.k[:shown]))
    more = rf"\dots\ ({len(pair.q) - shown}\text{{ more terms}})\ " if len(pair.q) > shown else ""
    lines = [
        rf"q_{{{query}}}\cdot k_{{{key}}} = {terms}",
        rf"{'+ ' + more if more else ''}= {pair.products.sum():.6g}",
        rf"q_{{{query}}}\cdot k_{{{key}}} \times {pair.scale:.4g} = {pair.products.sum():.6g} \times {pair.scale:.4g}"
        rf" = {pair.uncapped:.6g}",
    ]
    if cfg.attn_softcap is not None:
        lines.append(
            rf"\text{{score}} = {cfg.attn_softcap:g}\tanh\left(\frac{{{pair.uncapped:.6g}}}{{{cfg.attn_softcap:g}}}"
            rf"\right) = {pair.score:.6g}"
        )
    return lines


def mask_title(cfg, layer: int) -> str:
    """The masked scores' title: what this block's mask hides (attention_head.js titles it alike)."""
    if cfg.is_local(layer):
        causal = "the causal mask and " if cfg.causal else ""
        return f"After {causal}the {cfg.window}-position window (blank: −∞)"
    return "After the causal mask (blank: −∞)" if cfg.causal else "After the mask: none here, every key is seen"


def chosen_in_page(block: int, head: int, query: int, key: int) -> None:
    """The block, head and positions chosen in the page (before the rerun): the session's, for the
    URL and the charts the server draws."""
    st.session_state.explore_block, st.session_state.explore_head = block, head
    st.session_state.explore_pos, st.session_state.explore_key_pos = query, key


def render(ctx: Explorer) -> None:
    cfg = ctx.cfg
    if lacks(ctx):
        return
    dtype = ctx.model.embed.W_E.dtype
    size = (cfg.n_heads, len(ctx.tokens), cfg.d_head, dtype)
    computed = not fits(*size)  # a long prompt: q and k alone are sent, the page computes the scores
    on_server = computed and not fits_computed(cfg, len(ctx.tokens), dtype)
    lean = computed and not on_server and not st.session_state.get("explore_qkv")  # no chart of this block's q, k, v
    trace = ctx.trace(needs_computed(cfg) if lean else needs(st.session_state.explore_block))
    overview(ctx, trace)
    if on_server:
        return render_on_server(ctx, trace)
    every_block = not computed and fits(*size, n_blocks=cfg.n_layers) and set(trace.names()) >= set(needs_every_block(cfg))
    if not every_block and not can_fetch(trace, cfg):  # the Block list is the server's: the block's heads are sent when chosen
        c1, _ = st.columns([1, 3])
        with c1:
            choose_layer(ctx)
    layer, head, query = st.session_state.explore_block, st.session_state.explore_head, st.session_state.explore_pos
    show(head_view(ctx, trace, layer, query), width="stretch", config={"displayModeBar": False})
    payload = partial(sent_block, trace, cfg, ctx.labels, computed)
    fetch = None if every_block else fetched(trace, cfg, ctx.labels, computed)
    # named by what it shows (the same model and tokens give the same numbers, whichever trace computed
    # them): one element for every block where the page has or fetches them all
    shows = hashlib.sha1(
        repr((ctx.model_key, ctx.tokens, layer if fetch is None and not every_block else "every block")).encode()
    )
    attention_head(
        (lambda _: [payload(b) for b in range(cfg.n_layers)]) if every_block else (lambda b: [payload(b)]),
        shows.hexdigest()[:16],
        layer,
        head,
        query,
        st.session_state.explore_key_pos,
        chosen_in_page,
        fetch=fetch,
    )
    head_parts(ctx, trace, layer, head, query, lines_below=False)


def needs_every_block(cfg) -> list[str]:
    """What the page draws of every block: each one's scores, pattern, queries and keys."""
    return [
        name
        for b in range(cfg.n_layers)
        for name in (f"blocks.{b}.attn.hook_scores", f"blocks.{b}.attn.hook_pattern", *scored(cfg, b))
    ]


def render_on_server(ctx: Explorer, trace) -> None:
    """The chosen head drawn by the server: for prompts whose block is over what the page is sent."""
    cfg = ctx.cfg
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        layer = choose_layer(ctx)
    with c2:
        head = choose_head(ctx)
    with c3:
        query = choose_position(ctx, "Query position", "explore_pos")
    with c4:
        key = choose_position(ctx, "Key position", "explore_key_pos")
    p = f"blocks.{layer}.attn."
    L = ctx.labels
    show(head_view(ctx, trace, layer, query), width="stretch", config={"displayModeBar": False})
    st.subheader(f"{block_label(layer).capitalize()}, {head_label(head)}")
    a, b, c = st.columns(3)
    with a:
        heatmap(
            array(trace[p + "hook_scores"][head]),
            L,
            L,
            "Scores q·k × scale",
            f"{p}hook_scores[{head}]",
            row_title="query",
            col_title="key",
            zoom_key="attn:scores",
            marks=[(query, key)],
            width=300,
            trace=trace,
        )
    with b:
        heatmap(
            array(trace[p + "hook_scores_masked"][head]),
            L,
            L,
            mask_title(cfg, layer),
            f"{p}hook_scores_masked[{head}]",
            row_title="query",
            col_title="key",
            zoom_key="attn:masked",
            marks=[(query, key)],
            width=300,
            trace=trace,
        )
    with c:
        heatmap(
            array(trace[p + "hook_pattern"][head]),
            L,
            L,
            "Pattern: softmax of each row",
            f"{p}hook_pattern[{head}]",
            row_title="query",
            col_title="key",
            sequential=True,
            zoom_key="attn:pattern",
            marks=[(query, key)],
            width=300,
            trace=trace,
        )

    pair = attention_pair(trace, cfg, layer, head, query, key)
    q_name, k_name = (name.removeprefix(p) for name in scored(cfg, layer))
    how = how_notes(cfg, layer, head)
    st.markdown(
        f"**“{plain(L[query])}” asks, “{plain(L[key])}” answers.** The score is the dot product of "
        f"the query and key vectors times {pair.scale:.4g}" + scale_note(cfg) + "".join("; " + h for h in how) + "."
    )
    for line in pair_latex(cfg, pair, query, key):
        st.latex(line)
    pattern = array(trace[p + "hook_pattern"][head])
    st.caption(
        f"Recorded in {p}hook_scores: {pair.recorded:.6g} (recomputed above in float64). "
        + (
            f"Key {key} is after query {query}: the mask sets it to −∞ and its weight is exactly 0."
            if key > query and cfg.causal
            else f"Key {key} is outside query {query}'s window of {cfg.window} positions: the mask sets it to −∞ "
            "and its weight is exactly 0."
            if cfg.is_local(layer) and query - key >= cfg.window
            else f"After the mask and the softmax over row {query}: weight {pattern[query, key]:.6g}."
        )
    )
    products = np.stack([pair.q, pair.k, pair.products])
    heatmap(
        products,
        [f"q ({q_name})", f"k ({k_name})", "q·k per dimension"],
        None,
        "The dot product, dimension by dimension",
        f"{p}{q_name}[{head}, {query}] · {p}{k_name}[{cfg.kv_head(head)}, {key}]",
        row_title="",
        col_title="d_head",
        height=200,
    )

    head_parts(ctx, trace, layer, head, query)


def head_parts(ctx: Explorer, trace, layer: int, head: int, query: int, lines_below: bool = True) -> None:
    """The head's queries, keys, values and output after W_O, on request; then (``lines_below``)
    where the query looks."""
    cfg, L, p = ctx.cfg, ctx.labels, f"blocks.{layer}.attn."
    q_name, k_name = scored(cfg, layer)  # what the scores multiply: after QK-norm, clipping and RoPE
    kv = cfg.kv_head(head)
    pattern = array(trace[p + "hook_pattern"][head])
    if not st.toggle(
        "Show this head's queries, keys, values and output after W_O (five more charts)",
        key="explore_qkv",
        persist_state="session",
    ):
        if lines_below:
            show(lines(ctx, pattern, query), width="stretch")
        return
    a, b = st.columns(2)
    with a:
        heatmap(
            array(per_head(trace[q_name], cfg.n_heads)[head]),
            L,
            None,
            "Queries",
            f"{q_name}[{head}]",
            col_title="d_head",
            zoom_key="attn:q",
            width=450,
            trace=trace,
        )
        heatmap(
            array(trace[p + "hook_v"][cfg.kv_head(head)]),
            L,
            None,
            "Values",
            f"{p}hook_v[{cfg.kv_head(head)}]",
            col_title="d_head",
            zoom_key="attn:v",
            width=450,
            trace=trace,
        )
    with b:
        heatmap(
            array(per_head(trace[k_name], cfg.n_kv_heads)[kv]),
            L,
            None,
            "Keys",
            f"{k_name}[{kv}]",
            col_title="d_head",
            zoom_key="attn:k",
            width=450,
            trace=trace,
        )
        heatmap(
            array(trace[p + "hook_z"][head]),
            L,
            None,
            "Weighted values z = pattern · v",
            f"{p}hook_z[{head}]",
            col_title="d_head",
            zoom_key="attn:z",
            width=450,
            trace=trace,
        )
    heatmap(
        array(trace[p + "hook_result"][head]),
        L,
        None,
        f"{head_label(head).capitalize()}'s contribution after W_O (z · W_O[{head}])",
        f"{p}hook_result[{head}]",
        col_title="d_model",
        zoom_key="attn:result",
        trace=trace,
    )
    st.caption(
        f"Summed over the {cfg.n_heads} heads{' plus b_O' if cfg.attn_out_bias else ''}"
        + (f", then normed by blocks.{layer}.ln1_post" if cfg.post_norms else "")
        + f", these are blocks.{layer}.hook_attn_out, which is added to the residual stream"
        + (
            f" (blocks.{layer}.hook_attn_sum), and blocks.{layer}.ln1 norms the sum (post-norm)."
            if cfg.norm_position == "post"
            else "."
        )
    )
    if lines_below:
        show(lines(ctx, pattern, query), width="stretch")
