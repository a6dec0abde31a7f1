"""The playground's last generation, played in the page (generation_player.js): every step's
distribution before and after the settings, its KV cache figures and its link to the explorer are
sent once, so choosing a step (a token's chip or its button) answers at once, with no round trip
(the tab's sessionStorage keeps the step, for reruns and returns). The playground computes and
formats every figure; the script only lays them out."""

from __future__ import annotations

import streamlit as st

from glassbox.app.components.page_kit import katex_module, page_component

EXPLORE_PAGE = "screens/explore.py"

_component = page_component("glassbox_generation_player", "generation_player.js", "generation_player.css")


def generation_player(payload: dict, links: list[dict], key: str = "generation_player") -> None:
    """``payload``: the prompt and every step as the page draws it (the playground's
    ``generation_payload``), ``id`` naming the generation; ``links``: each step's explorer
    settings, followed with ``st.switch_page`` when its link is clicked, so the session (and this
    generation) stays."""
    result = _component(data={**payload, "katex": katex_module()}, key=key, on_explore_change=lambda: None)
    chosen = result.explore  # from a browser: only a step's own link is followed
    if isinstance(chosen, int) and not isinstance(chosen, bool) and 0 <= chosen < len(links):
        st.switch_page(EXPLORE_PAGE, query_params=links[chosen])
