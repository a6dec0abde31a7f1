"""◀ Previous, a jump list and Next ▶: the worked example's steps and the explorer's backward steps."""

from __future__ import annotations

import streamlit as st


def stepper(keys: list[str], key: str, label: str, format_func, shortcuts: bool = False, **selectbox_args) -> int:
    """◀ Previous, a jump list and Next ▶ over ``keys``; the current one is ``st.session_state[key]``
    (set it before calling, e.g. from the URL). Returns its index."""
    if st.session_state.get(key) not in keys:
        st.session_state[key] = keys[0]

    def move(offset: int) -> None:
        i = keys.index(st.session_state[key])
        st.session_state[key] = keys[min(max(i + offset, 0), len(keys) - 1)]

    index = keys.index(st.session_state[key])
    left, middle, right = st.columns([1, 5, 1], vertical_alignment="bottom")
    middle.selectbox(label, keys, format_func=format_func, key=key, **selectbox_args)
    keyboard = lambda arrow, symbol: dict(shortcut=arrow, help=f"Keyboard: {symbol}") if shortcuts else {}  # noqa: E731
    left.button(
        "◀ Previous",
        on_click=move,
        args=(-1,),
        disabled=index == 0,
        width="stretch",
        key=key + ":previous",
        **keyboard("Left", "←"),
    )
    right.button(
        "Next ▶",
        on_click=move,
        args=(1,),
        disabled=index == len(keys) - 1,
        width="stretch",
        type="primary",
        key=key + ":next",
        **keyboard("Right", "→"),
    )
    return index
