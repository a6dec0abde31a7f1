"""The lesson on zero and one layer: the bigram micro-model's table beside the counted one (KL, the top
continuations of a chosen token), both models' losses, and the one-layer model's skip-trigrams per
head, read from its QK and OV circuits. Computed by model/course/zero_one_layer.py."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import paired_bars, show
from glassbox.app.components.course import lesson_end, lesson_page
from glassbox.app.components.labels import number, plain, token_labels
from glassbox.app.resources import shared_model
from glassbox.model.course.zero_one_layer import BIGRAM, ONE_LAYER, continuations, curves, frequent, losses
from glassbox.model.micro import attention_only, bigram
from glassbox.model.plot.labels import token_text

CORPUS_COLOUR, MODEL_COLOUR = "#868e96", "#1f6feb"


@st.cache_data(max_entries=4, show_spinner="Counting the corpus's bigrams…")
def kl_figure(_zero) -> dict:
    return bigram.figures(_zero)


@st.cache_data(max_entries=4, show_spinner="Reading every head's circuits…")
def trigram_figure(_one) -> dict:
    return attention_only.figures(_one)


@st.cache_data(max_entries=4, show_spinner=False)
def both_losses(_zero, _one) -> dict:
    return losses(_zero, _one)


def zero_layers(zero) -> None:
    st.subheader("Zero layers: a bigram table")
    st.markdown(
        "Take every block away. A token's embedding row goes straight to the unembedding, so the logits at a "
        "position are that token's row of **W_E · W_U**, a (vocabulary × vocabulary) table. Nothing else in the "
        "prompt can reach them. Trained on text, the best such a model can learn is how often each token follows "
        "each other one: the bigram table. The micro-model below was trained here on the story corpus; the table "
        "counted from the same text is beside it."
    )
    figure = kl_figure(zero)
    cells = st.columns(3)
    cells[0].metric(
        "KL(counted ‖ model)",
        f"{figure['kl_nats']:.4f} nats",
        help="Each token's divergence between the counted next-token distribution and the model's, "
        "weighted by how often the token occurs. 0 would be the counted table exactly.",
    )
    cells[1].metric(
        "Floor: the counted table's entropy",
        f"{figure['conditional_entropy_nats']:.4f} nats",
        help="The loss of the counted table on its own text: no bigram model does better.",
    )
    cells[2].metric(
        "The model's loss on that text", f"{figure['model_loss_nats']:.4f} nats", help="The floor plus the KL divergence."
    )
    choices = frequent(zero)
    token = st.selectbox(
        "After the token",
        choices,
        format_func=lambda t: token_text(zero.pieces[t]),
        index=choices.index(zero.tokenizer.token_id(" the")),
        key="zero_token",
    )
    rows = continuations(zero, token)
    labels = token_labels([zero.pieces[i] for i, _, _ in rows], [i for i, _, _ in rows])
    fig = paired_bars(
        labels,
        [
            ("counted in the corpus", [c for _, c, _ in rows], CORPUS_COLOUR),
            ("the zero-layer model", [m for _, _, m in rows], MODEL_COLOUR),
        ],
        f"<b>What follows “{plain(token_text(zero.pieces[token]))}”</b>",
        "probability",
        "next token",
    )
    fig.update_layout(
        legend=dict(orientation="h", x=0, y=1.0, xanchor="left", yanchor="bottom"),
        margin=dict(t=80),
        height=fig.layout.height + 20,
    )
    show(fig, config={"displayModeBar": False})
    st.caption(
        f"Counted over {figure['corpus_tokens']:,} tokens of the story corpus; the model's probabilities are "
        "the softmax of the token's row of W_E · W_U. `glassbox train-micro bigram` retrains it."
    )


def loss_curves(zero, one, loss: dict) -> None:
    st.subheader("What one block of attention buys")
    runs = curves(zero, one)
    fig = go.Figure()
    for name, curve, colour in (
        ("zero layers", runs["zero_layer"], CORPUS_COLOUR),
        ("one attention-only block", runs["one_layer"], MODEL_COLOUR),
    ):
        fig.add_scatter(x=curve["step"], y=curve["loss"], name=name, mode="lines", line=dict(color=colour, width=1))
    fig.add_hline(
        y=loss["bigram_floor"],
        line=dict(dash="dot", color="#495057"),
        annotation_text=f"bigram floor {loss['bigram_floor']:.3f}",
        annotation_position="top right",
    )
    fig.update_layout(
        title="<b>Training loss per batch</b>",
        xaxis_title="step",
        yaxis_title="loss (nats)",
        yaxis_range=[0, 3],
        height=340,
        margin=dict(l=10, r=10, t=76, b=10),  # the title, then the legend, then the plot
        legend=dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom"),
    )
    chart, numbers = st.columns([3, 1], gap="large")
    show(fig, chart, config={"displayModeBar": False})
    numbers.metric("Validation loss, zero layers", f"{loss['zero_layer']:.4f}")
    numbers.metric(
        "Validation loss, one block",
        f"{loss['one_layer']:.4f}",
        delta=f"{loss['one_layer'] - loss['zero_layer']:.4f}",
        delta_color="inverse",
    )
    st.caption("Both start near ln(vocabulary) = 6.4 nats; the axis stops at 3 to show where they end.")
    st.markdown(
        "The zero-layer model stops at the floor: no table of pairs can do better. The one-layer model goes "
        "below it, because its heads read earlier tokens of the prompt."
    )


def one_layer(one) -> None:
    st.subheader("One layer: skip-trigrams")
    st.markdown(
        "Add one block of attention heads and no MLP. The logits are now the bigram path plus what each head "
        "writes. Leaving the norms and positions aside, a head's effect can be read from its weights in two parts. "
        "The **QK circuit** `(W_E W_Q)(W_E W_K)ᵀ` scores how much a token *a* attends back to an earlier token *b*. "
        "The **OV circuit** `W_E W_V W_O W_U` says which logits go up when the head attends to *b*. Read together "
        "they are skip-trigrams, “*a* … *b* → *c*”: at *a*, having seen *b* earlier, predict *c*."
    )
    figure = trigram_figure(one)
    head = st.radio("Head", range(one.cfg.n_heads), format_func=lambda h: f"head {h + 1}", horizontal=True, key="one_head")
    rows = figure["skip_trigrams"][head]
    table = pd.DataFrame(
        {
            "at (query a)": [plain(token_text(one.pieces[r["query"]])) for r in rows],
            "having seen (key b)": [plain(token_text(one.pieces[r["key"]])) for r in rows],
            "raises (c)": [plain(token_text(one.pieces[r["raised"]])) for r in rows],
            "OV: logit(c) per unit attention to b": [number(r["ov"], 3) for r in rows],
            "QK: largest score on b": [number(r["qk"], 3) for r in rows],
        }
    )
    st.table(table)
    st.caption(
        f"Among the corpus's {attention_only.FREQUENT} most frequent tokens: the largest OV entry for each of "
        f"{attention_only.PER_HEAD} keys, with the query token that attends to that key most. The Circuits "
        "view below shows every head's QK and OV grids on any prompt."
    )


lesson = lesson_page("zero-one-layer")
st.markdown(
    "The smallest transformers are the easiest to read completely. Both models on this page were trained here, "
    "in seconds, on the same story corpus as the default model (model/micro/), and every number is computed from "
    "their weights now."
)
zero, one = shared_model(BIGRAM), shared_model(ONE_LAYER)
zero_layers(zero)
loss_curves(zero, one, both_losses(zero, one))
one_layer(one)
lesson_end(
    lesson,
    (
        ("The one-layer micro-model in the Circuits view", ONE_LAYER, "the cat sat on the"),
        ("The bigram micro-model in the explorer", BIGRAM, "the cat sat on the"),
    ),
)
