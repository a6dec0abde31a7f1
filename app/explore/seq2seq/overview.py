"""Overview: what each decoder position reads and predicts, the model's top tokens there, and
the loss per position (−log p of the target token), whose mean is the pass's loss."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.labels import plain
from glassbox.app.explore.common import bar_chart, derived
from glassbox.app.explore.seq2seq.context import Seq2SeqExplorer
from glassbox.model.analysis.seq2seq import predictions

TOP = 5


def render(ctx: Seq2SeqExplorer) -> None:
    trace = ctx.trace()
    seen = derived(trace, ("predictions", TOP), lambda: predictions(trace, ctx.target_tokens, TOP))
    st.markdown(
        f"**L = {trace.loss:.6g}**, the {plain(trace.loss_description)}: the mean of the "
        f"{len(ctx.target_tokens)} losses per position below, {seen.mean_loss:.6g}."
    )
    show(
        bar_chart(
            ctx.target_labels,
            seen.loss,
            "Loss per position: −log p(target token), from hook_log_probs",
            "−log p",
            x_title="target position: the token it should predict",
            text=[f"{v:.3g}" for v in seen.loss],
        ),
        width="stretch",
    )
    table = pd.DataFrame(
        {
            "reads": ctx.labels,
            "should predict": ctx.target_labels,
            "p(target)": [f"{p:.4f}" for p in seen.p_target],
            "−log p": [f"{v:.4f}" for v in seen.loss],
            **{
                f"top {k + 1}": [
                    f"{ctx.piece(int(seen.top_ids[i, k]))} {seen.top_probs[i, k]:.3f}" for i in range(len(ctx.tokens))
                ]
                for k in range(seen.top_ids.shape[1])
            },
        }
    )
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption(
        "Teacher forcing: decoder position i reads the start token and the target's tokens before i, and "
        "the source through cross-attention; its distribution (hook_probs) is over the token at target "
        "position i. Equal probabilities are listed in id order."
    )
