"""Playground: type a prompt, see the next-token distribution before and after temperature,
top-k and top-p, and generate token by token with a KV cache. An encoder-decoder reads the prompt
as its source and writes a target; an encoder (BERT) fills in the prompt's mask token."""

from __future__ import annotations

from dataclasses import asdict

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import lessons_about
from glassbox.app.components.errors import fragment
from glassbox.app.components.generation_player import (
    generation_payload,
    generation_player,
    sent_branch,
    step_record,
    tree_payload,
)
from glassbox.app.components.labels import plain, plain_html
from glassbox.app.components.model_card import model_card
from glassbox.app.components.model_picker import model_picker, readable_prompt
from glassbox.app.components.sampling_controls import SAMPLING_LIMITS, sampling_controls
from glassbox.app.components.sampling_controls import clicked as generate_clicked
from glassbox.app.components.steering import STRENGTH_KEY, choose_source, side_by_side, steering_caption, token_record
from glassbox.app.resources import check_cost, model_pass, shared_model
from glassbox.app.state import read_url_settings, show_url_notes, write_url_settings
from glassbox.model.engine import GlassboxError, check_context
from glassbox.model.engine.sampling import (
    Sampling,
    fill_mask,
    first_target_logits,
    kv_cache_bytes,
    masked_token_logits,
    next_token_logits,
)
from glassbox.model.plot.labels import token_text
from glassbox.model.serving import working_bytes
from glassbox.model.serving.sizing import seq2seq_pass_bound

DEFAULTS = {
    "model": "default",
    "prompt": "Lily had a",
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "max_new": 20,
    "seed": 0,
    "greedy": False,
}


# What the chart shows, per kind of model: the engine's logits for it, and the chart's title
LOGITS = {"decoder": next_token_logits, "encoder-decoder": first_target_logits, "encoder": masked_token_logits}
CHART_TITLE = {
    "decoder": "Next token after the prompt",
    "encoder-decoder": "First target token, given the source",
    "encoder": "The masked token",
}


@st.cache_data(max_entries=256, show_spinner=False)
def prompt_logits(model_name: str, prompt: str):
    loaded = shared_model(model_name)
    with model_pass("next token", pass_cost(loaded, len(loaded.encode(prompt)))):
        return LOGITS[loaded.cfg.kind](loaded, prompt)


def pass_cost(loaded, n_tokens: int, n_new: int = 0) -> int:
    """A forward pass over the prompt and, generating, the keys and values of every token: checked
    against the server's trace budget (a GlassboxError naming the longest prompt that fits)."""
    cfg = loaded.cfg
    if cfg.encoder_decoder:  # the source and the target each have the whole context; the sizer probes decoders
        check_context(cfg, n_tokens, what="The source")
        check_context(cfg, 1, n_new, what="The target")
        return check_cost("This source", lambda n: seq2seq_pass_bound(loaded.model), n_tokens, cfg.n_ctx)
    check_context(loaded.cfg, n_tokens, n_new)  # the context first: nothing past it is sized
    return check_cost(
        "This prompt",
        lambda n: working_bytes(loaded.model, n, backward=False) + kv_cache_bytes(loaded, n + n_new) * (n_new > 0),
        n_tokens,
        loaded.cfg.n_ctx,
    )


def sampling_from_state() -> Sampling:
    s = st.session_state
    return Sampling(
        temperature=0.0 if s.greedy else float(s.temperature), top_k=int(s.top_k) or None, top_p=float(s.top_p), seed=int(s.seed)
    )


LIMITS = {**SAMPLING_LIMITS, "top_k": (0, 100), "max_new": (1, 100), "seed": (0, 2**31 - 1)}


