"""The worked example's steps and the data its page sends, computed once for every session. The
server computes the article's before it answers (``warm``, called by app/main.py), so the page's
first open only sends them."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.step_player import player_payload
from glassbox.core import Model
from glassbox.model.worked_example.article import published
from glassbox.model.worked_example.steps import Step, worked_example_steps

NAME = "worked-example"  # the bundled model of the article's weights


def article_provenance(printed: set[str]):
    return lambda weight: "printed by the article" if weight in printed else "reconstructed"


def payload(steps: list[Step], loaded: Model) -> dict:
    return player_payload(steps, loaded.cfg.n_layers, loaded.tokenizer.pieces)


@st.cache_resource(show_spinner=False)  # no spinner: the server computes it before its first visitor
def article_steps(_loaded: Model) -> tuple[list[Step], dict]:
    """The article's weights (``_loaded``, the shared worked-example model): the steps, and the page's data."""
    provenance = article_provenance(set(_loaded.about.get("printed_weights", [])))
    steps = worked_example_steps(_loaded.model, _loaded.tokenizer, published(), provenance)
    return steps, payload(steps, _loaded)


def trained_steps(run, loaded: Model) -> tuple[list[Step], dict]:
    """The steps of a session's trained weights (``run.model``)."""
    steps = worked_example_steps(run.model, loaded.tokenizer, published(), lambda weight: "trained")
    return steps, payload(steps, loaded)


def warm() -> None:
    """The article's steps and page data, computed in the server's process before any session asks
    (0.3 s on 2 cores, the worked example's first open otherwise waits on it)."""
    from glassbox.app.resources import model_cache

    article_steps(model_cache().model(NAME))
