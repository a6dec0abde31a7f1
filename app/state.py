"""Per-user page state that lives in the URL, so that a setup can be shared."""

from __future__ import annotations

import streamlit as st


def url_settings(defaults: dict, limits: dict | None = None, choices: dict | None = None, prefix: str = "") -> None:
    """Settings that live in the URL, so a setup can be shared. Each query parameter ``name``
    backs the session state key ``prefix + name`` (pages that share parameter names keep
    their own state). On a page's first run a setting is read from the query string (a bad
    value falls back to its default, a number is clamped into ``limits``); every run writes
    the current values back."""
    limits, choices = limits or {}, choices or {}
    for name, default in defaults.items():
        key = prefix + name
        if key in st.session_state:
            continue
        raw, value = st.query_params.get(name), default
        if raw is not None:
            try:
                value = (raw.lower() in ("1", "true") if isinstance(default, bool) else type(default)(
                    float(raw) if isinstance(default, int) else raw))
            except ValueError:
                value = default
        if name in limits:
            low, high = limits[name]
            value = min(max(value, low), high)
        if name in choices and value not in choices[name]:
            value = default
        st.session_state[key] = value
    st.query_params.update({name: str(st.session_state[prefix + name]) for name in defaults})
