"""The one place where a lesson that lets the learner type a prompt for the course's model says
what that model knows, offers prompts it handles (sentences of its own corpus, held out from
training, that it predicts well) and warns when a prompt lies far outside what it was trained on.
The measures are the engine's (model/course/prompt_fit.py)."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.assignment import page_prompt
from glassbox.app.components.labels import plain
from glassbox.model.course.prompt_fit import (
    FAR_PERCENTILE,
    FAR_SPLIT,
    HELD_OUT,
    Fit,
    Typical,
    fit,
    pieces_of,
    shipped_or_measured,
)
from glassbox.model.data.stories import ADJECTIVES, ANIMALS, NAMES, OBJECTS, PLACES
from glassbox.model.engine import GlassboxError
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.labels import token_text


@st.cache_resource(max_entries=4, show_spinner="Scoring the corpus's held-out sentences…")
def reference(_loaded: LoadedModel, name: str, corpus_of: tuple[int, int] | None = None, held_out: int = HELD_OUT) -> Typical:
    """The held-out sentences' losses on the model ``name`` (the cache's key): shipped for the
    bundled models, measured for any other."""
    return shipped_or_measured(_loaded, name, corpus_of, held_out)


@st.cache_data(max_entries=64, show_spinner=False)
def measured(prompt: str, _loaded: LoadedModel, name: str) -> Fit:
    return fit(_loaded, prompt)


def _use(key: str, text: str) -> None:
    st.session_state[key] = text


def knows(
    loaded: LoadedModel, key: str, name: str = "default", corpus_of: tuple[int, int] | None = None, held_out: int = HELD_OUT
) -> None:
    """What the model knows, and buttons that put one of its corpus's sentences in the box ``key``
    (call it before the box is drawn; the box takes its value from the session state). ``name``,
    ``corpus_of`` and ``held_out``: as ``reference`` (the course's model by default). A link's
    ``?prompt=`` (an assignment's) is put in the box once."""
    page_prompt(key)
    ref = reference(loaded, name, corpus_of, held_out)
    tokens = (loaded.about or {}).get("card", {}).get("corpus", {}).get("tokens")
    which = "The course's model" if name == "default" else "This model"
    st.markdown(
        f"**What this model knows.** {which} learned a vocabulary of {loaded.cfg.vocab_size:,} tokens from "
        f"{ref.stories:,} short stories generated for it"
        + (f" ({tokens:,} tokens)" if tokens else "")
        + f": {len(NAMES)} names ({', '.join(list(NAMES)[:2])}, {list(NAMES)[5]}…), {len(ANIMALS)} animals, "
        f"{len(PLACES)} places, {len(OBJECTS)} toys and things, {len(ADJECTIVES)} adjectives, in the sentences of a "
        "small grammar. Ordinary English is mostly new to it: words it never saw are cut into pieces, and it predicts "
        "them badly. Sentences of its own corpus work best, for example:"
    )
    offered = ref.offered()
    columns = st.columns(2) * ((len(offered) + 1) // 2)
    for i, (column, sentence) in enumerate(zip(columns, offered)):
        column.button(
            plain(sentence),
            key=f"{key}_offer_{i}",
            on_click=_use,
            args=(key, sentence),
            width="stretch",
            help="Put this sentence in the box",
        )


def prompt_box(loaded: LoadedModel, key: str, default: str, label: str = "Prompt", max_chars: int = 300) -> str:
    """A lesson's prompt box on the course's model, ``default`` in it at first, with ``knows`` above it."""
    st.session_state.setdefault(key, default)
    knows(loaded, key)  # what the course's model knows, and sentences of its corpus to try
    return st.text_input(label, max_chars=max_chars, key=key)


def fit_note(
    loaded: LoadedModel, prompt: str, name: str = "default", corpus_of: tuple[int, int] | None = None, held_out: int = HELD_OUT
) -> None:
    """Under the box: how far the prompt lies from the corpus, as a caption, or a warning when far."""
    try:
        seen = measured(prompt, loaded, name)
    except GlassboxError:
        return  # the lesson shows the error itself
    ref = reference(loaded, name, corpus_of, held_out)
    parts = []
    if seen.split:
        cut = "; ".join(
            f"“{plain(w.strip())}” as " + " + ".join(plain(token_text(loaded.pieces[i])) for i in pieces_of(loaded, w))
            for w in seen.split[:4]
        )
        more = f" and {len(seen.split) - 4} more" if len(seen.split) > 4 else ""
        verb = "is" if len(seen.split) == 1 else "are"
        parts.append(
            f"{len(seen.split)} of its {len(seen.words)} words {verb} not in the vocabulary whole "
            f"({cut}{more}; in the corpus's own sentences: {ref.split_share:.0%})"
        )
    else:
        parts.append(f"all {len(seen.words)} of its words are in the vocabulary whole")
    if seen.loss is not None:
        parts.append(
            f"it costs the model {seen.loss:.2f} nats a token from the second prediction on, and "
            f"{ref.rank(seen.loss):.0%} of the corpus's own held-out sentences, scored the same way, cost "
            f"less (their median: {ref.median:.2f})"
        )
    text = "This prompt: " + "; ".join(parts) + "."
    if seen.far(ref):
        st.warning(
            plain(
                text + f" That is far outside what the model was trained on (more than {FAR_SPLIT:.0%} of "
                f"the words cut, or a loss above the corpus's {FAR_PERCENTILE:g}th percentile, "
                f"{ref.far_loss:.2f}): read what follows as the model meeting text it never saw."
            ),
            icon=":material/warning:",
        )
    else:
        st.caption(text)
