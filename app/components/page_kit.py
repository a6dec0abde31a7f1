"""The in-page components' common part: their scripts start with page_kit.js (text-only elements,
KaTeX), and KaTeX is Streamlit's own ES module, served by every Streamlit server."""

from __future__ import annotations

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
