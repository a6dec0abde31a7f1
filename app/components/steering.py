"""Steering's parts that do not depend on where the vector comes from: the vector sources (each
draws its own inputs and makes the vector from them, through ``glassbox.Model``), and the steered
and plain completions drawn side by side. The playground (app/screens/playground.py) puts them
together. A source is a ``VectorSource`` in ``SOURCES``: two prompts (contrastive activation
addition), or a sparse-autoencoder feature's decoder row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from glassbox.app.components.labels import plain, plain_html
from glassbox.app.components.sae_picker import ASK_SOURCE, OTHER_SAE, SOURCE_EXAMPLE, offered, sae_ready
from glassbox.app.resources import check_cost, model_pass, shared_sae
from glassbox.core import Model
from glassbox.model.analysis.features import FeatureTokens, feature_tokens, steering_vector
from glassbox.model.data.stories import corpus
from glassbox.model.engine import GlassboxError, block_label
from glassbox.model.engine.sampling import GeneratedToken
from glassbox.model.io.sae import pending_download
from glassbox.model.plot.labels import HIGHLIGHT, token_text
from glassbox.model.serving import working_bytes


@dataclass(frozen=True)
class SteeringVector:
    vector: torch.Tensor  # (d_model,)
    label: str  # what it is, in words, shown beside the completions
    block: int  # where it is added: the residual stream entering this block (blocks.{block}.hook_resid_pre)…
    hook: str = "hook_resid_pre"  # …or another of the block's stream tensors (where an SAE writes)

    @property
    def norm(self) -> float:
        """‖vector‖: what strength 1 adds to the stream, in its own units."""
        return float(self.vector.double().norm())


@dataclass(frozen=True)
class VectorSource:
    """Where a steering vector comes from. ``inputs`` draws the source's widgets (inside the
    steering form) and returns their values, or a sentence saying what is missing;
    ``make`` turns those values into the vector (a model pass, run once the form is sent);
    ``ready`` (drawn below the form) says whether what the values name is here, offering its
    download if not."""

    name: str
    inputs: Callable[[Model], tuple | str]
    make: Callable[[Model, tuple], SteeringVector]
    ready: Callable[[tuple], bool] = lambda inputs: True
    strength: float = 1.0  # the strength the slider starts at for this source (see DEFAULTS)


# The defaults: chosen so that, on the default model with the playground's own defaults ("Lily had a",
# temperature 1, seed 0), the steered story visibly changes and stays readable: its loss under the
# plain model stays near the plain completion's (tests/test_i44_playground.py measures both).
POSITIVE, NEGATIVE = "The fox", "The duck"  # the duck of the plain story becomes a fox
CONTRASTIVE_STRENGTH = 0.5  # the vector's norm is about 12, the stream's about 10-20: more garbles the text
FEATURE_STRENGTH = 8.0  # an SAE's decoder rows have norm 1
DEFAULT_FEATURE = {"default-sae": 486}  # fires on the stories' animals (rabbit, bear, horse, fox, …)
CATALOG_STORIES = 32  # the bundled stories the features' top tokens are read over
CLEAR_SHOWN = 12


def contrastive_inputs(loaded: Model) -> tuple | str:
    left, right = st.columns(2)
    positive = left.text_input(
        "Towards (positive prompt)", value=POSITIVE, key="playground_steer_positive", persist_state="session"
    )
    negative = right.text_input(
        "Away from (negative prompt)", value=NEGATIVE, key="playground_steer_negative", persist_state="session"
    )
    block = st.selectbox(
        "Block",
        range(loaded.cfg.n_layers),
        index=loaded.cfg.n_layers // 2,
        key="playground_steer_block",
        persist_state="session",
        format_func=block_label,
        help="The vector is read from, and added to, the residual stream entering this block",
    )
    if not positive or not negative:
        return "Type both prompts: the vector is the positive one's residual stream minus the negative one's."
    return positive, negative, block


def contrastive_vector(loaded: Model, inputs: tuple) -> SteeringVector:
    """Contrastive activation addition's vector (``Model.steering_vector``), admitted as a pass of
    the longer prompt."""
    positive, negative, block = inputs
    longest = max(len(loaded.tokens(positive)), len(loaded.tokens(negative)))
    cost = check_cost("A steering prompt", lambda n: working_bytes(loaded.model, n, backward=False), longest, loaded.cfg.n_ctx)
    with model_pass("steering vector", cost):
        vector = loaded.steering_vector(positive, negative, block)
    return SteeringVector(
        vector, f"“{positive}” − “{negative}” (their residual streams entering {block_label(block)}, at their last tokens)", block
    )


@st.cache_resource(max_entries=8, show_spinner="Reading what each feature fires on…")
def feature_catalog(model_key: str, source: str, _loaded: Model) -> FeatureTokens | None:
    """Each feature's top tokens over the first CATALOG_STORIES bundled stories (each cut to the
    context); None where this model cannot spell them."""
    sae = shared_sae(model_key, source, _loaded)
    try:
        texts = [_loaded.tokens(story)[: _loaded.cfg.n_ctx] for story in corpus(CATALOG_STORIES)]
    except GlassboxError:
        return None
    cost = check_cost(
        "Reading the features", lambda n: working_bytes(_loaded.model, n, backward=False), _loaded.cfg.n_ctx, _loaded.cfg.n_ctx
    )
    with model_pass("feature catalog", cost):
        return feature_tokens(_loaded.model, texts, sae, k=3)


def top_tokens_text(catalog: FeatureTokens, pieces: list[str], feature: int) -> str:
    """“' rabbit' 20%, ' bear' 17%, …”: the tokens a feature fires most on, with their share of it."""
    if not 0 <= feature < len(catalog.fired) or catalog.top_ids[feature, 0] < 0:
        return "never fired over the stories"
    return ", ".join(
        f"“{token_text(pieces[i])}” {share:.0%}"
        for i, share in zip(catalog.top_ids[feature], catalog.top_mass[feature])
        if i >= 0
    )


def clear_features(catalog: FeatureTokens, pieces: list[str], n: int = CLEAR_SHOWN) -> list[int]:
    """The features with a meaning anyone can read: the most of their activation on one word (a
    token of letters), among those that fired at least 5 times over the stories."""
    return [f for f in catalog.clearest() if pieces[catalog.top_ids[f, 0]].strip().isalpha()][:n]


def feature_inputs(loaded: Model) -> tuple | str:
    saes = offered(loaded.name)
    left, right = st.columns([3, 1])
    choice = left.selectbox(
        "Sparse autoencoder",
        [*saes, OTHER_SAE],
        key="playground_steer_sae",
        persist_state="session",
        help="The Explore page's Features view shows what each feature does",
    )
    source = saes.get(choice)
    feature = right.number_input(
        "Feature", 0, None, DEFAULT_FEATURE.get(source, 0), key="playground_steer_feature", persist_state="session"
    )
    if choice != OTHER_SAE:
        feature_meanings(loaded, source, int(feature))
        return source, int(feature)
    typed = st.text_input(
        "Folder or hub source", key="playground_steer_sae_source", persist_state="session", placeholder=SOURCE_EXAMPLE
    )
    if not typed.strip():
        return ASK_SOURCE
    return typed.strip(), int(feature)


def feature_meanings(loaded: Model, source: str, feature: int) -> None:
    """What the chosen feature fires on, and the features whose meaning is clearest, with their top
    tokens (over the bundled stories); only for an SAE already here (the rest is fetched first)."""
    try:
        if pending_download(source) is not None:
            return
        catalog = feature_catalog(loaded.name, source, loaded)
    except GlassboxError as exc:
        st.caption(plain(f"What the features fire on could not be read: {exc}"))
        return
    if catalog is None:
        return
    pieces = loaded.tokenizer.pieces
    st.caption(
        plain(
            f"Feature #{feature} fires most on: {top_tokens_text(catalog, pieces, feature)} (its share of the "
            f"feature's activation over {CATALOG_STORIES} of the bundled stories; type another number and "
            "press Steer to see its tokens)."
        )
    )
    clear = clear_features(catalog, pieces)
    if clear:
        st.markdown("**Features with a clear meaning** (most of their activation on one word)")
        st.dataframe(
            pd.DataFrame(
                {
                    "feature": clear,
                    "fires most on": [top_tokens_text(catalog, pieces, f) for f in clear],
                    "times fired": [int(catalog.fired[f]) for f in clear],
                }
            ),
            hide_index=True,
            width="stretch",
            height=min(38 + 35 * len(clear), 250),
        )


def feature_vector(loaded: Model, inputs: tuple) -> SteeringVector:
    """A sparse-autoencoder feature's decoder row, added where the SAE writes (``steering_vector``)."""
    source, feature = inputs
    block, hook, vector = steering_vector(shared_sae(loaded.name, source, loaded), feature)
    return SteeringVector(
        vector, f"feature #{feature} of {source} (its decoder row, added to blocks.{block}.{hook})", block, hook
    )