@fragment
def sampling_view(loaded, top_k_max: int, new_max: int) -> None:
    """The prompt, the settings and the distribution they give, and generation (an encoder: filling
    in the mask): a slider moved reruns only this (the URL is written here)."""
    kind = loaded.cfg.kind
    encoder = kind == "encoder"
    st.text_area(
        {"decoder": "Prompt", "encoder-decoder": "Source", "encoder": "Text with a mask"}[kind],
        key="prompt",
        height=80,
        help={
            "decoder": "The text the model continues.",
            "encoder-decoder": "What the encoder reads; the decoder then writes the target.",
            "encoder": "Write the mask token where a word is missing.",
        }[kind],
    )
    if encoder:
        mask = loaded.tokenizer.mask_token
        st.caption(
            (f"Write {plain(mask)} where a word is missing. " if mask else "")
            + "An encoder predicts the masked positions of a text, seeing the words on both sides; it does "
            "not continue text, so it fills in the first mask instead of generating token by token."
        )
    clicked = generate_clicked()  # the button is drawn with the sliders, in the page
    room, note, natural = new_token_room(loaded, st.session_state.prompt, new_max)
    if natural and st.session_state.max_new_auto:  # until the slider is moved, the source's length
        st.session_state.max_new = natural
    if room >= 1:  # none: the value is kept for a shorter prompt, and Generate is off
        st.session_state.max_new = min(st.session_state.max_new, room)
    c4, c5 = st.columns([3, 1], vertical_alignment="bottom")
    if room > 1 or encoder:
        c4.slider(
            "Max new tokens",
            1,
            max(room, 2),
            key="max_new",
            disabled=encoder,
            on_change=lambda: st.session_state.update(max_new_auto=False),
            help="An encoder fills in one mask: it writes no new tokens." if encoder else note or None,
        )
    if note and not encoder:
        st.caption(plain(note))
    c5.number_input("Seed", min_value=0, step=1, key="seed", help="The same seed and settings give the same sample.")
    chart_area = st.container()  # the settings, the distribution and the button that uses them
    write_url_settings(DEFAULTS)

    sampling = sampling_from_state()
    try:
        logits = prompt_logits(st.session_state.model, st.session_state.prompt)
    except GlassboxError as exc:
        chart_area.error(plain(exc))
        return
    if encoder and clicked:
        run_fill(loaded, sampling)
    filled = current_fill(sampling) if encoder else None
    with chart_area:
        sampling_controls(
            logits,
            loaded.tokenizer.pieces,
            top_k_max,
            CHART_TITLE[kind],
            drawn=filled and filled["token_id"],
            action="Fill" if encoder else "Generate",
            blocked=None if encoder or room >= 1 else note,
        )
    if encoder:
        fill_view(filled)
        return
    if clicked and room >= 1:
        run_generation(loaded, sampling)
    elif clicked:
        st.error(plain(note))
    generation_view(loaded)


def new_token_room(loaded, prompt: str, new_max: int) -> tuple[int, str, int | None]:
    """The most new tokens this prompt leaves room for (at most ``new_max``), a sentence saying why
    where that is fewer, and the number a model that cannot stop itself should write, if any: a
    decoder's context holds the prompt and every new token; an encoder-decoder with no end-of-text
    token writes as many tokens as its source has (its targets were as long as their sources)
    unless the slider asks for more, as nothing would stop it."""
    cfg = loaded.cfg
    try:
        n = len(loaded.encode(prompt))
    except GlassboxError:  # the chart says why the prompt cannot be read
        return new_max, "", None
    if cfg.encoder_decoder:
        if n == 0 or any(p in END_TOKENS for p in loaded.tokenizer.pieces):
            return new_max, "", None
        return (
            new_max,
            (
                f"{loaded.name} has no end-of-text token to stop on, so the slider starts at the source's "
                f"length ({n}), as long as its training targets were; tokens past that are ones it was "
                "never trained to write."
            ),
            min(n, new_max),
        )
    room = min(new_max, cfg.n_ctx - n)
    if room < 1:
        return (
            0,
            (
                f"The prompt fills the model's whole context ({cfg.n_ctx} tokens, the prompt {n}): there is no "
                "room for a new token. Shorten the prompt to generate."
            ),
            None,
        )
    if room < new_max:
        return (
            room,
            (f"The context holds {cfg.n_ctx} tokens and the prompt has {n}: room for {room} new token{'s' * (room != 1)}."),
            None,
        )
    return room, "", None


