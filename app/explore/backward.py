"""Backward: the gradient of a chosen loss with respect to every tensor and every weight, stepped
through from the loss to the embeddings, with the residual highway, dead neurons and input
saliency made visible."""

import hashlib

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch
from plotly.subplots import make_subplots

from glassbox.app.components.backward_player import backward_player
from glassbox.app.components.charts import show
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain, power_of_ten
from glassbox.app.components.latex import written
from glassbox.app.explore.backward_sent import cached_grid, fetch_address, step_payload, zoom_key
from glassbox.app.explore.common import (
    BAR_TEXT,
    MAX_COLS,
    MAX_ROWS,
    Explorer,
    choose_expert,
    choose_head,
    choose_layer,
    derived,
    expert_options,
    has_experts,
    has_heads,
    heatmap,
    lacks,
    lazy_tabs,
    offered,
    zoom_span,
)
from glassbox.model.analysis import (
    backward_steps,
    dead_neurons,
    gradient_norms,
    recomputed_weight_gradient,
    residual_points,
    saliency,
    weight_gradient_product,
)
from glassbox.model.analysis.experts import expert_label, unit
from glassbox.model.analysis.gradient_cells import GradientCells
from glassbox.model.engine import GRAD, Trace, block_label, head_label
from glassbox.model.engine.names import axes as names_axes
from glassbox.model.plot.grid import unit_index
from glassbox.model.plot.heatmap import COLOURSCALES, scale_colours
from glassbox.model.serving import Needs

LM_LOSS, ONE_TOKEN = "mean next-token loss", "one token at one position"
ENCODER_LOSS = "mean loss of each position's own token"  # how LM_LOSS reads for an encoder (BERT)
# The stream's gradients, which model/analysis/gradient_cells.py writes out for pre-norm blocks: in a
# post-norm block (BERT) they also pass through ln1 and ln2, which it does not write out
POST_NORM_UNWRITTEN = (
    "hook_resid_pre",
    "hook_resid_mid",
    "hook_resid_post",
    "hook_attn_out",
    "hook_mlp_out",
    "ln1.hook_out",
    "ln2.hook_out",
    "hook_embed",
    "hook_pos_embed",
    "hook_token_type_embed",
)


@st.cache_resource(max_entries=8, show_spinner=False)
def steps_of(model_key: str, _ctx: Explorer) -> list:
    """Per model: the backward steps depend only on its architecture."""
    return backward_steps(_ctx.model)


def lit(ctx: Explorer) -> set[str]:
    steps = {s.key: s.part for s in steps_of(ctx.model_key, ctx)}
    return {steps.get(st.session_state.get("explore_bstep"), "head")}


def target_controls(ctx: Explorer) -> None:
    T = len(ctx.tokens)
    pieces = ctx.loaded.tokenizer.pieces  # the target is typed as the tokenizer's text, not as drawn
    encoder = ctx.cfg.kind == "encoder"  # a position predicts its own token (masked LM), not the next one
    following = pieces[ctx.tokens[min(st.session_state.explore_target_pos + (0 if encoder else 1), T - 1)]]

    def switch() -> None:
        st.session_state.explore_target = following if st.session_state.explore_target_mode == ONE_TOKEN else ""

    st.session_state.explore_target_mode = ONE_TOKEN if st.session_state.explore_target else LM_LOSS
    a, b, c = st.columns([2, 2, 2])
    mode = a.radio(
        "Loss to differentiate",
        [LM_LOSS, ONE_TOKEN],
        key="explore_target_mode",
        persist_state="session",
        on_change=switch,
        format_func=lambda m: ENCODER_LOSS if encoder and m == LM_LOSS else m,
        help=(
            "The mean cross-entropy of each position's own token (an encoder sees them all; a [MASK] "
            "position's own token is [MASK]: choose the word it hides below)"
            if encoder
            else "The mean cross-entropy of every next token of the prompt"
        )
        + ", or −log p(token) at one position",
    )
    if mode == ONE_TOKEN:
        b.text_input(
            "Target token",
            key="explore_target",
            persist_state="session",
            help="One token of this vocabulary (e.g. ' mat' with its space)",
        )
        c.selectbox(
            "at position",
            range(T),
            key="explore_target_pos",
            persist_state="session",
            format_func=lambda i: f"{ctx.labels[i]} ({'the token there' if encoder else 'predicting the next'})",
        )


