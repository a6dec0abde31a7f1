"""Per-user page state that lives in the URL, so that a setup can be shared; and what is derived
from this session's training run, kept beside it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import streamlit as st

from glassbox.app.components.labels import plain

T = TypeVar("T")


# Settings that hold a block's or a head's index: the URL counts them from 1, as the pages do
# ("block 1 (blocks.0)"), while the session holds the engine's index.
COUNTED_FROM_ONE = {"block", "head"}


def _shown(name: str, value):
    return value + 1 if name in COUNTED_FROM_ONE else value


def read_url_settings(defaults: dict, limits: dict | None = None, choices: dict | None = None, prefix: str = "") -> None:
    """Settings that live in the URL, so a setup can be shared. Each query parameter ``name``
    backs the session state key ``prefix + name`` (pages that share parameter names keep
    their own state). A setting is read from the query string on a page's first run, and
    whenever the URL holds a value this session did not write there (a link followed within the
    app, an address typed): a bad value falls back to its default, a number is clamped into
    ``limits``. Otherwise a run keeps what the session holds. ``write_url_settings`` writes the values back. A block or a head
    (``COUNTED_FROM_ONE``) is counted from 1 in the URL and in what a note says, from 0 in
    ``defaults``, ``limits`` and the session."""
    limits, choices = limits or {}, choices or {}
    for name, default in defaults.items():
        key = prefix + name
        if key in st.session_state and not followed_link(name, prefix):
            continue
        raw, value = st.query_params.get(name), default
        if raw is not None:
            try:
                value = (
                    raw.lower() in ("1", "true")
                    if isinstance(default, bool)
                    else type(default)(float(raw) if isinstance(default, int) else raw)
                )
            except (ValueError, OverflowError):  # "abc", "inf", "1e309"
                value = default
                _note(prefix, f"The link's {name}={raw} is not a number: using {_shown(name, default)}.")
            else:
                if name in COUNTED_FROM_ONE:
                    value -= 1
        if name in limits:
            low, high = limits[name]
            clamped = min(max(value, low), high)
            if clamped != value:
                _note(
                    prefix,
                    f"The link's {name}={raw} is outside {_shown(name, low)}–{_shown(name, high)}: "
                    f"using {_shown(name, clamped)}.",
                )
            value = clamped
        if name in choices and value not in choices[name]:
            _note(prefix, f"The link's {name}={raw} is not one of the choices: using {default}.")
            value = default
        st.session_state[key] = value


def followed_link(name: str, prefix: str = "") -> str | None:
    """The URL's value for ``name`` where this session did not write it there (``set_url``): a link
    followed or an address typed, which must win over what the session remembers. None otherwise."""
    raw = st.query_params.get(name)
    return raw if raw is not None and raw != st.session_state.get(prefix + "url_written", {}).get(name) else None


def set_url(values: dict[str, str], prefix: str = "") -> None:
    """Write these query parameters, remembering them as this session's own (see ``followed_link``)."""
    st.query_params.update(values)
    st.session_state.setdefault(prefix + "url_written", {}).update(values)


def _note(prefix: str, message: str) -> None:
    st.session_state.setdefault(prefix + "url_notes", []).append(message)


def show_url_notes(prefix: str = "") -> None:
    """Say once what ``read_url_settings`` changed in a shared link (a bad or out-of-range value)."""
    for message in st.session_state.pop(prefix + "url_notes", []):
        st.info(plain(message), icon=":material/link:")


def write_url_settings(names: Iterable[str], prefix: str = "") -> None:
    """The current values of these settings into the URL: call it where a run (or a fragment's
    rerun) has its final values."""
    set_url({name: str(_shown(name, st.session_state[prefix + name])) for name in names}, prefix)


def url_settings(defaults: dict, limits: dict | None = None, choices: dict | None = None, prefix: str = "") -> None:
    """``read_url_settings``, then write them back at once."""
    read_url_settings(defaults, limits, choices, prefix)
    write_url_settings(defaults, prefix)


def per_training_run(name: str, build: Callable[[object], T]) -> T | None:
    """``build(run)`` for this session's training run, kept in the session beside it: rebuilt
    only when a new run replaces it (compared by identity). None while there is no run."""
    run = st.session_state.get("training_run")
    if run is None:
        return None
    cached = st.session_state.get("derived:" + name)
    if cached is None or cached[0] is not run:
        cached = (run, build(run))
        st.session_state["derived:" + name] = cached
    return cached[1]