END_TOKENS = ("</s>", "<eos>", "<|endoftext|>", "[SEP]")  # what an encoder-decoder's target ends with


def run_fill(loaded, sampling: Sampling) -> None:
    prompt = st.session_state.prompt
    try:
        with model_pass("fill", pass_cost(loaded, len(loaded.encode(prompt)))):
            filled = fill_mask(loaded, prompt, sampling)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    st.session_state.filled = {
        "model": st.session_state.model,
        "prompt": prompt,
        "settings": str(sampling),
        "text": filled.text,
        "token": filled.token,
        "token_id": filled.token_id,
        "p": filled.p,
        "p_model": filled.p_model,
    }


def current_fill(sampling: Sampling) -> dict | None:
    """The last fill, while the model, the text and the settings are still the ones it was drawn with."""
    filled = st.session_state.get("filled")
    same = filled and (filled["model"], filled["prompt"], filled["settings"]) == (
        st.session_state.model,
        st.session_state.prompt,
        str(sampling),
    )
    return filled if same else None


def fill_view(filled: dict | None) -> None:
    if not filled:
        return
    st.subheader("Filled")
    st.caption(f"{filled['settings']} · the first mask replaced by the token drawn (bold in the chart)")
    st.html(f"<div style='font-family:monospace;font-size:1.1em'>{plain_html(filled['text'])}</div>")
    st.markdown(
        f"The mask became “{plain(token_text(filled['token']))}”, drawn with p = {filled['p']:.3f} "
        f"(model: {filled['p_model']:.3f})."
    )


def run_generation(loaded, sampling: Sampling) -> None:
    """Generate with the page's settings. A decoder's generation is a tree (its first path drawn
    here), which Force and another seed then grow; an encoder-decoder's is streamed as it comes."""
    n_new = int(st.session_state.max_new)
    entry = {"model": st.session_state.model, "prompt": st.session_state.prompt, "settings": str(sampling)}
    live = st.empty()  # the text as it streams; the chips below replace it, so it is not shown twice
    try:
        n_prompt = len(loaded.encode(st.session_state.prompt))
        cost = pass_cost(loaded, n_prompt, n_new)
        with live.container(), model_pass("generation", cost):  # released however the stream ends
            st.markdown("**Generating…**")
            if loaded.cfg.encoder_decoder:
                records: list[dict] = []

                def stream():
                    for token in loaded.stream(st.session_state.prompt, n_new, **asdict(sampling)):
                        records.append(step_record(token, loaded.tokenizer.pieces))
                        yield plain(token.token)  # the model's text, shown as text

                st.write_stream(stream())
                # an encoder-decoder's cross-attention caches the whole source
                entry |= {"tokens": records, "source_tokens": n_prompt}
            else:
                tree = loaded.generate(st.session_state.prompt, n_new, **asdict(sampling), tree=True)
                entry |= {"tree": tree, "records": {}, "lens": {}, "source_tokens": 0}
                choose_path(entry, 0, 0)
        live.empty()
        st.session_state.generation = entry
    except GlassboxError as exc:
        st.error(plain(exc))


def choose_path(entry: dict, path: int, step: int) -> None:
    """Show ``path`` of the entry's tree, opened at ``step``: its tokens become the generation's."""
    tree = entry["tree"]
    records = entry["records"].setdefault(path, [step_record(t, tree.model.pieces) for t in tree.paths[path].steps])
    entry |= {"path": path, "step": step, "tokens": records}


def branch_generation(path: int, step: int, token_id: int) -> None:
    """A Force button: the token forced at that step of that path, the rest drawn again (the tree
    reuses the path's KV cache up to there); the new path is shown at that step."""
    entry = st.session_state.get("generation") or {}
    tree = entry.get("tree")
    if tree is None or not 0 <= path < len(tree.paths) or not 0 <= step < len(tree.paths[path].steps):
        return  # a stale or forged message: nothing of this generation to branch
    loaded = tree.model
    try:
        with model_pass("generation", pass_cost(loaded, len(tree.prompt), tree.max_new_tokens)):
            branch = tree.branch(len(tree.prompt) + step, token_id, path)
    except GlassboxError as exc:
        entry["error"] = str(exc)
        return
    entry.pop("error", None)
    choose_path(entry, branch.index, step)