SOURCES = {
    source.name: source
    for source in (
        VectorSource(
            "two prompts (contrastive activation addition)", contrastive_inputs, contrastive_vector, strength=CONTRASTIVE_STRENGTH
        ),
        VectorSource(
            "a sparse-autoencoder feature",
            feature_inputs,
            feature_vector,
            lambda inputs: sae_ready(inputs[0], "playground_steer_sae_fetch"),
            FEATURE_STRENGTH,
        ),
    )
}
STRENGTH_KEY = "playground_steer_strength"


def _source_changed() -> None:
    """Another source: the strength slider starts at that source's default (vectors differ in size)."""
    st.session_state[STRENGTH_KEY] = SOURCES[st.session_state.playground_steer_source].strength


def choose_source() -> VectorSource:
    """The source of the vector; a choice only where there is more than one."""
    if len(SOURCES) == 1:
        return next(iter(SOURCES.values()))
    return SOURCES[
        st.radio(
            "The vector from",
            list(SOURCES),
            key="playground_steer_source",
            persist_state="session",
            horizontal=True,
            on_change=_source_changed,
        )
    ]


def parted_at(steered: list[dict], plain_tokens: list[dict]) -> int | None:
    """The first step where the two completions draw different tokens; None where they never do."""
    return next((i for i, (a, b) in enumerate(zip(steered, plain_tokens)) if a["token_id"] != b["token_id"]), None)


