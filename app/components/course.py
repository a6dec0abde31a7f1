"""What every lesson page shares: its heading, its end (where the same thing happens in a real
model, and the next lesson), the bundled model lessons run on with each pass admitted, and the
links that explorer views and worked-example steps give to the lessons that explain them."""

from __future__ import annotations

from contextlib import AbstractContextManager

import streamlit as st

from glassbox.app.components.assignment import PROMPT_KEY, assign_button, assignment_banner, current_assignment
from glassbox.app.components.exercises import SESSION_SEED, exercises_section
from glassbox.app.resources import admitted_pass, shared_model
from glassbox.model.course import COURSE_MODEL, LESSON, LESSONS, Lesson
from glassbox.model.io.checkpoint import LoadedModel


def lesson_page(slug: str) -> Lesson:
    """The page's title and the question it answers; returns its lesson."""
    lesson = LESSON[slug]
    number = LESSONS.index(lesson) + 1
    st.session_state.pop(PROMPT_KEY, None)  # set again by this page's prompt box, if it has one
    st.title(f"{number}. {lesson.title}")
    st.caption(f"Course, lesson {number} of {len(LESSONS)}: {lesson.question}")
    assignment_banner(slug)
    return lesson


def course_model() -> LoadedModel:
    return shared_model(COURSE_MODEL)


def lesson_pass(
    what: str, loaded: LoadedModel, n_tokens: int, backward: bool = False, passes: int = 1
) -> AbstractContextManager[None]:
    """A lesson's model passes (``passes`` of them, one after the other, each on ``n_tokens``),
    admitted like every other page's (``admitted_pass``)."""
    return admitted_pass(what, loaded, n_tokens, backward, passes)


def lesson_end(lesson: Lesson, models: tuple[tuple[str, str, str], ...] = ()) -> None:
    """Where the same thing happens in a real model, then the way on: the next lesson, or, after
    the last, the worked example. ``models``: more explorer links, (label, model, prompt) each,
    opening the lesson's view on that model. Before them, the lesson's exercises."""
    assignment = current_assignment(lesson.slug)
    st.divider()
    exercises_section(lesson, assignment.seed if assignment else None)
    lesson_link(lesson)
    st.divider()
    st.markdown("**See it in a real model**")
    left, right = st.columns(2)
    left.page_link(
        "screens/worked_example.py",
        label="In the worked example, by hand",
        icon=":material/school:",
        query_params={"step": lesson.step},
    )
    right.page_link(
        "screens/explore.py",
        label=f"On any prompt: the explorer's {lesson.view} view",
        icon=":material/search:",
        query_params={"view": lesson.view},
    )
    row = st.container(horizontal=True, wrap=True, gap="medium")
    for label, model, prompt in models:
        row.page_link(
            "screens/explore.py",
            label=label,
            icon=":material/search:",
            query_params={"view": lesson.view, "model": model, "prompt": prompt},
        )
    index = LESSONS.index(lesson)
    if index + 1 < len(LESSONS):
        after = LESSONS[index + 1]
        st.page_link(after.page, label=f"Next lesson: {after.title}", icon=":material/arrow_forward:")
    else:
        st.page_link("screens/worked_example.py", label="Now the whole pass: the worked example", icon=":material/arrow_forward:")
    st.page_link("course/index.py", label="All lessons", icon=":material/list:")


def lesson_link(lesson: Lesson) -> None:
    """The button that gives this lesson's assignment link: its model, its prompt box's text and the
    exercises' seed."""
    query = {"model": COURSE_MODEL}
    if (key := st.session_state.get(PROMPT_KEY)) and isinstance(st.session_state.get(key), str):
        query["prompt"] = st.session_state[key]
    if SESSION_SEED in st.session_state:
        query["seed"] = str(st.session_state[SESSION_SEED])
    assign_button(lesson.url_path, query)


def lessons_about(slugs: list[str], where=st) -> None:
    """Links to the lessons that explain what a view or a step shows."""
    if slugs:
        where.caption("The idea, in the course:")
        row = where.container(horizontal=True, wrap=True, gap="medium")  # each link as wide as its title, wrapping
        for slug in slugs:
            row.page_link(
                LESSON[slug].page, label=f"{LESSONS.index(LESSON[slug]) + 1}. {LESSON[slug].title}", icon=":material/menu_book:"
            )