def sample_again(loaded, entry: dict) -> None:
    """Another sample of the generation's prompt with its settings and a seed chosen here: the
    tree drawing shows where it parts from the first."""
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    seed = left.number_input("Another sample with seed", 0, 2**31 - 1, entry["tree"].paths[-1].sampling.seed + 1, key="tree_seed")
    if right.button("Sample again", help="The prompt drawn again with the same settings and this seed, as a new path"):
        tree = entry["tree"]
        try:
            with model_pass("generation", pass_cost(loaded, len(tree.prompt), tree.max_new_tokens)):
                choose_path(entry, tree.sample(int(seed)).index, 0)
            entry.pop("error", None)
        except GlassboxError as exc:
            entry["error"] = str(exc)


def lens_of(entry: dict, path: int) -> dict:
    """The logit lens at each new token of a path, computed once per path."""
    if path not in entry["lens"]:
        tree = entry["tree"]
        with model_pass("logit lens", pass_cost(tree.model, len(tree.tokens(path)))):
            entry["lens"][path] = tree.lens(path)
    return entry["lens"][path]


def generation_view(loaded) -> None:
    """The last generation, one step at a time, in the page (a decoder's as a tree); the KV cache's
    growth below."""
    result = st.session_state.get("generation")
    if not result or result["model"] != st.session_state.model:  # another model's: its cache is not this one's
        return
    st.subheader("Generated target" if loaded.cfg.encoder_decoder else "Generated")
    tree = result.get("tree")
    st.caption(
        f"{result['settings']} · colour: the probability each token was drawn with (green high, red low) · "
        "click a token or a step for its distribution"
        + (", the sampler's alternatives (Force one to branch), the logit lens" if tree else "")
        + " and its KV cache"
    )
    if tree is not None and (branch := sent_branch()):
        branch_generation(*branch)
    payload, links = generation_payload(loaded, result)
    if tree is not None:
        sample_again(loaded, result)
        if "error" in result:
            st.error(plain(result["error"]))
        try:
            payload["tree"] = tree_payload(loaded, result, lambda path: lens_of(result, path))
        except GlassboxError as exc:
            st.error(plain(exc))
        payload["id"] += f"|{len(tree.paths)}|{result['path']}"  # a new path shown: the page opens it
    generation_player(payload, links)
    if loaded.cfg.n_layers or loaded.cfg.encoder_decoder:
        tokens = result["tokens"]
        fig = go.Figure(go.Scatter(x=[x["position"] for x in tokens], y=[x["cache_bytes"] for x in tokens], mode="lines+markers"))
        fig.update_layout(
            title="KV cache size as generation goes on" + (f" (path {result['path'] + 1})" if tree is not None else ""),
            yaxis_title="bytes",
            height=260,
            xaxis_title="target tokens in the cache (beside the source's)"
            if loaded.cfg.encoder_decoder
            else "tokens in the cache",
            margin=dict(t=40, b=10),
        )
        show(fig, key="cache_chart", config={"displayModeBar": False})  # its buttons covered the title
    lessons_about(["kv-cache"])


STEERED = "playground_steered"  # the last steered generation, shown while its model and prompt are the page's


