"""Features: the prompt read through a sparse autoencoder. Each token's strongest features, how
well the SAE rebuilds the tensor it reads (and what the model loses when it runs on that
rebuild), and one feature's story: where it fires, which tokens it pushes up and down, and the
next-token distribution without it. Computed by model/analysis/features.py through the Model's
methods; the UI picks the SAE and the feature, and draws."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.sae_picker import ASK_SOURCE, OTHER_SAE, SOURCE_EXAMPLE, offered, sae_ready
from glassbox.app.explore.common import Explorer, bar_chart, heatmap, lacks, not_a_decoder
from glassbox.app.resources import model_pass, shared_sae
from glassbox.model.engine import GlassboxError

TOP = 5


def lit(ctx: Explorer) -> set[str]:
    # what the SAEs read and write: the residual stream, and the parts that write into it
    return {f"blocks.{i}.{part}" for i in range(ctx.cfg.n_layers) for part in ("attn", "mlp")}


@st.cache_resource(max_entries=16, show_spinner="Reading the prompt through the features…")
def read(model_key: str, source: str, tokens: tuple, _ctx: Explorer, _sae):
    with model_pass("features", _ctx.pass_cost("Reading the features", backward=False, batch=lambda n: 2)):
        return _ctx.loaded.features(list(tokens), _sae, TOP)


@st.cache_resource(max_entries=32, show_spinner="Following one feature…")
def one_feature(model_key: str, source: str, tokens: tuple, feature: int, _ctx: Explorer, _sae):
    with model_pass("one feature", _ctx.pass_cost("Ablating the feature", backward=False, batch=lambda n: 2)):
        ablation = _ctx.loaded.ablate_feature(list(tokens), _sae, feature)
        try:
            effect = _ctx.loaded.feature_logits(list(tokens), _sae, feature, k=10)
        except GlassboxError as exc:  # it writes no residual stream, or the head is not linear
            effect = str(exc)
    return ablation, effect


def choose_sae(ctx: Explorer) -> str | None:
    """The SAE's source: a curated one for this model, or one typed; None until there is one."""
    saes = offered(ctx.model_key)
    choice = st.selectbox(
        "Sparse autoencoder",
        [*saes, OTHER_SAE],
        key="explore_sae_choice",
        persist_state="session",
        help="Curated releases for this model, or any SAE in SAELens's format (cfg.json + "
        "sae_weights.safetensors) or Gemma Scope's (params.safetensors)",
    )
    if choice != OTHER_SAE:
        return saes[choice]
    with st.form("explore_sae_form"):
        typed = st.text_input(
            "Folder or hub source", key="explore_sae_source", persist_state="session", placeholder=SOURCE_EXAMPLE
        )
        st.form_submit_button("Open")
    if not typed.strip():
        st.info(plain(ASK_SOURCE))
        return None
    return typed.strip()


def render(ctx: Explorer) -> None:
    st.markdown(
        "A sparse autoencoder rewrites one tensor of the model as a sum of a few *features*, each a direction "
        "with an activation. Below: which features each token turns on, how much of the tensor they rebuild, "
        "and, for one feature, where it fires and what it does to the prediction."
    )
    if lacks(ctx):
        return
    if not_a_decoder(
        ctx, "Sparse autoencoders here read a decoder-only model's tensors"
    ):  # the losses and logit effects below are a decoder's
        return
    source = choose_sae(ctx)
    if source is None:
        return
    try:
        if not sae_ready(source, "explore_sae_fetch"):
            return
        sae = shared_sae(ctx.model_key, source, ctx.loaded)
        result = read(ctx.model_key, source, tuple(ctx.tokens), ctx, sae)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    summary(sae, result)
    grid(ctx, result)
    feature = st.selectbox(
        "Follow a feature",
        [int(f) for f in result.columns],
        key="explore_sae_feature",
        format_func=lambda f: f"feature #{f}",
        help="The features strongest somewhere in this prompt",
    )
    if feature is not None:
        follow(ctx, source, sae, feature)


