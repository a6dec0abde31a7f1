"""What every session shares, created once per server: the loaded models and the trace cache.
Each is used by many sessions at once, so calls on them leave no state behind."""

from __future__ import annotations

import streamlit as st

from model.io.checkpoint import LoadedModel, load
from model.serving import TraceCache


@st.cache_resource(show_spinner="Loading the model…")
def shared_model(name: str) -> LoadedModel:
    """One model object for every browser session; calls on it leave no state."""
    return load(name)


@st.cache_resource
def trace_cache() -> TraceCache:
    """One cache for every session: a trace depends only on (model, prompt, target, capture)."""
    return TraceCache()
