"""The in-page components' common part: their scripts start with page_kit.js (text-only elements,
KaTeX), and KaTeX is Streamlit's own ES module, served by every Streamlit server."""

from __future__ import annotations

import uuid
from functools import cache
from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent


@cache
def katex_module() -> str:
    """Streamlit's own KaTeX, an ES module it serves (static/js/katex.<hash>.js): the page's path to it."""
    (module,) = (Path(st.__file__).parent / "static" / "static" / "js").glob("katex.*.js")
    return "static/js/" + module.name


def page_component(name: str, script: str, css: str = ""):
    """A components-v2 element whose script (``script``, beside this file) can use page_kit.js;
    ``css`` (a file beside this one) styles it, after page_kit.css, within the page (not isolated: KaTeX's own
    styles apply)."""
    js = (HERE / "page_kit.js").read_text() + "\n" + (HERE / script).read_text()
    styles = (HERE / "page_kit.css").read_text() + ("\n" + (HERE / css).read_text() if css else "")
    return st.components.v2.component(name, js=js, css=styles, isolate_styles=False)


def anchored(anchor_key: str, page_key: str, element_id: str, current: dict) -> dict:
    """The choice an in-page element is sent with, ``{"id", "pick", "chosen"}``: the server's last
    own choice. The page's choices (kept under ``page_key`` by the element's callback), echoed by
    the reruns they cause, leave the element unchanged, so Streamlit sends the browser a reference
    to the megabytes it already has instead of sending them again. A ``current`` choice that is not
    what the page shows now (a link, a choice of the server's own) is sent with a new pick, which
    the page takes over its own."""
    anchor = st.session_state.get(anchor_key)
    shown = st.session_state.get(page_key) or (anchor and anchor["chosen"])
    if anchor is None or anchor["id"] != element_id or current != shown:
        anchor = st.session_state[anchor_key] = {"id": element_id, "pick": uuid.uuid4().hex[:12], "chosen": current}
        st.session_state.pop(page_key, None)
    return anchor