def summary(sae, result) -> None:
    writes = f", rebuilds {sae.writes}" if sae.writes != sae.reads else ""
    st.caption(
        plain(
            f"{sae.name}: {sae.architecture}, {sae.d_sae:,} features, reads {sae.reads}{writes}"
            + (" (centred first, as it was trained)" if sae.center_input else "")
        )
    )
    left, right = st.columns(2)
    left.metric("Next-token loss", f"{result.loss:.4f}")
    right.metric(
        "With the SAE's rebuild in place",
        f"{result.spliced_loss:.4f}",
        delta=f"{result.spliced_loss - result.loss:+.4f}",
        delta_color="inverse",
        help="The mean next-token cross-entropy when the model runs on the reconstruction instead of the "
        "tensor: what reading the model through these features costs",
    )


def grid(ctx: Explorer, result) -> None:
    heatmap(
        result.column_values,
        ctx.labels,
        [f"#{f}" for f in result.columns],
        "Feature activations",
        "activation of each feature (columns: those among some token's five strongest, strongest first)",
        row_title="position",
        col_title="feature",
        sequential=True,
        zoom_key="explore_sae_grid",
    )
    st.plotly_chart(
        bar_chart(
            ctx.labels,
            result.relative_error,
            "What the features miss at each token",
            "‖x − x̂‖ / ‖x‖",
            x_title="position",
            height=260,
            text=[f"{v:.2f}" for v in result.relative_error],
        ),
        width="stretch",
    )
    low, high = int(result.active.min()), int(result.active.max())
    st.caption(
        "x is the tensor at each position, x̂ the SAE's rebuild from its active features: "
        + (f"{low} of them at every token." if low == high else f"from {low} to {high} of them at a token.")
    )


def follow(ctx: Explorer, source: str, sae, feature: int) -> None:
    try:
        ablation, effect = one_feature(ctx.model_key, source, tuple(ctx.tokens), feature, ctx, sae)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    st.plotly_chart(
        bar_chart(
            ctx.labels,
            ablation.activations,
            f"Feature #{feature}: its activation at each token",
            "activation",
            x_title="position",
            height=260,
            text=[f"{v:.3g}" for v in ablation.activations],
        ),
        width="stretch",
    )
    left, right = st.columns(2)
    with left:
        st.markdown(f"**What one unit of #{feature} does to the logits directly**")
        if isinstance(effect, str):
            st.info(plain(effect))
        else:
            st.dataframe(
                pd.DataFrame(
                    {
                        "raises": [ctx.piece(i) for i in effect.promoted_ids],
                        "by": effect.promoted,
                        "lowers": [ctx.piece(i) for i in effect.suppressed_ids],
                        "by ": effect.suppressed,
                    }
                ),
                hide_index=True,
                width="stretch",
                column_config={c: st.column_config.NumberColumn(format="%+.4f") for c in ("by", "by ")},
            )
            st.caption(
                "Its decoder row through the final norm (scale held at the last token) and the unembedding. "
                "Tokens training rarely or never saw keep rows alike, and can crowd such lists."
            )
    with right:
        st.markdown(f"**The next token without #{feature}** (KL {ablation.kl:.4g} nats)")
        order = ablation.plain.argsort()[::-1][:8]
        st.dataframe(
            pd.DataFrame(
                {"token": [ctx.piece(int(i)) for i in order], "p": ablation.plain[order], "p without": ablation.ablated[order]}
            ),
            hide_index=True,
            width="stretch",
            column_config={c: st.column_config.NumberColumn(format="%.4f") for c in ("p", "p without")},
        )
        st.caption(
            "Its share a·W_dec[f] taken out of the tensor at every position; the SAE's error stays, so "
            "nothing else moves. The plain run's eight likeliest tokens."
        )