def block_of(step, n_layers: int) -> int:
    """The block a backward step runs through (its part, "blocks.3.mlp": 3); the head's steps
    count with the last block, the embeddings' with the first."""
    if step.part.startswith("blocks."):
        return int(step.part.split(".")[1])
    return 0 if step.part == "embed" else n_layers - 1


def needs(ctx: Explorer, step_names: tuple[str, ...], weights: tuple[str, ...], layer: int, weight: str) -> Needs:
    """The gradients this view draws, by name (used only when a full trace would not fit)."""
    names = [n.removeprefix(GRAD) for n in step_names] + [n for _, n in residual_points(ctx.cfg)] + ["hook_embed"]
    names += [f"blocks.{layer}.mlp.*", f"blocks.{layer}.mlp.W_in", f"blocks.{layer}.mlp.W_gate", weight, *weights]
    names += [f"blocks.{layer}.mlp.{unit}.W_{w}" for unit in ("experts", "shared") for w in ("in", "gate")]
    for w in (*weights, weight):
        names += list(weight_gradient_product(ctx.cfg, w) or ())
    # what a cell's written arithmetic reads: the step's blocks (and the next one's input), the head's end
    blocks = {int(n.split(".")[1]) for n in (x.removeprefix(GRAD) for x in step_names) if n.startswith("blocks.")}
    names += [f"blocks.{i}.*" for i in blocks] + [f"blocks.{i + 1}.hook_resid_pre" for i in blocks]
    names += ["ln_final.*", "hook_logits*", "hook_log_probs"]
    return Needs(tuple(dict.fromkeys(names)), backward=True)


COLUMN_LIST = 256  # more columns than this (a vocabulary): the column is typed as a number


def choose_cell(name: str, index: tuple[int, ...], row: int, col: int) -> None:
    """A gradient grid's cell clicked: its arithmetic below (on_select, before the rerun)."""
    st.session_state.explore_cell_tensor = name
    st.session_state.explore_cell_of = (name, index)
    st.session_state.explore_cell_row, st.session_state.explore_cell_col = row, col


@fragment
def cell_arithmetic(ctx: Explorer, trace, names: list[str], head: int, expert: int = 0) -> None:
    """One cell of one of the step's gradients, written out from the gradients one step closer to
    the loss and the forward pass's tensors (model/analysis/gradient_cells.py), as the worked
    example writes its cells. A fragment: choosing a cell reruns only this, not the view's charts."""
    names = [n for n in names if n in trace.grads]
    if not names:
        return
    st.markdown("**Arithmetic of one cell**: how autograd got it from what its consumers pass back")
    a, b, c = st.columns([2, 2, 2])
    if st.session_state.get("explore_cell_tensor") not in names:
        st.session_state.explore_cell_tensor = names[0]
    name = a.selectbox("Gradient", names, key="explore_cell_tensor", format_func=lambda n: "∂L/∂" + n.removeprefix(GRAD))
    axes = names_axes(name.removeprefix(GRAD))
    index = unit_index(ctx.cfg, name, head, expert)
    tensor = trace[name][index] if index else trace[name]  # (rows, columns): every step's gradient is 2-D per head
    row_axis, col_axis = axes[-2], axes[-1]

    def label(axis: str, i: int) -> str:
        if axis in ("position", "query", "key"):
            return ctx.labels[i]
        return f"{i}:{ctx.vocab_pieces[i]}" if axis == "vocab" else str(i)

    if st.session_state.get("explore_cell_of") != (name, index):  # a new tensor opens on its largest entry
        largest = divmod(int(tensor.abs().nan_to_num().argmax()), tensor.shape[1])
        st.session_state.explore_cell_row, st.session_state.explore_cell_col = largest
        st.session_state.explore_cell_of = (name, index)
    row = b.selectbox(row_axis or "row", range(tensor.shape[0]), key="explore_cell_row", format_func=lambda r: label(row_axis, r))
    if tensor.shape[1] <= COLUMN_LIST:
        col = c.selectbox(
            col_axis or "column", range(tensor.shape[1]), key="explore_cell_col", format_func=lambda k: label(col_axis, k)
        )
    else:
        col = c.number_input(f"{col_axis} (0–{tensor.shape[1] - 1})", 0, tensor.shape[1] - 1, key="explore_cell_col")
        c.caption(plain(label(col_axis, col)))
    index += (row, col)
    if ctx.cfg.norm_position == "post" and name.endswith(POST_NORM_UNWRITTEN):
        st.caption(
            "This gradient's arithmetic is written out for pre-norm blocks only: in this post-norm model it "
            "also passes through the norms on the stream (ln1, ln2)."
        )
        return
    try:
        arithmetic = GradientCells(ctx.model, trace).explain(name, index)
    except KeyError:  # a large model's partial trace lacks an operand
        st.caption("This cell's operands are not in this view's trace (a large model captures only what a view draws).")
        return
    if arithmetic is None:
        st.caption("This tensor's arithmetic is not written out.")
        return
    with st.container(border=True):
        for shown in written(arithmetic.lines):  # long lines broken at their = and + signs: the result stays on screen
            st.latex(shown)
        st.caption(
            f"Autograd's value: {float(trace[name][index]):.6g}; recomputed above in float64 from the numbers "
            f"written: {arithmetic.value:.6g}."
        )


