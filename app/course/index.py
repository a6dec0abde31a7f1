"""The course's contents: every lesson, what it answers, in order, ending at the worked example."""

import streamlit as st

from glassbox.model.course import LESSONS

st.title("Course")
st.markdown(
    f"{len(LESSONS)} short lessons on the ideas behind the pass the rest of Glassbox shows. Each one computes its "
    "numbers on the spot, with plain torch or with a real model, and ends where the same thing happens in the "
    "worked example and in the explorer."
)
for number, lesson in enumerate(LESSONS, 1):
    with st.container(border=True):
        st.page_link(lesson.page, label=f"{number}. {lesson.title}", icon=":material/menu_book:")
        st.caption(lesson.question)
st.page_link("screens/worked_example.py", label="Then the whole pass, by hand: the worked example",
             icon=":material/arrow_forward:")
