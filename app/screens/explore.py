"""Explore a prompt: any prompt on any loaded model, every tensor of the forward pass and every
gradient of the backward pass, one view at a time (app/explore/, one file per view)."""

import streamlit as st

from glassbox.app.components.assignment import assign_button, assignment_banner
from glassbox.app.components.course import lessons_about
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain
from glassbox.app.components.model_picker import model_picker, readable_prompt
from glassbox.app.explore import RENAMED_VIEWS, VIEWS
from glassbox.app.explore.common import Explorer, linked_tokens, offered, pipeline
from glassbox.app.explore.seq2seq import VIEWS as SEQ2SEQ_VIEWS
from glassbox.app.explore.seq2seq.page import page as seq2seq_page
from glassbox.app.state import read_url_settings, show_url_notes, url_settings, write_url_settings
from glassbox.model.course import lessons_for_view
from glassbox.model.course.assignments import MARK
from glassbox.model.engine import GlassboxError, Target, check_context
from glassbox.model.engine.placement import summary
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.worked_example.article import published

# ids: a generation's own token ids (the playground's link), used while they spell the prompt: its
# text encoded again may split into other tokens than the model wrote
PAGE_SETTINGS = {
    "model": "default",
    "prompt": "the cat sat on the",
    "view": "Overview",
    "target": "",
    "target_pos": -1,
    "ids": "",
}
target_in_url = "target" in st.query_params  # read before the settings are written back
if st.query_params.get("view") in RENAMED_VIEWS:  # a link from before a view was renamed
    st.query_params["view"] = RENAMED_VIEWS[st.query_params["view"]]
url_settings(PAGE_SETTINGS, choices={"view": list(dict.fromkeys([*VIEWS, *SEQ2SEQ_VIEWS]))}, prefix="explore_")
st.title("Explore a prompt")
assignment_banner(st.session_state.explore_view)
show_url_notes("explore_")
st.caption(
    "Every number below is the model's own: one trace of this prompt, forward and backward, cached per (model, prompt, target)."
)

# The model: bundled, from the hub, or a directory; one picker for every page (app/components/model_picker.py).
loaded = model_picker("explore_model")
st.query_params["model"] = st.session_state.explore_model
if loaded is None:
    st.stop()
readable_prompt(loaded, "explore_prompt", PAGE_SETTINGS["prompt"])
cfg = loaded.cfg
if st.session_state.get("explore_opened_seq2seq", cfg.encoder_decoder) != cfg.encoder_decoder:
    st.session_state.explore_target = ""  # a loss token is no target text for an encoder-decoder, nor the other way
st.session_state.explore_opened_seq2seq = cfg.encoder_decoder
if cfg.encoder_decoder:  # a source and a target, two stacks: views of their own (app/explore/seq2seq/)
    st.session_state.explore_opened_model = loaded.name
    seq2seq_page(loaded.name, loaded, PAGE_SETTINGS)
    st.stop()

with st.form("explore_prompt_form"):
    st.text_area(
        "Prompt",
        key="explore_prompt",
        persist_state="session",
        height=68,
        help=f"Words this model knows: {plain(loaded.tokenizer.known_words())}"
        if loaded.tokenizer.word_level
        else f"Any text, up to {cfg.n_ctx} tokens (byte-level BPE)",
    )
    st.form_submit_button("Run")
try:
    tokens = loaded.encode(st.session_state.explore_prompt)
except GlassboxError as exc:
    st.error(plain(exc))
    st.stop()
linked = linked_tokens(loaded, st.session_state.explore_ids, st.session_state.explore_prompt)
if linked is None:
    st.session_state.explore_ids = ""  # the prompt was changed: its own encoding from now on
else:
    tokens = linked
try:
    check_context(cfg, len(tokens))
except GlassboxError as exc:
    why = ""
    if loaded.name == "worked-example":
        why = (
            f" The article's model is that short on purpose: its positional table W_P has {cfg.n_ctx} rows, one "
            "per word of “the cat sat on the”, so that every number can be checked by hand. For longer prompts "
            "choose another model above (the default story model reads 128 tokens)."
        )
    st.error(plain(str(exc) + why))
    st.stop()
# The worked example's model differentiates the article's loss, −log p(mat) at the last position, so
# that its gradients are the worked example's: when it is opened (unless the URL chose a target).
opened = st.session_state.get("explore_opened_model")
if loaded.name == "worked-example" and opened != loaded.name and not (opened is None and target_in_url):
    st.session_state.explore_target = loaded.tokenizer.pieces[published()["config"]["target_id"]]
    st.session_state.explore_target_pos = len(tokens) - 1
st.session_state.explore_opened_model = loaded.name
if not 0 <= st.session_state.explore_target_pos < len(tokens):  # -1 (the default): the last position
    st.session_state.explore_target_pos = len(tokens) - 1

# Per-prompt choices, kept in the URL, clamped to this model and prompt.
PROMPT_SETTINGS = {
    "block": 0,
    "head": 0,
    "pos": len(tokens) - 1,
    "key_pos": 0,
    "norm": "",
    "bstep": "",
    "weight": "",
    "tensor": "",
}  # the views check the names against this model
# (a zero-layer model keeps block 0, unused: its views say it has no blocks)
LIMITS = {
    "block": (0, max(cfg.n_layers - 1, 0)),
    "head": (0, cfg.n_heads - 1),
    "pos": (0, len(tokens) - 1),
    "key_pos": (0, len(tokens) - 1),
}
read_url_settings(PROMPT_SETTINGS, LIMITS, prefix="explore_")
show_url_notes("explore_")
for key, (low, high) in LIMITS.items():  # kept from another model or prompt: into this one's range
    st.session_state["explore_" + key] = min(max(int(st.session_state["explore_" + key]), low), high)

shape = f"{cfg.n_layers} block{'s' * (cfg.n_layers > 1)} × {cfg.n_heads} heads" if cfg.n_layers else "no blocks (a bigram table)"
shape += ", attention only" if cfg.attn_only else ""
st.caption(
    f"**{plain(loaded.name)}** · {shape}, d_model {cfg.d_model}, "
    f"vocabulary {cfg.vocab_size:,}, context {cfg.n_ctx} · this prompt: {len(tokens)} tokens · computed in "
    f"{str(loaded.model.embed.W_E.dtype).removeprefix('torch.')} on {loaded.model.device.type.upper()}"
    + (f" · split: {placed}" if (placed := summary(loaded.model)) else "")
)


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
    chosen = st.segmented_control(
        "View", offered("explore_view", list(VIEWS)), key="explore_view", persist_state="session", required=True
    )
    settings = {**PAGE_SETTINGS, **PROMPT_SETTINGS}
    write_url_settings(settings, prefix="explore_")  # what this run starts from (the Export view shows the URL)
    module = VIEWS[chosen]
    pipeline(ctx, module.lit(ctx))
    try:
        module.render(ctx)
    except GlassboxError as exc:
        st.error(plain(exc))
    lessons_about(lessons_for_view(chosen))
    write_url_settings(settings, prefix="explore_")  # and what the view's widgets hold after it
    assign_button("explore", {name: value for name, value in st.query_params.to_dict().items() if name != MARK})


view(loaded.name, loaded, tokens)  # the resolved name: every spelling of a path shares one set of traces
