"""The playground's temperature, top-k, top-p and greedy settings, and the next-token distribution
they give, answered in the page (sampling_controls.js): the logits of the prompt are sent once,
and the browser applies the settings to them exactly as the engine's sampler does and redraws at
once. A slider let go sends the settings back, into ``st.session_state`` (for the URL); the
Generate (or Fill) button, drawn with the sliders, sends the settings it was clicked with, so
what is sampled is what the chart shows."""

from __future__ import annotations

import base64

import streamlit as st
import torch

from glassbox.app.components.labels import token_labels
from glassbox.app.components.page_kit import page_component

SETTINGS = ("temperature", "top_k", "top_p", "greedy")
SAMPLING_LIMITS = {"temperature": (0.05, 2.0), "top_p": (0.01, 1.0)}  # top-k's: 0 to the page's own top_k_max
SHOWN = 15  # the most likely tokens drawn (the settings never reorder them: see ``controls``)

_component = page_component("glassbox_sampling_controls", "sampling_controls.js", "sampling_controls.css")


def _settings_sent(key: str) -> None:
    """A slider let go in the page: its settings become the session's (before the rerun)."""
    _adopt(st.session_state[key].get("settings") or {}, st.session_state.get(key + ":top_k_max", 100))


def _adopt(sent: dict, top_k_max: int) -> None:
    """Settings sent by the page into the session, each checked as a slider would: a value that is
    not a number is ignored, a number is clamped into its range (the message comes from a browser)."""
    for name in SETTINGS:
        if name not in sent:
            continue
        if name == "greedy":
            st.session_state.greedy = sent[name] is True
            continue
        try:
            number = float(sent[name])
        except (TypeError, ValueError, OverflowError):
            continue
        if number != number or number in (float("inf"), float("-inf")):
            continue
        low, high = SAMPLING_LIMITS.get(name, (0, top_k_max))
        number = min(max(number, low), high)
        st.session_state[name] = int(number) if name == "top_k" else number


def _action_sent(key: str) -> None:
    """The button clicked in the page: the settings it was clicked with, kept for the run it starts."""
    st.session_state[key + ":clicked"] = dict(st.session_state[key].get("action") or {})


def payload(
    logits: torch.Tensor,
    pieces: list[str],
    settings: dict,
    top_k_max: int,
    title: str,
    drawn: int | None = None,
    action: str = "Generate",
    blocked: str | None = None,
) -> dict:
    """What the page computes from: the logits most likely first (float64, ties in id order, as the
    sampler's sort keeps them) and the labels of the first SHOWN. Temperature divides every logit
    and top-k and top-p cut the tail, so the order, and the tokens shown, never change. ``drawn``: a
    token id drawn in bold (a filled mask); ``blocked``: why the button is off (no room for a new token), or None."""
    order = torch.argsort(logits.double(), descending=True, stable=True)
    ids = order[:SHOWN].tolist()
    return {
        "logits": base64.b64encode(logits.double()[order].cpu().numpy().astype("<f8").tobytes()).decode("ascii"),
        "ids": ids,
        "labels": token_labels([pieces[i] for i in ids], ids),
        "settings": settings,
        "top_k_max": top_k_max,
        "title": title,
        "drawn": drawn,
        "action": action,
        "blocked": blocked,
    }


def clicked(key: str = "sampling_controls") -> bool:
    """Whether this run was started by the element's Generate (Fill) button; if so, the settings it
    was clicked with become the session's here, after every callback of the run (a slider's own
    message, sent before the click, can be handled after it). Call it once, at the top of the run."""
    sent = st.session_state.pop(key + ":clicked", None)
    if sent is None:
        return False
    _adopt(sent, st.session_state.get(key + ":top_k_max", 100))
    return True


def sampling_controls(
    logits: torch.Tensor,
    pieces: list[str],
    top_k_max: int,
    title: str,
    drawn: int | None = None,
    action: str = "Generate",
    key: str = "sampling_controls",
    blocked: str | None = None,
) -> None:
    """The sliders, the distribution and the ``action`` button, in the page, from ``st.session_state``'s settings."""
    settings = {name: st.session_state[name] for name in SETTINGS}
    st.session_state[key + ":top_k_max"] = top_k_max  # what the page's messages are checked against
    _component(
        data=payload(logits, pieces, settings, top_k_max, title, drawn, action, blocked),
        key=key,
        on_settings_change=lambda: _settings_sent(key),
        on_action_change=lambda: _action_sent(key),
    )
