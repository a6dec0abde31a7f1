"""The welcome page's drawing of a GPT-style transformer: the residual stream as one line from the
tokens to the next-token distribution, each sub-layer a branch that reads it and adds back, and
the backward pass returning underneath. Each part is clickable and names the worked-example step,
the explorer view and the playground that show it."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

FORWARD, BACKWARD, BLOCK = "#1f6feb", "#d9480f", "#8b949e"


@dataclass(frozen=True)
class Part:
    key: str  # in the URL: ?part=<key>
    label: str  # on the drawing
    title: str
    sentence: str
    step: str  # the worked example's step (?step=<key>)
    view: str  # the explorer's view (?view=<name>)
    x: float  # centre on the drawing
    y: float
    playground: bool = False
    lessons: tuple[str, ...] = ()  # the course's lessons about it (model/course LESSONS' slugs)


PARTS = [
    Part(
        "tokens",
        "tokens",
        "Tokens",
        "The text is cut into tokens, each an id in the vocabulary: “the cat sat on the” is five of the worked "
        "example's eight words.",
        "tokens",
        "Tokens & embeddings",
        0.0,
        0.0,
        lessons=("tokens", "key-figures"),
    ),
    Part(
        "embedding",
        "embedding",
        "Embedding",
        "Each token id picks a row of W_E, a vector of d_model numbers; a row of the position table is added. "
        "That sum starts the residual stream.",
        "embedding",
        "Tokens & embeddings",
        1.55,
        0.0,
        lessons=("positions",),
    ),
    Part(
        "layernorm",
        "LayerNorm",
        "LayerNorm",
        "Before each sub-layer, every position's vector is centred and scaled to unit variance (RMSNorm in "
        "Llama-style models only scales).",
        "b1-layernorm1",
        "LayerNorm",
        3.9,
        1.25,
        lessons=("layernorm",),
    ),
    Part(
        "attention",
        "attention",
        "Attention",
        "Each head compares every position's query with the keys of the positions before it, turns the scores "
        "into weights with a softmax, and mixes their values: the only place positions exchange information.",
        "b1-scores",
        "Attention",
        5.3,
        1.25,
        lessons=("attention", "sqrt-dk", "multi-head", "mask", "kv-cache", "efficiency"),
    ),
    Part(
        "residual",
        "+",
        "Residual stream",
        "Each sub-layer adds its output to the stream instead of replacing it, so every block reads and edits "
        "one shared vector per position.",
        "b1-residual1",
        "Residual stream",
        6.5,
        0.0,
        lessons=("residual",),
    ),
    Part(
        "mlp",
        "MLP",
        "MLP (feed-forward)",
        "Each position on its own: expand to d_ff, an activation (ReLU, GELU, or a gate), contract back to "
        "d_model, add to the stream.",
        "b1-ffn-expand",
        "MLP",
        9.0,
        1.25,
        lessons=("mlp", "moe"),
    ),
    Part(
        "final_norm",
        "final norm",
        "Final LayerNorm",
        "The last block's stream is normalised once more before it is read out.",
        "final-layernorm",
        "LayerNorm",
        11.5,
        0.0,
    ),
    Part(
        "logits",
        "unembed",
        "Logits",
        "The normalised vector times W_U (here W_Eᵀ, tied) gives one score per vocabulary entry.",
        "logits",
        "Overview",
        12.9,
        0.0,
        playground=True,
    ),
    Part(
        "softmax",
        "softmax",
        "Next-token distribution",
        "The softmax turns the logits into probabilities; the playground samples from them with temperature, top-k and top-p.",
        "softmax",
        "Overview",
        14.3,
        0.0,
        playground=True,
        lessons=("objective",),
    ),
    Part(
        "loss",
        "loss",
        "Loss",
        "−log p(correct next token): 1.768 for “mat” in the worked example. Training makes it smaller.",
        "loss",
        "Backward",
        14.3,
        -1.3,
        lessons=("objective", "scaling"),
    ),
    Part(
        "backward",
        "gradients",
        "Backward pass",
        "The chain rule runs the pass in reverse: the gradient of the loss for every tensor and every weight.",
        "grad-logits",
        "Backward",
        7.5,
        -1.3,
    ),
    Part(
        "update",
        "update",
        "Weight update",
        "Each weight moves against its gradient (W − η·∂L/∂W); the loss of the same prompt then falls.",
        "update",
        "Backward",
        0.8,
        -1.3,
        lessons=("objective",),
    ),
]
PART = {p.key: p for p in PARTS}
BOX_WIDTH, BOX_HEIGHT = 1.2, 0.62


def label_size(label: str) -> int:
    """A box's font size: long words smaller, so that they stay inside a box on a laptop screen."""
    return 12 if len(label) <= 7 else 10 if len(label) <= 9 else 9


def _box(fig: go.Figure, part: Part, selected: bool) -> None:
    colour = BACKWARD if part.y < 0 else FORWARD
    w = 0.42 if part.key == "residual" else BOX_WIDTH
    fig.add_shape(
        type="circle" if part.key == "residual" else "rect",
        x0=part.x - w / 2,
        x1=part.x + w / 2,
        y0=part.y - (w if part.key == "residual" else BOX_HEIGHT) / 2,
        y1=part.y + (w if part.key == "residual" else BOX_HEIGHT) / 2,
        line=dict(color=colour, width=3 if selected else 1.5),
        fillcolor=colour if selected else "white",
        layer="below",
    )