@fragment
def steering_view(loaded) -> None:
    """Steering: generate with a vector added to the residual stream, beside the plain completion
    with the same sampler and seed (the settings above). Its own fragment: a steering run reruns only this."""
    with st.expander("Steer", expanded=STEERED in st.session_state):
        if loaded.cfg.kind != "decoder" or not loaded.cfg.n_layers:
            st.info(
                plain(
                    "Steering adds a vector to a decoder-only model's residual stream between blocks; "
                    + ("this model has no blocks." if loaded.cfg.kind == "decoder" else f"this model is an {loaded.cfg.kind}.")
                )
            )
            return
        st.markdown(
            "Add a vector to the residual stream entering a block (a feature's: where its SAE writes), at every "
            "position from a chosen one on, and "
            "generate; the plain completion is drawn beside it with the same settings and seed."
        )
        source = choose_source()
        with st.form("playground_steer"):
            inputs = source.inputs(loaded)
            left, right = st.columns(2)
            if STRENGTH_KEY not in st.session_state:  # the source's own default (its vectors' size differs)
                st.session_state[STRENGTH_KEY] = source.strength
            strength = left.slider(
                "Strength",
                -20.0,
                20.0,
                step=0.25,
                key=STRENGTH_KEY,
                persist_state="session",
                help="The vector is multiplied by this; negative steers the other way. The vector's "
                "norm, and the stream's, are written under the completions.",
            )
            start = right.number_input(
                "From position",
                0,
                loaded.cfg.n_ctx,
                0,
                key="playground_steer_start",
                persist_state="session",
                help="The first position steered (0: the whole "
                "prompt); positions past the prompt steer only the new tokens from there",
            )
            pressed = st.form_submit_button("Steer")
        try:
            ready = isinstance(inputs, str) or source.ready(inputs)  # a hub SAE not fetched yet: its Download button
        except GlassboxError as exc:
            st.error(plain(exc))
            ready = False
        if pressed and ready:
            if isinstance(inputs, str):
                st.error(plain(inputs))
            else:
                run_steering(loaded, source.make(loaded, inputs), strength, int(start))
        result = st.session_state.get(STEERED)
        if result and (result["model"], result["prompt"]) == (st.session_state.model, st.session_state.prompt):
            st.caption(
                steering_caption(
                    result["label"],
                    result["strength"],
                    result["start"],
                    result["settings"],
                    result.get("norm"),
                    result.get("stream"),
                )
            )
            side_by_side(result["prompt"], result["steered"], result["plain"])


def run_steering(loaded, vector, strength: float, start: int) -> None:
    """``Model.steer`` with the page's prompt, settings and seed, admitted as a generation (the
    steered and the plain one run one after the other)."""
    prompt, n_new, sampling = st.session_state.prompt, int(st.session_state.max_new), sampling_from_state()
    with model_pass("steering", pass_cost(loaded, len(loaded.encode(prompt)), n_new)):
        steered, plain_tokens = loaded.steer(
            prompt, vector.vector, vector.block, strength, start, n_new, **asdict(sampling), hook=vector.hook
        )
        site = f"blocks.{vector.block}.{vector.hook}"
        stream = float(loaded.trace(prompt, names=[site])[site].double().norm(dim=-1).mean())
    st.session_state[STEERED] = {
        "model": st.session_state.model,
        "prompt": prompt,
        "settings": str(sampling),
        "label": vector.label,
        "strength": strength,
        "start": start,
        "norm": vector.norm,
        "stream": stream,
        "steered": [token_record(t) for t in steered],
        "plain": [token_record(t) for t in plain_tokens],
    }


read_url_settings(DEFAULTS, LIMITS)
if "max_new_auto" not in st.session_state:  # a model that cannot stop itself writes its source's length…
    st.session_state.max_new_auto = "max_new" not in st.query_params  # …unless a link chose a number
st.title("Playground")
show_url_notes()
current = model_picker("model")
st.query_params["model"] = st.session_state.model
if current is None:
    st.stop()
readable_prompt(current, "prompt", DEFAULTS["prompt"])
top_k_limit = min(current.cfg.vocab_size, 100)
st.session_state.top_k = min(st.session_state.top_k, top_k_limit)
# an encoder-decoder's target has the context to itself: its start token and up to n_ctx new tokens
new_limit = min(LIMITS["max_new"][1], current.cfg.n_ctx) if current.cfg.encoder_decoder else LIMITS["max_new"][1]
st.session_state.max_new = min(st.session_state.max_new, new_limit)
model_card(current)
sampling_view(current, top_k_limit, new_limit)
steering_view(current)
