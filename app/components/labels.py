"""How numbers and names are written on screen, and the colours every chart uses."""

from __future__ import annotations

import re

DIVERGING = "RdBu_r"  # blue below 0, white at 0, red above
HIGHLIGHT = "#f2a900"


def bar_label(p: float) -> str:
    """A probability bar's value, left off below 0.001 where it would only clutter."""
    return f"{float(p):.3f}" if float(p) >= 0.001 else ""


def pretty(label: str) -> str:
    """Article names for people: dL/dX(2) -> ∂L/∂X(2)."""
    return label.replace("dL/d", "∂L/∂")


_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+!|~$:])")


def plain(text: object) -> str:
    """User text (a prompt's tokens, a path, an error message that quotes them) for st.markdown,
    st.error and the like: every character Markdown, LaTeX or an emoji code would act on is
    escaped, so it shows as typed."""
    return _MARKDOWN.sub(r"\\\1", str(text))
