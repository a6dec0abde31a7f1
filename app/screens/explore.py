"""Explore a prompt: any prompt on any loaded model, every tensor of the forward pass and every
gradient of the backward pass, one view at a time (app/explore/, one file per view)."""

import streamlit as st

from app.components.errors import fragment
from app.components.labels import plain
from app.explore import VIEWS
from app.explore.common import Explorer, pipeline
from app.resources import shared_model
from app.state import read_url_settings, url_settings, write_url_settings
from model.io.checkpoint import NAMED_MODELS, LoadedModel, model_key
from model.io.guard import allowed_roots
from model.engine import GlassboxError, Target, check_context

LOCAL = "a local directory…"

PAGE_SETTINGS = {"model": "default", "prompt": "the cat sat on the", "view": "Overview", "target": "", "target_pos": -1}
url_settings(PAGE_SETTINGS, choices={"view": list(VIEWS)}, prefix="explore_")
st.title("Explore a prompt")
st.caption("Every number below is the model's own: one trace of this prompt, forward and backward, cached "
           "per (model, prompt, target).")

# The model: a bundled one by name, or a directory (Glassbox's format or a GPT-2 checkpoint).
roots = allowed_roots()  # GLASSBOX_MODEL_DIRS: where this server lets visitors pick model directories
if "explore_model_choice" not in st.session_state:
    named = st.session_state.explore_model in NAMED_MODELS
    st.session_state.explore_model_choice = st.session_state.explore_model if named else LOCAL
    st.session_state.explore_model_dir = "" if named else st.session_state.explore_model
    if not named and roots == []:  # this server offers no directories: say so, and show the default
        try:
            model_key(st.session_state.explore_model)
        except GlassboxError as exc:
            st.error(plain(exc))
        st.session_state.explore_model_choice = NAMED_MODELS[0]
left, right = st.columns([1, 3])
choice = left.selectbox("Model", list(NAMED_MODELS) + ([LOCAL] if roots != [] else []), key="explore_model_choice",
                        persist_state="session")
if choice == LOCAL:
    where = f" Under {', '.join(map(str, roots))} on this server." if roots else ""
    right.text_input("Model directory", key="explore_model_dir", persist_state="session", placeholder="/path/to/gpt2 (config.json + model.safetensors)",
                     help="A Glassbox checkpoint or a Hugging Face GPT-2 directory, read offline." + where)
    st.session_state.explore_model = st.session_state.explore_model_dir.strip()
    if not st.session_state.explore_model:
        st.info("Give the path of a model directory.")
        st.stop()
else:
    st.session_state.explore_model = choice
st.query_params["model"] = st.session_state.explore_model
try:
    loaded = shared_model(st.session_state.explore_model)
except GlassboxError as exc:
    st.error(plain(exc))
    st.stop()
cfg = loaded.cfg

with st.form("explore_prompt_form"):
    st.text_area("Prompt", key="explore_prompt", persist_state="session", height=68,
                 help=f"Words this model knows: {', '.join(loaded.tokenizer.pieces)}" if loaded.tokenizer.word_level
                 else f"Any text, up to {cfg.n_ctx} tokens (byte-level BPE)")
    st.form_submit_button("Run")
try:
    tokens = loaded.encode(st.session_state.explore_prompt)
    check_context(cfg, len(tokens))
except GlassboxError as exc:
    st.error(plain(exc))
    st.stop()
if not 0 <= st.session_state.explore_target_pos < len(tokens):  # -1 (the default): the last position
    st.session_state.explore_target_pos = len(tokens) - 1

# Per-prompt choices, kept in the URL, clamped to this model and prompt.
PROMPT_SETTINGS = {"layer": 0, "head": 0, "pos": len(tokens) - 1, "key_pos": 0, "norm": "", "bstep": "", "weight": "",
                   "tensor": ""}  # the views check the names against this model
read_url_settings(PROMPT_SETTINGS, prefix="explore_")
for key, high in (("layer", cfg.n_layers - 1), ("head", cfg.n_heads - 1), ("pos", len(tokens) - 1),
                  ("key_pos", len(tokens) - 1)):
    st.session_state["explore_" + key] = min(max(int(st.session_state["explore_" + key]), 0), high)

st.caption(f"**{plain(loaded.name)}** · {cfg.n_layers} blocks × {cfg.n_heads} heads, d_model {cfg.d_model}, "
           f"vocabulary {cfg.vocab_size:,}, context {cfg.n_ctx} · this prompt: {len(tokens)} tokens")


@fragment
def view(model_key: str, loaded: LoadedModel, tokens: list[int]) -> None:
    """The loss target, the chosen view and its pipeline strip: a click inside a view reruns only
    this, not the model loading and the prompt above it."""
    target = None
    if st.session_state.explore_target:  # a chosen token at a chosen position; else the mean next-token loss
        position = st.session_state.explore_target_pos
        try:
            target = Target(loaded.tokenizer.token_id(st.session_state.explore_target), position)
        except GlassboxError as exc:
            st.error(f"Target: {plain(exc)}. The backward pass uses the mean next-token loss until it is fixed.")
    ctx = Explorer(model_key, loaded, tokens, target)
    chosen = st.segmented_control("View", list(VIEWS), key="explore_view", persist_state="session", required=True)
    settings = {**PAGE_SETTINGS, **PROMPT_SETTINGS}
    write_url_settings(settings, prefix="explore_")  # what this run starts from (the Export view shows the URL)
    module = VIEWS[chosen]
    pipeline(ctx, module.lit(ctx))
    try:
        module.render(ctx)
    except GlassboxError as exc:
        st.error(plain(exc))
    write_url_settings(settings, prefix="explore_")  # and what the view's widgets hold after it


view(loaded.name, loaded, tokens)  # the resolved name: every spelling of a path shares one set of traces
