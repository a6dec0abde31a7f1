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

from glassbox.app.components.labels import HIGHLIGHT, plain, plain_html, token_text
from glassbox.app.components.sae_picker import ASK_SOURCE, OTHER_SAE, SOURCE_EXAMPLE, offered, sae_ready
from glassbox.app.resources import check_cost, model_pass, shared_sae
from glassbox.core import Model
from glassbox.model.analysis.features import steering_vector
from glassbox.model.engine import block_label
from glassbox.model.engine.sampling import GeneratedToken
from glassbox.model.serving import working_bytes


@dataclass(frozen=True)
class SteeringVector:
    vector: torch.Tensor  # (d_model,)
    label: str  # what it is, in words, shown beside the completions
    block: int  # where it is added: the residual stream entering this block (blocks.{block}.hook_resid_pre)…
    hook: str = "hook_resid_pre"  # …or another of the block's stream tensors (where an SAE writes)


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


def contrastive_inputs(loaded: Model) -> tuple | str:
    left, right = st.columns(2)
    positive = left.text_input("Towards (positive prompt)", value="Tom was sad", key="playground_steer_positive",
                               persist_state="session")
    negative = right.text_input("Away from (negative prompt)", value="Tom was happy", key="playground_steer_negative",
                                persist_state="session")
    block = st.selectbox("Block", range(loaded.cfg.n_layers), index=loaded.cfg.n_layers // 2,
                         key="playground_steer_block", persist_state="session", format_func=block_label,
                         help="The vector is read from, and added to, the residual stream entering this block")
    if not positive or not negative:
        return "Type both prompts: the vector is the positive one's residual stream minus the negative one's."
    return positive, negative, block


def contrastive_vector(loaded: Model, inputs: tuple) -> SteeringVector:
    """Contrastive activation addition's vector (``Model.steering_vector``), admitted as a pass of
    the longer prompt."""
    positive, negative, block = inputs
    longest = max(len(loaded.tokens(positive)), len(loaded.tokens(negative)))
    cost = check_cost("A steering prompt", lambda n: working_bytes(loaded.model, n, backward=False), longest,
                      loaded.cfg.n_ctx)
    with model_pass("steering vector", cost):
        vector = loaded.steering_vector(positive, negative, block)
    return SteeringVector(vector, f"“{positive}” − “{negative}” (their residual streams entering "
                                  f"{block_label(block)}, at their last tokens)", block)


def feature_inputs(loaded: Model) -> tuple | str:
    saes = offered(loaded.name)
    left, right = st.columns([3, 1])
    choice = left.selectbox("Sparse autoencoder", [*saes, OTHER_SAE], key="playground_steer_sae",
                            persist_state="session", help="The Explore page's Features view shows what each feature does")
    feature = right.number_input("Feature", 0, None, 0, key="playground_steer_feature", persist_state="session")
    if choice != OTHER_SAE:
        return saes[choice], int(feature)
    typed = st.text_input("Folder or hub source", key="playground_steer_sae_source", persist_state="session",
                          placeholder=SOURCE_EXAMPLE)
    if not typed.strip():
        return ASK_SOURCE
    return typed.strip(), int(feature)


def feature_vector(loaded: Model, inputs: tuple) -> SteeringVector:
    """A sparse-autoencoder feature's decoder row, added where the SAE writes (``steering_vector``)."""
    source, feature = inputs
    block, hook, vector = steering_vector(shared_sae(loaded.name, source, loaded), feature)
    return SteeringVector(vector, f"feature #{feature} of {source} (its decoder row, added to blocks.{block}.{hook})",
                          block, hook)


SOURCES = {source.name: source for source in (
    VectorSource("two prompts (contrastive activation addition)", contrastive_inputs, contrastive_vector),
    VectorSource("a sparse-autoencoder feature", feature_inputs, feature_vector,
                 lambda inputs: sae_ready(inputs[0], "playground_steer_sae_fetch")),
)}


def choose_source() -> VectorSource:
    """The source of the vector; a choice only where there is more than one."""
    if len(SOURCES) == 1:
        return next(iter(SOURCES.values()))
    return SOURCES[st.radio("The vector from", list(SOURCES), key="playground_steer_source", persist_state="session",
                            horizontal=True)]


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
        chips.append(f"<span title='step {i + 1}: p = {t['p']:.3f} (model: {t['p_model']:.3f})' "
                     f"style='background:hsl({120 * t['p']:.0f},70%,86%);border-radius:3px;padding:0 2px;"
                     f"margin:0 1px;{outline}'>{plain_html(t['token'])}</span>")
    return (f"<div style='font-family:monospace;white-space:pre-wrap;line-height:1.9'>"
            f"<span style='color:#777'>{plain_html(prompt)}</span>{''.join(chips)}</div>")


def side_by_side(prompt: str, steered: list[dict], plain_tokens: list[dict]) -> None:
    """The steered and the plain completion, each with its tokens' probabilities, where they part marked."""
    parted = parted_at(steered, plain_tokens)
    for column, title, tokens in zip(st.columns(2), ("Steered", "Plain"), (steered, plain_tokens)):
        with column:
            st.markdown(f"**{title}**")
            st.html(completion_html(prompt, tokens, parted))
    st.caption("Same sampler, same seed: where they part (outlined) is the vector's doing. "
               + ("They never part here." if parted is None else f"They part at step {parted + 1}.")
               + " Colour: the probability each token was drawn with (red low, green high); exact values on hover "
                 "and below.")
    rows = {"step": list(range(1, len(steered) + 1)),
            "steered": [token_text(t["token"]) for t in steered], "p steered": [t["p"] for t in steered],
            "plain": [token_text(t["token"]) for t in plain_tokens], "p plain": [t["p"] for t in plain_tokens],
            "": ["← they part" if i == parted else "" for i in range(len(steered))]}
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(38 + 35 * len(steered), 420),
                 column_config={name: st.column_config.NumberColumn(format="%.4f") for name in ("p steered", "p plain")})


def steering_caption(label: str, strength: float, start: int, settings: str) -> str:
    """What was added where, and with which sampler, as text."""
    return plain(f"{strength:g} × {label}, added from position {start} on (the prompt's positions from there and "
                 f"every new token). Sampler (the settings above): {settings}.")
