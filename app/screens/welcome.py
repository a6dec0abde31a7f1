"""The landing page: what Glassbox is, a drawing of the transformer whose parts lead to the pages
that show them, a path for a first visit, and where the worked example comes from."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.architecture import PART, architecture_figure
from glassbox.app.components.charts import show
from glassbox.app.components.course import lessons_about
from glassbox.app.components.labels import plain
from glassbox.app.resources import shared_model
from glassbox.app.state import show_url_notes, url_settings
from glassbox.model.course import LESSONS
from glassbox.model.worked_example.article import ARTICLE_URL, SERIES_URL

url_settings({"part": "attention"}, choices={"part": list(PART)}, prefix="welcome_")


def lesson_list() -> str:
    """Every lesson's title, as a phrase (“attention by hand, why divide by √d_k, …”)."""
    return ", ".join(lesson.title[0].lower() + lesson.title[1:] for lesson in LESSONS)


def select_part() -> None:
    points = st.session_state.welcome_drawing.selection.points
    if points:
        st.session_state.welcome_part = points[0]["customdata"]


st.title("Glassbox")
show_url_notes("welcome_")
st.markdown(
    "Glassbox shows how a GPT-style transformer computes the next token: the text's tokens, every block's "
    "tensors, the probabilities it ends in. It then runs the pass backwards, giving the gradient of every "
    "tensor and weight, and takes one training step. Every number is computed by the model in front of you, "
    "so you can check any of them by hand."
)

worked = shared_model("worked-example")
st.markdown("**Click a part of the model** to see what it does and where to look at it.")
show(
    architecture_figure(worked.cfg.n_layers, st.session_state.welcome_part),
    key="welcome_drawing",
    on_select=select_part,
    selection_mode="points",
    config={"displayModeBar": False},
)
part = PART[st.session_state.welcome_part]
st.query_params["part"] = part.key
with st.container(border=True):
    st.markdown(f"**{part.title}.** {part.sentence}")
    links = st.columns(3 if part.playground else 2)
    links[0].page_link(
        "screens/worked_example.py",
        label="By hand, in the worked example",
        icon=":material/school:",
        query_params={"step": part.step},
    )
    links[1].page_link(
        "screens/explore.py",
        label=f"Any prompt: the explorer's {part.view} view",
        icon=":material/search:",
        query_params={"view": part.view},
    )
    if part.playground:
        links[2].page_link("screens/playground.py", label="Sample from it: the playground", icon=":material/chat:")
    lessons_about(list(part.lessons))

st.subheader("A first visit")
st.markdown(
    "1. **Worked example** (about 20 minutes): a model small enough to check by hand, 8 words, 4 numbers per "
    "word, 2 blocks of 2 heads, reads “the cat sat on the” and predicts “mat”. Step through the forward pass, "
    "the backward pass and the update; click any cell to see its arithmetic.\n"
    "2. **Playground**: a small model trained on children's stories continues your text. Change the "
    "temperature, top-k and top-p and watch the distribution it samples from change.\n"
    "3. **Explore a prompt**: any prompt on any model, including GPT-2 and the other families it loads. "
    "Every tensor of the forward pass and every gradient of the backward pass.\n"
    "4. **Train it live**: train the worked example's model yourself and watch the loss fall.\n"
    f"5. **Course**: {len(LESSONS)} short lessons on the ideas behind the pass ({lesson_list()}), each "
    "computing its numbers as you change them. New to transformers? Start here; the last lesson leads to the "
    "worked example.\n"
    "6. **Lab**: watch induction heads form, a model grok modular addition, features pack into superposition "
    "and a sparse autoencoder find them, each beside the paper's own numbers."
)
first, second = st.columns(2)
first.page_link("screens/worked_example.py", label="Start with the worked example", icon=":material/arrow_forward:")
second.page_link("course/index.py", label="Or start with the course", icon=":material/menu_book:")

with st.expander("About"):
    st.markdown(
        f"The worked example is the one in [Large Language Models from scratch — Part 2]({ARTICLE_URL}) (the series: "
        f"[LLMs from scratch]({SERIES_URL}) on Dimensionality Reduction). The weights the article prints are used "
        f"exactly ({plain(', '.join(worked.about.get('printed_weights', [])))}); the others were "
        f"{plain(worked.about.get('reconstructed_weights', ''))}."
    )
    default = shared_model("default")
    st.markdown(f"The playground's default model was {plain(default.about.get('source', ''))}.")
    st.markdown(
        "Start the app with `glassbox app`; the README lists every command, the models it opens and how "
        "each number is checked against an independent reference."
    )