def step_needs(ctx: Explorer, steps, step) -> Needs:
    """What the trace of ``step``'s block must hold. A large model's trace holds what the steps of
    one block need (the head's and the embeddings' steps count with the nearest block), so that
    stepping within a block reuses it."""
    group = [s for s in steps if block_of(s, ctx.cfg.n_layers) == block_of(step, ctx.cfg.n_layers)]
    return needs(
        ctx,
        tuple(n for s in group for n in s.names),
        tuple(w for s in group for w in s.weights),
        st.session_state.explore_block,
        st.session_state.explore_weight,
    )


def current_step(steps) -> int:
    keys = [s.key for s in steps]
    if st.session_state.get("explore_bstep") not in keys:
        st.session_state.explore_bstep = keys[0]
    return keys.index(st.session_state.explore_bstep)


def step_trace(ctx: Explorer, steps) -> Trace:
    """The trace of the current backward step's block (``step_needs``)."""
    return ctx.trace(step_needs(ctx, steps, steps[current_step(steps)]))


@fragment
def stepping(ctx: Explorer, steps) -> None:
    """A fragment: the server's part of a step (its head, zoom, checks and a cell's arithmetic)
    reruns alone, not the view's other charts; the step itself is changed in the page."""
    needed = step_needs(ctx, steps, steps[current_step(steps)])
    # a whole trace, or (a large model) the trace of this step's block alone
    step_through(ctx, ctx.trace(needed), steps, whole=ctx.plan(needed)[0] is None)


def zooms_of(steps) -> tuple:
    """The view's zoom sliders' values (the page's maps are their windows), as set."""
    keys = {zoom_key(n) + side for s in steps for n in (*s.names, *(GRAD + w for w in s.weights)) for side in (":rows", ":cols")}
    return tuple(sorted((k, tuple(st.session_state[k])) for k in keys if k in st.session_state))