def _arrow(fig: go.Figure, x0: float, y0: float, x1: float, y1: float, colour: str = FORWARD) -> None:
    fig.add_annotation(
        x=x1,
        y=y1,
        ax=x0,
        ay=y0,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        showarrow=True,
        arrowhead=3,
        arrowsize=1.2,
        arrowwidth=1.6,
        arrowcolor=colour,
        text="",
    )


def architecture_figure(n_layers: int, selected: str | None = None) -> go.Figure:
    """The drawing; ``selected`` (a part's key) is filled. Its one trace holds a point per part
    (customdata: the key), so a click selects the part."""
    fig = go.Figure()
    half = BOX_WIDTH / 2
    first, last = PART["tokens"], PART["softmax"]
    norm, attention, residual, mlp = PART["layernorm"], PART["attention"], PART["residual"], PART["mlp"]
    # the residual stream, tokens to distribution
    fig.add_shape(type="line", x0=first.x + half, x1=last.x - half, y0=0, y1=0, line=dict(color=FORWARD, width=4), layer="below")
    fig.add_shape(
        type="rect",
        x0=norm.x - half - 0.3,
        x1=mlp.x + 1.35,
        y0=-0.55,
        y1=1.85,
        line=dict(color=BLOCK, dash="dash", width=1.5),
        layer="below",
    )
    fig.add_annotation(
        x=(norm.x + mlp.x + 1.0) / 2,
        y=1.85,
        yshift=10,
        showarrow=False,
        font=dict(color="#57606a", size=13),
        text=f"a transformer block, repeated {n_layers}× (blocks.0 … blocks.{n_layers - 1})",
    )
    # each sub-layer reads the stream (through a norm) and adds its output back at a +
    second_norm, second_join = mlp.x - 1.4, mlp.x + 1.0
    for x_norm, x_layer, x_join in ((norm.x, attention.x, residual.x), (second_norm, mlp.x, second_join)):
        _arrow(fig, x_norm - 0.35, 0, x_norm - 0.35, 1.25 - BOX_HEIGHT / 2)
        _arrow(fig, x_norm + half, 1.25, x_layer - half, 1.25)
        fig.add_shape(
            type="line", x0=x_layer + half, x1=x_join, y0=1.25, y1=1.25, line=dict(color=FORWARD, width=1.6), layer="below"
        )
        _arrow(fig, x_join, 1.25, x_join, 0.21)
    # the second norm and + are the same kinds of part as the first: drawn, lit with them, not clickable twice
    lit = selected == "layernorm"
    fig.add_shape(
        type="rect",
        x0=second_norm - half,
        x1=second_norm + half,
        y0=1.25 - BOX_HEIGHT / 2,
        y1=1.25 + BOX_HEIGHT / 2,
        line=dict(color=FORWARD, width=3 if lit else 1.5),
        fillcolor=FORWARD if lit else "white",
        layer="below",
    )
    fig.add_annotation(
        x=second_norm,
        y=1.25,
        text="LayerNorm",
        showarrow=False,
        font=dict(color="white" if lit else "#24292f", size=label_size("LayerNorm")),
    )
    lit = selected == "residual"
    fig.add_shape(
        type="circle",
        x0=second_join - 0.21,
        x1=second_join + 0.21,
        y0=-0.21,
        y1=0.21,
        layer="below",
        line=dict(color=FORWARD, width=3 if lit else 1.5),
        fillcolor=FORWARD if lit else "white",
    )
    fig.add_annotation(x=second_join, y=0, text="+", showarrow=False, font=dict(size=13, color="white" if lit else "#24292f"))
    _arrow(fig, last.x + half, 0, last.x + 1.0, 0)
    fig.add_annotation(
        x=last.x + 1.05, y=0, xanchor="left", showarrow=False, text="p(next<br>token)", font=dict(size=13, color="#24292f")
    )
    # the backward pass, right to left underneath, ending in the update
    loss, backward, update = PART["loss"], PART["backward"], PART["update"]
    _arrow(fig, last.x, -BOX_HEIGHT / 2, loss.x, loss.y + BOX_HEIGHT / 2, BACKWARD)
    _arrow(fig, loss.x - half, loss.y, backward.x + half, backward.y, BACKWARD)
    _arrow(fig, backward.x - half, backward.y, update.x + half, update.y, BACKWARD)
    for part in PARTS:
        _box(fig, part, part.key == selected)
    fig.add_trace(
        go.Scatter(
            x=[p.x for p in PARTS],
            y=[p.y for p in PARTS],
            mode="markers+text",
            text=[p.label for p in PARTS],
            customdata=[p.key for p in PARTS],
            textposition="middle center",
            hoverinfo="text",
            hovertext=[f"{p.title}: click for the step, the view and the playground" for p in PARTS],
            textfont=dict(
                size=[label_size(p.label) for p in PARTS], color=["white" if p.key == selected else "#24292f" for p in PARTS]
            ),
            marker=dict(symbol="square", size=44, opacity=0.01, color="#ffffff"),
            showlegend=False,
        )
    )
    fig.update_xaxes(visible=False, range=[-0.7, 16.7], fixedrange=True)
    fig.update_yaxes(visible=False, range=[-1.8, 2.25], fixedrange=True, scaleanchor="x", scaleratio=1)
    fig.update_layout(height=280, margin=dict(l=0, r=0, t=0, b=0), plot_bgcolor="white", dragmode=False, clickmode="event+select")
    return fig
