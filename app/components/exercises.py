"""A lesson's exercises on its page: each asks, the learner answers, the page says right or wrong
at once, offers a hint, then the worked solution (model.course.exercises computes all of it from
the seed). The seed lives in the URL (``?seed=``), so a reload, a shared link or a teacher's
assignment gives the same numbers. Progress, the exercises answered right, is kept in the
browser (course_progress.js) and nowhere on the server."""

from __future__ import annotations

import json
import secrets

import streamlit as st

from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain
from glassbox.app.components.page_kit import page_component
from glassbox.app.components.timing import computing
from glassbox.app.resources import shared_model
from glassbox.model.course import COURSE_MODEL, LESSON, LESSONS, Lesson
from glassbox.model.course.exercises import Exercise, check_seed
from glassbox.model.engine import GlassboxError

_progress_component = page_component("glassbox_course_progress", "course_progress.js")
SESSION_SEED = "exercise_seed"  # this session's seed, for every lesson until a link brings another
NEW_SEEDS = 10_000  # a fresh session's seed is drawn below this: short enough to read out to a class


@st.cache_data(max_entries=512, show_spinner="Computing the exercises…")
def lesson_exercises(slug: str, seed: int) -> list[Exercise]:
    """The exercises of a lesson for a seed, shared by every session (forty students on one
    assignment link compute them once)."""
    with computing(f"exercises {slug}"):
        return LESSON[slug].exercises(seed, shared_model(COURSE_MODEL))


def exercise_seed(fixed: int | None = None) -> int:
    """The seed of this page's exercises: an assignment's (``fixed``), else the URL's (a shared
    link), else this session's own, drawn once; written back to the URL so a reload keeps it."""
    if fixed is not None:
        st.session_state[SESSION_SEED] = fixed
    elif (raw := st.query_params.get("seed")) is not None:
        try:
            st.session_state[SESSION_SEED] = check_seed(raw)
        except GlassboxError as exc:
            st.warning(plain(f"{exc}: a new set is drawn instead."))
            st.session_state.setdefault(SESSION_SEED, secrets.randbelow(NEW_SEEDS))
    else:
        st.session_state.setdefault(SESSION_SEED, secrets.randbelow(NEW_SEEDS))
    seed = st.session_state[SESSION_SEED]
    st.query_params["seed"] = str(seed)
    return seed


def browser_progress(key: str, clear: bool = False) -> dict:
    """The progress this browser holds, merged with this session's right answers (sent to it)."""
    records = st.session_state.setdefault("course_right", [])
    _progress_component(data={"records": records, "clear": clear}, key=key, on_progress_change=lambda: None)
    progress = (st.session_state.get(key) or {}).get("progress") or {}
    return progress if isinstance(progress, dict) else {}


def done_keys(progress: dict, slug: str) -> dict:
    lesson = (progress.get("lessons") or {}).get(slug) or {}
    done = lesson.get("done") or {}
    return done if isinstance(done, dict) else {}


def _verdict(slug: str, seed: int, exercise: Exercise, of: int) -> None:
    """The Check button's callback: the answer judged, and a right one recorded for the browser."""
    given = st.session_state.get(f"answer:{slug}:{seed}:{exercise.key}")
    verdict = exercise.check(given)
    st.session_state[f"verdict:{slug}:{seed}:{exercise.key}"] = verdict
    if verdict.right:
        record = {"lesson": slug, "key": exercise.key, "seed": seed, "of": of}
        if record not in st.session_state.setdefault("course_right", []):
            st.session_state.course_right.append(record)


def one_exercise(slug: str, seed: int, number: int, exercise: Exercise, of: int, done: dict) -> None:
    with st.container(border=True, key=f"exercise_{number}"):  # .st-key-exercise_N in the page
        tick = " ✓" if exercise.key in done else ""
        st.markdown(f"**Exercise {number}{tick}.** " + plain(exercise.question))
        answer_key = f"answer:{slug}:{seed}:{exercise.key}"
        with st.form(f"form:{slug}:{seed}:{exercise.key}", border=False, enter_to_submit=True):
            field, button = st.columns([5, 1], vertical_alignment="bottom")
            if exercise.kind == "choice":
                field.radio("Your answer", exercise.choices, index=None, horizontal=True, key=answer_key)
            else:
                unit = f" ({exercise.unit})" if exercise.unit else ""
                field.text_input(
                    f"Your answer{unit}",
                    key=answer_key,
                    max_chars=60,
                    placeholder=f"a number; counts {exercise.tolerance_note()}",
                )
            button.form_submit_button("Check", on_click=_verdict, args=(slug, seed, exercise, of), width="stretch")
        verdict = st.session_state.get(f"verdict:{slug}:{seed}:{exercise.key}")
        if verdict is not None:
            (st.success if verdict.right else st.error)(plain(verdict.message))
        left, right = st.columns(2)
        if exercise.hint:
            left.expander("Hint").markdown(plain(exercise.hint))
        if verdict is not None and exercise.solution:
            right.expander("Worked solution", expanded=verdict.right is False).markdown(plain(exercise.solution))


@fragment
def exercises_section(lesson: Lesson, fixed_seed: int | None = None) -> None:
    """The lesson's exercises, in a fragment: checking an answer reruns this part only."""
    st.subheader("Exercises")
    seed = exercise_seed(fixed_seed)
    try:
        exercises = lesson_exercises(lesson.slug, seed)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    progress = browser_progress("course_progress")
    done = done_keys(progress, lesson.slug)
    top = st.container(horizontal=True, vertical_alignment="center")
    top.caption(
        f"Seed {seed}: the same seed gives the same numbers (this page's link keeps it). "
        f"{len(done)} of {len(exercises)} answered right in this browser."
    )
    if fixed_seed is None and top.button("New set", icon=":material/casino:", key=f"new_set:{lesson.slug}"):
        st.session_state[SESSION_SEED] = (seed + 1 + secrets.randbelow(NEW_SEEDS - 1)) % NEW_SEEDS
        st.query_params["seed"] = str(st.session_state[SESSION_SEED])
        st.rerun(scope="fragment")
    for number, exercise in enumerate(exercises, 1):
        one_exercise(lesson.slug, seed, number, exercise, len(exercises), done)


def progress_report(progress: dict) -> dict:
    """What a learner hands a teacher: per lesson, the exercises answered right, each with its
    seed (`glassbox course LESSON --exercises --seed S` prints the same exercises and answers)."""
    lessons = progress.get("lessons") or {}
    return {
        "glassbox_course_progress": 1,
        "lessons": [
            {
                "lesson": x.slug,
                "title": x.title,
                "exercises": (lessons.get(x.slug) or {}).get("of"),
                "answered_right": done_keys(progress, x.slug),
            }
            for x in LESSONS
            if done_keys(progress, x.slug)
        ],
    }


def progress_download(progress: dict) -> None:
    st.download_button(
        "Download progress (JSON, for a teacher)",
        json.dumps(progress_report(progress), indent=1),
        file_name="glassbox-course-progress.json",
        mime="application/json",
        icon=":material/download:",
        on_click="ignore",
    )
