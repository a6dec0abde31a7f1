"""The explorer's backward steps, played in the page (backward_player.js): ◀ ▶ and the step list
change the step there, and the step's gradients are drawn on canvases from what the page has: the
step the element was sent, or one it fetches itself from the server's route (app/served.py;
app/explore/backward_sent.py builds both). The page sends its step back once drawn (for the URL and
the server's part below: the head, the zoom, each weight's check and a cell's arithmetic), and a
click on a cell of an exact map sends that cell. A step the page could not fetch (its trace gone,
or a large model's trace of another block) is the server's to send, with a new ``pick``."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from glassbox.app.components.page_kit import anchored, page_component

ANCHOR = "backward_sent_choice"  # the step sent with the element: the server's last own choice
PAGE_CHOICE = "backward_page_choice"  # the page's last step, as it sent it

_component = page_component("glassbox_backward_player", "backward_player.js", "backward_player.css")


def backward_player(
    keys: list[str],
    titles: list[str],
    step: Callable[[int], dict],
    element_id: str,
    chosen: int,
    on_step: Callable[[int], None],
    on_cell: Callable[[int, str, int, int], None],
    fetch: str | None,
    palette: list,
    element_key: str = "backward_player",
) -> None:
    """Steps ``keys`` named ``titles``, opening on ``chosen`` (the session's), whose payload ``step(i)``
    gives (``step_payload``: sent for the step the element opens on); ``fetch``: the address where
    the page fetches any other (None: every other is the server's to send); ``element_id`` names
    what is sent (a new one redraws). ``on_step(i)`` and ``on_cell(i, name, row, column)`` (a cell of
    step ``i``'s map ``name``): called
    (before the rerun) with the page's choice, checked."""
    n = len(titles)

    def current(value) -> dict:
        """A message from the page, where it is for the element the server sent last (a late one,
        for an element since replaced, is dropped); else {}."""
        anchor = st.session_state.get(ANCHOR) or {}
        ours = isinstance(value, dict) and value.get("id") == anchor.get("id") and value.get("pick") == anchor.get("pick")
        return value if ours else {}

    def step_sent() -> None:
        sent = current(st.session_state[element_key].get("chosen"))
        index = sent.get("step")
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < n:  # from a browser: one that exists
            if sent.get("unfetched"):  # a step the page could not fetch: the server's to send (a new pick)
                st.session_state.pop(PAGE_CHOICE, None)
            else:
                st.session_state[PAGE_CHOICE] = {"step": index}
            on_step(index)

    def cell_sent() -> None:
        cell = current(st.session_state[element_key].get("cell"))
        index, name, row, col = cell.get("step"), cell.get("name"), cell.get("row"), cell.get("col")
        whole = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (index, row, col))
        if isinstance(name, str) and whole and index < n:
            # the step the page showed (its step message may be handled after this one, in the same rerun)
            on_cell(index, name, row, col)  # the callee checks the name and the bounds against its tensor

    anchor = anchored(ANCHOR, PAGE_CHOICE, element_id, {"step": chosen})
    _component(
        data={
            "id": element_id,
            "keys": keys,
            "titles": titles,
            "step": step(anchor["chosen"]["step"]),
            "chosen": anchor["chosen"]["step"],
            "pick": anchor["pick"],
            "url": fetch,
            "palette": palette,
        },
        key=element_key,
        on_chosen_change=step_sent,
        on_cell_change=cell_sent,
    )
