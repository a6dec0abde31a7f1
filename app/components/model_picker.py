"""The one model picker, used by every page that takes a model (Playground, Explore): the
bundled models, the curated hub models (size, cached or not, a Download button with progress),
any hub id, or a local directory. Which of these a visitor gets is the server's choice
(GLASSBOX_HUB, GLASSBOX_MODEL_DIRS: see docs/hosting.md)."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.download import offer_download
from glassbox.app.components.labels import plain
from glassbox.app.resources import shared_model
from glassbox.model.engine import GlassboxError
from glassbox.model.io.assets import LAB_NAME
from glassbox.model.io.catalog import curated
from glassbox.model.io.checkpoint import NAMED_MODELS, LoadedModel
from glassbox.model.io.guard import allowed_roots
from glassbox.model.io.hub import cached, hub_enabled, parse_hub_id
from glassbox.model.lab.runs import Run

BUNDLED, CURATED, HUB, LOCAL = "Bundled", "Curated hub models", "Any hub id", "Local directory"
LAB = "Lab checkpoint"  # a lab run's model at one step (app/lab/): offered while one is open


def _sources(name: str = "") -> list[str]:
    sources = [BUNDLED] + ([CURATED, HUB] if hub_enabled() else [])
    return sources + ([LOCAL] if allowed_roots() != [] else []) + ([LAB] if LAB_NAME.fullmatch(name) else [])


def _lab_checkpoints(name: str) -> list[str]:
    """The names of every checkpoint of the lab run ``name`` is one of (just ``name`` if that run is gone)."""
    run = LAB_NAME.fullmatch(name)["run"]
    try:
        return [f"lab:{run}@{step}" for step in Run.named(run).checkpoint_steps] or [name]
    except GlassboxError:
        return [name]


def _source_of(name: str) -> str:
    if name in NAMED_MODELS:
        return BUNDLED
    if LAB_NAME.fullmatch(name):
        return LAB
    try:
        hub = parse_hub_id(name)
    except GlassboxError:  # a hub id with a revision git refuses: the loader says why
        return HUB
    if hub is None:
        return LOCAL
    return CURATED if name in [m.hub_id for m in curated()] else HUB


def _label(entry) -> str:
    state = "cached" if entry.cached else f"{entry.download_bytes / 1e9:.2f} GB to download"
    return f"{entry.hub_id} · {entry.family} · {entry.parameters / 1e6:,.0f}M parameters · {state}"


WIDGETS = {BUNDLED: "_bundled", CURATED: "_curated", HUB: "_hub", LOCAL: "_dir", LAB: "_lab"}  # each source's widget key suffix


def _chosen(key: str) -> None:
    """A widget changed: the model name follows it (on_change, before the rerun)."""
    source = st.session_state[key + "_source"]
    st.session_state[key] = str(st.session_state.get(key + WIDGETS[source]) or "").strip()


def model_picker(key: str) -> LoadedModel | None:
    """Pick a model; its name lives in ``st.session_state[key]`` (the page keeps it in the URL, a
    test or a link may set it), and the widgets show that name. Returns the loaded model, or None
    after saying what is missing (a path, a download)."""
    name = st.session_state[key]
    sources = _sources(name)
    if name:  # the name is the truth: the widgets are set from it
        source = _source_of(name)
        if source not in sources:  # e.g. a hub id on a server without the hub: the loader says why
            source = LOCAL if LOCAL in sources else BUNDLED
        st.session_state[key + "_source"] = source
        if source != BUNDLED or name in NAMED_MODELS:
            st.session_state[key + WIDGETS[source]] = name
    elif st.session_state.get(key + "_source") not in sources:
        st.session_state[key + "_source"] = BUNDLED
    left, right = st.columns([1, 3])
    source = left.selectbox("Model from", sources, key=key + "_source", on_change=_chosen, args=(key,))
    widget = dict(key=key + WIDGETS[source], on_change=_chosen, args=(key,))
    if source == BUNDLED:
        right.selectbox(
            "Model",
            NAMED_MODELS,
            **widget,
            help="default: the small GPT trained here on generated stories; worked-example: the article's 8-word toy",
        )
    elif source == CURATED:
        entries = {m.hub_id: m for m in curated()}
        right.selectbox(
            "Model",
            list(entries),
            format_func=lambda i: _label(entries[i]),
            **widget,
            help="Models people open to look inside, one or two per family. `glassbox models` lists them too.",
        )
    elif source == HUB:
        right.text_input(
            "Hub id",
            placeholder="EleutherAI/pythia-70m@step3000",
            **widget,
            help="owner/name from huggingface.co, optionally @revision (a branch, tag or commit). Safetensors weights only.",
        )
    elif source == LAB:
        right.selectbox(
            "Checkpoint",
            _lab_checkpoints(name),
            format_func=lambda n: f"{n} · step {n.rsplit('@', 1)[1]}",
            **widget,
            help="The model as it was at this step of a Lab run (the Lab pages open it here)",
        )
    else:
        roots = allowed_roots()
        where = f" Under {', '.join(map(str, roots))} on this server." if roots else ""
        right.text_input(
            "Model directory",
            placeholder="/path/to/model (config.json + model.safetensors)",
            **widget,
            help="A Glassbox checkpoint or a transformers model directory (GPT-2, GPT-NeoX, GPT-Neo, "
            "Llama, Mistral, Qwen2/3, Gemma 1-3), read offline." + where,
        )
    if not st.session_state[key] and source in (BUNDLED, CURATED):
        _chosen(key)  # a first visit, or the source just switched: the model its list shows is the one opened
    name = st.session_state[key]
    if not name and source == HUB:
        st.info("Give a hub id (owner/name).")
    if not name:
        if source == LOCAL:
            st.info("Give the path of a model directory.")
        return None
    try:
        hub = parse_hub_id(name) if source in (CURATED, HUB) else None
        entry = next((m for m in curated() if hub is not None and m.hub_id == str(hub)), None)
        if (
            hub is not None
            and cached(hub) is None
            and not offer_download(
                str(hub),
                hub,
                key,
                size=entry.download_bytes if entry else None,
                fetched="Only its config, tokenizer and safetensors weights are fetched",
            )
        ):
            return None
        return shared_model(name)
    except GlassboxError as exc:
        st.error(plain(exc))
        return None


def readable_prompt(loaded: LoadedModel, prompt_key: str, default: str) -> None:
    """A model just opened that cannot read the prompt it inherits in ``st.session_state[prompt_key]``
    (the previous model's, or the page's ``default``: a word-level model such as micro-seq2seq opened
    after a story prompt) gets its own sample prompt (config.json's about.sample_prompt) in its
    place, and the page says so. A prompt typed or linked for this model is left as it is."""
    opened_key = prompt_key + "_opened"  # (model, prompt) of the last run
    prompt, before = st.session_state.get(prompt_key, ""), st.session_state.get(opened_key)
    inherited = prompt == (before[1] if before else default)
    sample = loaded.about.get("sample_prompt")
    if (before is None or before[0] != loaded.name) and inherited and isinstance(sample, str) and prompt:
        try:
            loaded.encode(prompt)
        except GlassboxError:
            st.session_state[prompt_key] = sample
            st.info(plain(f"{loaded.name} cannot read the prompt “{prompt}”: its own sample prompt is shown instead."))
    st.session_state[opened_key] = (loaded.name, st.session_state.get(prompt_key, ""))