def token_record(token: GeneratedToken) -> dict:
    """What the page keeps of a generated token: its text, id and the probabilities it was drawn with."""
    return {"token": token.token, "token_id": token.token_id, "p": token.p, "p_model": token.p_model}


def completion_html(prompt: str, tokens: list[dict], parted: int | None) -> str:
    """The prompt, then each token as a chip coloured by the probability it was drawn with (red
    low, green high; exact on hover), the first that differs from the other side outlined."""
    chips = []
    for i, t in enumerate(tokens):
        outline = f"outline:2px solid {HIGHLIGHT};font-weight:700;" if i == parted else ""
        chips.append(
            f"<span title='step {i + 1}: p = {t['p']:.3f} (model: {t['p_model']:.3f})' "
            f"style='background:hsl({120 * t['p']:.0f},70%,86%);border-radius:3px;padding:0 2px;"
            f"margin:0 1px;{outline}'>{plain_html(t['token'])}</span>"
        )
    return (
        f"<div style='font-family:monospace;white-space:pre-wrap;line-height:1.9'>"
        f"<span style='color:#777'>{plain_html(prompt)}</span>{''.join(chips)}</div>"
    )


def side_by_side(prompt: str, steered: list[dict], plain_tokens: list[dict]) -> None:
    """The steered and the plain completion, each with its tokens' probabilities, where they part marked."""
    parted = parted_at(steered, plain_tokens)
    for column, title, tokens in zip(st.columns(2), ("Steered", "Plain"), (steered, plain_tokens)):
        with column:
            st.markdown(f"**{title}**")
            st.html(completion_html(prompt, tokens, parted))
    st.caption(
        "Same sampler, same seed: where they part (outlined) is the vector's doing. "
        + ("They never part here." if parted is None else f"They part at step {parted + 1}.")
        + " Colour: the probability each token was drawn with (red low, green high); exact values on hover "
        "and below."
    )
    rows = {
        "step": list(range(1, len(steered) + 1)),
        "steered": [token_text(t["token"]) for t in steered],
        "p steered": [t["p"] for t in steered],
        "plain": [token_text(t["token"]) for t in plain_tokens],
        "p plain": [t["p"] for t in plain_tokens],
        "": ["← they part" if i == parted else "" for i in range(len(steered))],
    }
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        height=min(38 + 35 * len(steered), 420),
        column_config={name: st.column_config.NumberColumn(format="%.4f") for name in ("p steered", "p plain")},
    )


def steering_caption(
    label: str, strength: float, start: int, settings: str, norm: float | None = None, stream: float | None = None
) -> str:
    """What was added where, how large it is beside the stream it is added to, and with which
    sampler, as text."""
    size = ""
    if norm is not None:
        size = (
            f" The vector's norm is {norm:.3g}, so {strength:g} × it adds a vector of norm {abs(strength) * norm:.3g}"
            + (f" to a stream whose norm there is {stream:.3g} on average over the prompt" if stream else "")
            + "; much more than the stream's own size drowns what the model was computing, and the text falls "
            "apart."
        )
    return plain(
        f"{strength:g} × {label}, added from position {start} on (the prompt's positions from there and "
        f"every new token). Sampler (the settings above): {settings}.{size}"
    )