def step_through(ctx: Explorer, trace, steps, whole: bool) -> None:
    """The steps in the page (app/components/backward_player.py), then the server's part of the
    current one: the head (or expert) its per-head tensors show, zoom sliders for maps too large to
    draw exactly, each weight gradient's check, and one cell's arithmetic. ``whole``: ``trace`` holds
    every step's tensors (else those of the current step's block)."""
    index = current_step(steps)
    step = steps[index]
    cfg = ctx.cfg
    if cfg.n_heads and st.session_state.get("explore_head") not in range(cfg.n_heads):  # kept from another model
        st.session_state.explore_head = 0
    head = st.session_state.get("explore_head", 0)
    experts = any(has_experts(n) for n in step.names + step.weights)
    if experts:  # the expert list below keeps its choice there (a model's own)
        offered("explore_expert", expert_options(ctx, shared=False))
    expert = st.session_state.explore_expert if experts else 0
    zooms = zooms_of(steps)
    n_layers = cfg.n_layers

    def answerable(i: int) -> bool:
        """Whether the page may fetch step ``i`` from this trace: any, or (one block's trace) that block's."""
        return whole or block_of(steps[i], n_layers) == block_of(step, n_layers)

    def on_step(i: int) -> None:
        st.session_state.explore_bstep = steps[i].key

    def on_cell(shown: int, name: str, row: int, col: int) -> None:
        if name in steps[shown].names and name in trace.grads:
            index = unit_index(cfg, name, head, expert)
            rows, cols = (trace[name][index] if index else trace[name]).shape[-2:]
            if row < rows and col < cols:
                choose_cell(name, index, row, col)

    backward_player(
        [s.key for s in steps],
        [f"{i + 1}/{len(steps)} · {s.title}" for i, s in enumerate(steps)],
        lambda i: step_payload(ctx, trace, steps, i, head, expert, zooms),
        # a new element where the trace is another block's (a large model): the step it was sent was the old trace's
        hashlib.sha1(
            repr((ctx.model_key, ctx.tokens, ctx.target, head, expert, zooms, whole or block_of(step, n_layers))).encode()
        ).hexdigest()[:16],
        index,
        on_step,
        on_cell,
        fetch_address(ctx, trace, steps, head, expert, zooms, answerable),
        scale_colours(COLOURSCALES["diverging"]).tolist(),
    )
    # a head to show only where this step has per-head tensors; an expert where it has every expert's
    heads = any(has_heads(n) for n in step.names + step.weights)
    if heads or experts:
        left, right = st.columns(2)
        if heads:
            with left:
                choose_head(ctx)
        if experts:
            with right:
                choose_expert(ctx, shared=False)
    for name in (*(n for n in step.names if n in trace.grads), *(GRAD + w for w in step.weights)):
        values, _, _, row_title, col_title, _ = cached_grid(ctx, trace, name, head, expert)
        label = "∂L/∂" + name.removeprefix(GRAD).split(".")[-1]
        zoom_span(values.shape[0], MAX_ROWS, f"{label}, {row_title} rows", zoom_key(name) + ":rows")
        zoom_span(values.shape[1], MAX_COLS, f"{label}, {col_title or 'column'} columns", zoom_key(name) + ":cols")
    for weight in step.weights:
        gap = derived(trace, ("weight gradient check", weight), lambda w=weight: rebuilt_gap(trace, cfg, w))
        if gap is not None:
            x, dy = weight_gradient_product(cfg, weight)
            st.caption(
                f"Check of ∂L/∂{weight}: Σ over positions of {x}ᵀ · ∂L/∂{dy} rebuilds this gradient from the trace; "
                f"largest difference from autograd's: {gap:.2g}."
            )
    cell_arithmetic(ctx, trace, list(step.names), head, expert)


def rebuilt_gap(trace, cfg, weight: str) -> float | None:
    """The largest difference between a weight's gradient rebuilt from the trace (Σ inputᵀ ·
    ∂L/∂output) and autograd's; None where it is not rebuilt (a norm's scale, an embedding)."""
    rebuilt = recomputed_weight_gradient(trace, cfg, weight)
    return None if rebuilt is None else float((rebuilt - trace[GRAD + weight].to(torch.float64)).abs().max())


