"""Exactness, checked on the spot (the Overview's last panel): this model beside transformers' own
class loaded from the same folder or hub snapshot, on this prompt, through ``Model.verify``
(model/io/verify.py). The check loads a second copy of the model, so it runs on request, admitted
against the server's budget for the copy's weights and both passes, and is kept per (model,
prompt, gradients)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer
from glassbox.app.resources import model_pass
from glassbox.model.engine import GlassboxError
from glassbox.model.serving import working_bytes

RAN = "explore_exactness_ran"  # the (model, prompt, gradients) last checked: its result stays on the page


@st.cache_resource(max_entries=8, show_spinner="Loading transformers' own class from the same folder and comparing…")
def verification(model_key: str, tokens: tuple, gradients: bool, _cost: int, _ctx: Explorer):
    with model_pass("exactness check", _cost):
        return _ctx.loaded.verify(list(tokens), gradients)


def check_cost(ctx: Explorer, gradients: bool) -> int:
    """A second copy of the weights, and the two models' passes held at once (with ``gradients``,
    forward and backward); a GlassboxError where that is over the server's whole budget."""
    return ctx.check_cost(
        "The exactness check (a second copy of the model, and both passes)",
        lambda n: ctx.loaded.weight_bytes + 2 * working_bytes(ctx.model, n, gradients),
    )


def table(result) -> pd.DataFrame:
    rows = [
        ("logits", result.logits, result.logits_scale),
        ("residual stream entering each block", result.residual, result.residual_scale),
    ]
    if result.loss is not None:
        rows += [
            ("loss (mean next-token cross-entropy)", result.loss, None),
            ("∂loss/∂(residual stream entering each block)", result.gradient, result.gradient_scale),
        ]
    return pd.DataFrame(
        {
            "compared": [r[0] for r in rows],
            "largest |Glassbox − transformers|": [f"{r[1]:.3g}" for r in rows],
            "largest |value| (its scale)": ["" if r[2] is None else f"{r[2]:.4g}" for r in rows],
        }
    )


def exactness_panel(ctx: Explorer) -> None:
    st.subheader("Exactness: beside transformers")
    st.markdown(
        "Run this prompt through transformers' own class for this model, loaded from the same folder (or hub "
        "snapshot), and compare: the logits and the residual stream entering every block, and with gradients "
        "the loss and its gradient with respect to each of those streams. The check loads a second copy of "
        "the model."
    )
    with st.form("explore_exactness"):
        gradients = st.toggle(
            "With gradients",
            key="explore_exactness_gradients",
            persist_state="session",
            help="A backward pass in both (needs a prompt of two tokens at least)",
        )
        pressed = st.form_submit_button("Compare with transformers")
    key = (ctx.model_key, tuple(ctx.tokens), gradients)
    if pressed:
        st.session_state[RAN] = key
    if st.session_state.get(RAN) != key:
        return
    cost = check_cost(ctx, gradients)
    try:
        result = verification(*key, cost, ctx)
    except GlassboxError as exc:  # a Glassbox checkpoint, no transformers, no causal-LM class: nothing to compare with
        st.info(plain(exc))
        return
    st.dataframe(table(result), hide_index=True, width="stretch")
    st.caption(
        f"Reference: {plain(result.reference)}, in {result.dtype}, on this prompt's {result.n_tokens} tokens. "
        "Each number is the largest absolute difference over every position (and block), with the largest "
        "value compared beside it for scale."
    )
