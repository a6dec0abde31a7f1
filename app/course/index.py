"""The course's contents: every lesson, what it answers, in order, ending at the worked example; and
the learner's progress, kept in this browser (the exercises answered right), to download for a teacher."""

import streamlit as st

from glassbox.app.components.errors import fragment
from glassbox.app.components.exercises import browser_progress, done_keys, progress_download
from glassbox.model.course import LESSONS

st.title("Course")
st.markdown(
    f"{len(LESSONS)} short lessons on the ideas behind the pass the rest of Glassbox shows. Each one computes its "
    "numbers on the spot, with plain torch or with a real model, ends with exercises the page checks, and leads to "
    "where the same thing happens in the worked example and in the explorer."
)


@fragment
def contents() -> None:
    progress = browser_progress("course_progress")
    started = [lesson for lesson in LESSONS if done_keys(progress, lesson.slug)]
    top = st.container(horizontal=True, vertical_alignment="center")
    top.caption(
        f"Your progress, kept in this browser only: exercises answered right in {len(started)} of {len(LESSONS)} lessons."
    )
    if started:
        with top:
            progress_download(progress)
    for number, lesson in enumerate(LESSONS, 1):
        with st.container(border=True):
            left, right = st.columns([5, 1], vertical_alignment="center")
            left.page_link(lesson.page, label=f"{number}. {lesson.title}", icon=":material/menu_book:")
            left.caption(lesson.question)
            done = done_keys(progress, lesson.slug)
            of = ((progress.get("lessons") or {}).get(lesson.slug) or {}).get("of")
            if done:
                right.markdown(f":green[✓ {len(done)} of {of or '?'}] exercises")
            else:
                right.caption("not started")


contents()
st.page_link(
    "screens/worked_example.py", label="Then the whole pass, by hand: the worked example", icon=":material/arrow_forward:"
)
