"""The worked example, step by step: the article's forward pass, backward pass and update,
every grid computed by the engine and every cell's arithmetic, played in the page
(app/components/step_player.py) so that stepping and clicking answer at once."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.step_player import step_player
from glassbox.app.components.worked_example import NAME, article_steps, trained_steps
from glassbox.app.resources import shared_model
from glassbox.app.state import per_training_run
from glassbox.model.worked_example.article import ARTICLE_URL, published
from glassbox.model.worked_example.steps import Step


def current_steps() -> tuple[list[Step], dict]:
    """The article's weights, or (once this session has trained) the choice of them or the trained ones."""
    loaded = shared_model(NAME)
    run = st.session_state.get("training_run")
    if run is None:
        return article_steps(loaded)
    choice = st.radio(
        "Weights",
        ["the article's", f"trained in this session ({run.optimizer}, {run.steps} steps)"],
        horizontal=True,
        key="weights_choice",
        persist_state="session",
    )
    if choice == "the article's":
        return article_steps(loaded)
    return per_training_run("worked_example_steps", lambda run: trained_steps(run, loaded))


st.title("The worked example, step by step")
loaded = shared_model(NAME)
st.caption(
    f"“{' '.join(loaded.tokenizer.pieces[t] for t in published()['config']['input_ids'])}” → "
    f"“{loaded.tokenizer.pieces[published()['config']['target_id']]}”, as in [Large Language Models from "
    f"scratch — Part 2]({ARTICLE_URL}): a model of 8 words, 4 numbers per word, 2 blocks of 2 heads, small enough "
    "to check by hand. Step with ◀ ▶ (or the arrow keys); click any output cell for its arithmetic. Where the "
    "weights come from: Welcome → About."
)
st.caption(
    "Names: each grid has the article's name first, with blocks and heads counted from 1 as the article and "
    "every Glassbox page count them (W_Q(1,2): block 1, head 2), and under it the engine's name, which counts "
    "from 0 as the code does (blocks.0.attn.W_Q[1])."
)
steps, data = current_steps()
asked = st.query_params.get("step")  # the page keeps the address bar current as the reader steps
if asked is not None and asked not in {step.key for step in steps}:
    if st.session_state.get("unknown_step") != asked:  # said once: later reruns still carry the address it came with
        st.warning(
            f"There is no step called “{plain(asked)}”: here is the first step. The list below has every step.",
            icon=":material/info:",
        )
        st.session_state.unknown_step = asked
    asked = steps[0].key
step_player(data, asked)