def dead_neurons_view(ctx: Explorer, trace) -> None:
    """A block's neurons (in a mixture of experts, one expert's) that are off at every position,
    and the gradient they pass."""
    cfg = ctx.cfg
    layer = choose_layer(ctx, "Block (dead neurons)")
    expert = choose_expert(ctx, label="Expert (dead neurons)", key="explore_dead_expert") if cfg.is_moe(layer) else None
    chosen = unit(cfg, layer, expert)
    dead = dead_neurons(trace, cfg, layer, expert)
    whose = block_label(layer).capitalize() + (f", {expert_label(expert)}" if expert is not None else "")
    where = "every position of this prompt"
    if chosen.routed:
        if not dead.positions:
            st.markdown(
                f"{whose} ran on no position of this prompt (the router chose other experts everywhere): "
                f"its weight is 0 at every position, so none of its {chosen.width} neurons receives any gradient."
            )
            return
        where = f"each of the {dead.positions} positions routed to it"
    if cfg.activation == "relu" and not cfg.gated_mlp:
        st.markdown(
            f"{whose}: **{len(dead.neurons)}** of {chosen.width} neurons are off at {where}; ReLU passes them no "
            f"gradient, so their W_in columns get exactly zero (largest |∂L/∂W_in| over them: "
            f"{dead.weight_grad_max:g}). Over those positions {dead.off_fraction:.1%} of (position, neuron) pairs "
            f"are off and {dead.zero_grad_fraction:.1%} of ∂L/∂pre entries are exactly 0."
        )
    else:
        st.markdown(
            f"{whose} uses {cfg.activation}, which is never exactly flat: {len(dead.neurons)} neurons have "
            f"pre-activation ≤ 0 at {where}, yet still pass some gradient (largest |∂L/∂W_in| over them: "
            f"{dead.weight_grad_max:.3g}); {dead.zero_grad_fraction:.1%} of ∂L/∂pre entries there are exactly 0."
        )
    if chosen.routed:
        st.caption(
            "An expert receives gradient only where it was chosen: elsewhere its weight is 0, so every one of "
            "its entries there is exactly 0 and is not counted above."
        )
    # (an encoder has neither case: every position has a target, and attention carries the loss both ways)
    if cfg.causal and ctx.target is None:
        st.caption(
            "A position with nothing to predict (the last one, under the mean next-token loss) receives no "
            "gradient at all, so its entries count among the exact zeros."
        )
    elif cfg.causal and ctx.target.position % len(ctx.tokens) < len(ctx.tokens) - 1:  # -1: the last position
        st.caption(
            f"The loss reads only position {ctx.target.position % len(ctx.tokens)}; attention looks back, never ahead, so every "
            "later position receives no gradient at all, and its entries count among the exact zeros."
        )
    if len(dead.neurons):
        st.caption("Dead here: " + ", ".join(map(str, dead.neurons[:60])) + (" …" if len(dead.neurons) > 60 else ""))


def highway(labels: list[str], norms: np.ndarray) -> go.Figure:
    """The gradient's norm over all positions at each point of the residual stream."""
    # short ticks, level (slanted long labels ran into each other); each point's full name on hover
    ticks = [label.split(" (")[0].replace("after block ", "block ") for label in labels]
    fig = go.Figure(
        go.Scatter(
            x=ticks,
            y=np.linalg.norm(norms, axis=1),
            mode="lines+markers",
            text=labels,
            hovertemplate="%{text}: %{y:.6g}<extra></extra>",
        )
    )
    fig.update_layout(
        title=dict(text="<b>The residual highway</b>: gradient norm, all positions", font=dict(size=13), x=0),
        height=320,
        margin=dict(l=10, r=10, t=40, b=10),
        yaxis=dict(title="‖∂L/∂x‖", rangemode="tozero"),
        xaxis=dict(title="the stream after the embeddings, then after each block", type="category", tickangle=0, nticks=12),
    )
    return fig


def render(ctx: Explorer) -> None:
    target_controls(ctx)
    if not ctx.can_backward():
        st.info("A one-token prompt has no next token to predict: choose a target token for the backward pass.")
        return
    steps = steps_of(ctx.model_key, ctx)
    params = [n for n, _ in ctx.model.named_parameters()]
    if st.session_state.get("explore_weight") not in params:
        st.session_state.explore_weight = next(n for n in params if n.endswith(("W_in", "W_E")))
    trace = step_trace(ctx, steps)
    what = trace.loss_description
    if ctx.target is not None:  # named by its token, not its id
        position = ctx.target.position % len(ctx.tokens)
        what = (
            f"−log p(“{plain(ctx.piece(ctx.target.token_id))}”) predicted at position {position} ({plain(ctx.labels[position])})"
        )
    st.markdown(
        f"**L = {trace.loss:.6g}**, the {what}. Every gradient below comes from one "
        "torch.autograd.grad call on this trace; the shared model is left untouched."
    )

    lazy_tabs(
        {
            "Step through the backward pass": lambda: stepping(ctx, steps),
            "The residual highway": lambda: residual_highway(ctx, trace),
            "Input saliency": lambda: input_saliency(ctx, trace),
            "Dead neurons": lambda: lacks(ctx, mlp=True) or dead_neurons_view(ctx, trace),
            "Any weight's gradient": lambda: any_weight(ctx, trace, params),
        },
        "explore_backward_part",
    )


