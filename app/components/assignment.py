"""Assignments on the page (model.course.assignments): an assignment link opens with what it fixes
shown read-only at the top and a "Start from here" button; every lesson and the explorer have a
button that gives the link of what they show, to copy (st.code's own copy button)."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.model.course.assignments import MARK, MAX_PROMPT, Assignment, from_query
from glassbox.model.engine import GlassboxError

APPLIED = "assignment_applied"  # (session key, value) pairs a link has set in this session
PROMPT_KEY = "lesson_prompt_key"  # the session key of the lesson page's prompt box, if it has one


def current_assignment(target: str) -> Assignment | None:
    """The assignment this page's link holds (None: not an assignment, or a bad one, which
    ``assignment_banner`` reports)."""
    try:
        return from_query(target, st.query_params.to_dict())
    except GlassboxError:
        return None


def assignment_banner(target: str) -> Assignment | None:
    """What an assignment link fixes, read-only, and the button that leaves it for the learner's own."""
    try:
        assignment = from_query(target, st.query_params.to_dict())
    except GlassboxError as exc:
        st.error(plain(f"This assignment link cannot be opened: {exc}"))
        return None
    if assignment is None:
        return None
    with st.container(border=True, key="assignment_banner"):
        left, right = st.columns([4, 1], vertical_alignment="center")
        left.markdown("**Assignment** · " + " · ".join(f"{what}: {plain(value)}" for what, value in assignment.describe()))
        left.caption(
            "Your teacher's link fixes these, so that everyone gets the same numbers. Start from here to "
            "change them (a new exercise set, another prompt)."
        )
        if right.button("Start from here", icon=":material/edit:", key="assignment_start"):
            del st.query_params[MARK]
            st.rerun()
    return assignment


def link_value(key: str, value: str) -> None:
    """Set ``st.session_state[key]`` from a link's value once per session and value (a learner's
    edit afterwards is kept, and a rerun does not undo it)."""
    applied = st.session_state.setdefault(APPLIED, set())
    if (key, value) not in applied:
        applied.add((key, value))
        st.session_state[key] = value


def page_prompt(key: str) -> None:
    """The lesson's prompt box is ``st.session_state[key]``: a link's prompt goes in it once, and
    the page's assignment link carries what it holds."""
    st.session_state[PROMPT_KEY] = key
    if (prompt := st.query_params.get("prompt")) is not None:
        link_value(key, prompt[:MAX_PROMPT])


def page_base() -> str:
    """This server's address as the browser reached it (scheme, host, any base path), without the page."""
    url = urlsplit(st.context.url or "http://localhost:8501/")
    path = url.path.rstrip("/")
    page = st.context.url and path.rsplit("/", 1)[-1]
    base_path = path.rsplit("/", 1)[0] if page and (page == "explore" or page.startswith("course")) else path
    return f"{url.scheme}://{url.netloc}{base_path}"


def assign_button(path: str, query: dict[str, str]) -> None:
    """A popover with this page's assignment link, to copy and hand out."""
    link = f"{page_base()}/{path}?{urlencode({**query, MARK: '1'})}"
    with st.popover("Assign this page", icon=":material/share:"):
        st.caption(
            "A link that opens this page in this state for anyone (the same model, prompt and exercise "
            "seed), read-only until they start from it. Copy it with the button at its right."
        )
        st.code(link, language=None, wrap_lines=True)
