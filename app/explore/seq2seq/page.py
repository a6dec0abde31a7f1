"""The explorer's page for an encoder-decoder (T5): a source and a target (empty: the model's own
greedy output for the source), the tokens of both, and the views, each reading one trace."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.course import lessons_about
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain
from glassbox.app.explore.common import offered
from glassbox.app.explore.seq2seq import VIEWS
from glassbox.app.explore.seq2seq.attention import KINDS
from glassbox.app.explore.seq2seq.context import STACKS, Seq2SeqExplorer
from glassbox.app.resources import admitted_pass
from glassbox.app.state import read_url_settings, show_url_notes, write_url_settings
from glassbox.model.analysis.seq2seq import greedy_target
from glassbox.model.engine import GlassboxError, check_prompt
from glassbox.model.io.checkpoint import LoadedModel

# Per-source choices, kept in the URL: a block and head (of the stack the attention kind is in),
# the attention kind, the stack and position whose vector is shown, the tensor shown
SETTINGS = {"block": 0, "head": 0, "attn": "cross", "stack": "decoder", "pos": 0, "tensor": ""}


@st.cache_data(max_entries=64, show_spinner="Writing the model's own output for this source…")
def greedy_output(model_key: str, source: str, n_tokens: int, _loaded: LoadedModel) -> list[int]:
    with admitted_pass("the model's own output", _loaded, n_tokens):
        return greedy_target(_loaded, source, n_tokens)


def read_tokens(loaded: LoadedModel, text: str, what: str) -> list[int]:
    """``text``'s tokens, or a GlassboxError that says which box is wrong and why."""
    try:
        tokens = loaded.encode(text)
    except GlassboxError as exc:
        raise GlassboxError(f"{what}: {exc}") from exc
    check_prompt(loaded.cfg, tokens, what=what)
    return tokens


def inputs(model_key: str, loaded: LoadedModel) -> Seq2SeqExplorer:
    """The source and target boxes; the page stops with a message where either is wrong."""
    words = f"Words this model knows: {plain(loaded.tokenizer.known_words())}" if loaded.tokenizer.word_level else None
    with st.form("explore_prompt_form"):
        st.text_area(
            "Source",
            key="explore_prompt",
            persist_state="session",
            height=68,
            help=words or f"Any text, up to {loaded.cfg.n_ctx} tokens: what the encoder reads",
        )
        st.text_input(
            "Target",
            key="explore_target",
            persist_state="session",
            help="What the decoder should write, read with teacher forcing; empty: the model's own greedy output for this source",
        )
        st.form_submit_button("Run")
    try:
        source = read_tokens(loaded, st.session_state.explore_prompt, "The source")
        typed = st.session_state.explore_target
        greedy = not typed.strip()
        target = (
            greedy_output(model_key, st.session_state.explore_prompt, len(source), loaded)
            if greedy
            else read_tokens(loaded, typed, "The target")
        )
    except GlassboxError as exc:
        st.error(plain(exc))
        st.stop()
    return Seq2SeqExplorer.of(model_key, loaded, source, target, greedy)


def page(model_key: str, loaded: LoadedModel, page_settings: dict) -> None:
    cfg = loaded.cfg
    ctx = inputs(model_key, loaded)
    limits = {
        "block": (0, max(cfg.n_layers, cfg.n_decoder_layers) - 1),
        "head": (0, cfg.n_heads - 1),
        "pos": (0, max(len(ctx.source), len(ctx.tokens)) - 1),
    }
    read_url_settings(SETTINGS, limits, {"attn": list(KINDS), "stack": list(STACKS)}, prefix="explore_")
    show_url_notes("explore_")
    for key, (low, high) in limits.items():  # kept from another model or source: into this one's range
        st.session_state["explore_" + key] = min(max(int(st.session_state["explore_" + key]), low), high)
    st.caption(
        f"**{plain(loaded.name)}** · encoder-decoder: {cfg.n_layers} encoder and {cfg.n_decoder_layers} "
        f"decoder blocks × {cfg.n_heads} heads, d_model {cfg.d_model}, vocabulary {cfg.vocab_size:,}, context "
        f"{cfg.n_ctx} · source {len(ctx.source)} tokens, target {len(ctx.target_tokens)} · computed in "
        f"{str(loaded.model.embed.W_E.dtype).removeprefix('torch.')} on {loaded.model.device.type.upper()}"
    )
    st.markdown(
        f"**Source** (what the encoder reads): {plain('  '.join(ctx.source_labels))}  \n"
        f"**Target** (what the decoder writes): {plain('  '.join(ctx.target_labels))}"
    )
    if ctx.greedy:
        st.caption(
            f"The target box is empty, so the target is the model's own greedy output for this source: "
            f"{len(ctx.source)} tokens (as many as the source) of the engine's generation at temperature 0, "
            "each the most likely token after the ones before. Type a target to see the model read another."
        )
    views(ctx, {**page_settings, **SETTINGS})


@fragment
def views(ctx: Seq2SeqExplorer, settings: dict) -> None:
    """The chosen view: a click inside it reruns only this, not the generation and the boxes above."""
    chosen = st.segmented_control(
        "View", offered("explore_view", list(VIEWS)), key="explore_view", persist_state="session", required=True
    )
    write_url_settings(settings, prefix="explore_")
    try:
        VIEWS[chosen].render(ctx)
    except GlassboxError as exc:
        st.error(plain(exc))
    lessons_about(["cross-attention"])  # the cross-attention lesson: what every view here is about
    write_url_settings(settings, prefix="explore_")