def residual_highway(ctx: Explorer, trace) -> None:
    cfg = ctx.cfg
    labels, norms = derived(trace, ("gradient norms",), lambda: gradient_norms(trace, cfg))
    # the tensors drawn, as the engine names them (with no blocks, the embeddings alone)
    stream = "grad:blocks.i.hook_resid_post" if cfg.n_layers else GRAD + residual_points(cfg)[0][1]
    a, b = st.columns([3, 2]) if cfg.n_layers else (st.container(), None)  # no blocks: one point, no highway
    with a:
        heatmap(
            norms,
            labels,
            ctx.labels,
            "‖∂L/∂residual stream‖ per position",
            stream,
            row_title="residual stream",
            col_title="token",
            sequential=True,
            zoom_key="bw:norms",
            width=300 if b else 900,
            trace=trace,
        )
    if b:
        show(highway(labels, norms), b, width="stretch")
    st.caption(
        "The norms sit on the stream itself (post-norm): on its way down the gradient passes through every "
        "block's ln2 and ln1, each scaling it by about γ/σ, so there is no untouched highway and it can grow or "
        "fade with depth."
        if cfg.n_layers and cfg.norm_position == "post"
        else "The skip connections pass the gradient down unchanged and each block adds its own share on top, so it "
        "does not fade with depth. Where it jumps, a norm whose input has a small spread σ scaled it by about 1/σ."
        if cfg.n_layers
        else "With no blocks the stream has one point: the gradient the head hands the embeddings."
    )


def input_saliency(ctx: Explorer, trace) -> None:
    signed, size = derived(trace, ("saliency",), lambda: saliency(trace))
    # one power of ten for every bar, said on the axis, so the labels read alike (2.8, not 2.83e-06)
    power = power_of_ten(float(np.abs(signed).max()))
    unit = f" (×10<sup>{power}</sup>)" if power else ""
    # two panels, one above the other, one quantity each: on one plot, the norm's dots covered the bars' labels
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.62, 0.38])
    fig.add_trace(
        go.Bar(
            x=ctx.labels,
            y=signed / 10.0**power,
            name="gradient × input" + unit,
            text=[f"{v / 10.0**power:.3g}" for v in signed] if len(ctx.labels) <= BAR_TEXT else None,
            textposition="outside",
            cliponaxis=False,
            marker_color="#1f6feb",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(go.Bar(x=ctx.labels, y=size, name="‖∂L/∂embedding‖", marker_color="#d9480f"), row=2, col=1)
    fig.update_layout(
        title=dict(
            text="<b>Input saliency</b>: gradient × input, ∂L/∂embedding · embedding per token "
            "(above), and the gradient's length ‖∂L/∂embedding‖ (below)",
            font=dict(size=13),
            x=0,
        ),
        height=420,
        margin=dict(l=10, r=10, t=40, b=10),
        showlegend=False,
        yaxis=dict(title="gradient × input" + unit),
        yaxis2=dict(title="‖∂L/∂embedding‖", rangemode="tozero"),
        xaxis2=dict(title="token", type="category"),
        xaxis=dict(type="category"),
    )
    show(fig, width="stretch")


def any_weight(ctx: Explorer, trace, params: list[str]) -> None:
    cfg = ctx.cfg
    left, right = st.columns([3, 1])
    weight = left.selectbox("Weight", params, key="explore_weight", persist_state="session")
    head = 0
    if has_heads(weight):
        head = right.selectbox("Head of this weight", range(cfg.n_heads), key="explore_weight_head", format_func=head_label)
    values, rows, cols, row_title, col_title, note = cached_grid(ctx, trace, GRAD + weight, head)
    heatmap(
        values,
        rows,
        cols,
        "∂L/∂" + weight + note,
        GRAD + weight + note,
        row_title=row_title,
        col_title=col_title,
        zoom_key="bw:weight",
        trace=trace,
    )
