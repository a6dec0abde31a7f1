"""Traces for many browser sessions at once: how big a trace will be, what to capture when a
full one would not fit, and one bounded cache shared by every session."""

from model.serving.cache import TraceCache
from model.serving.sizing import Needs, capture_plan, full_trace_bytes, trace_bytes, trace_names

__all__ = ["Needs", "TraceCache", "capture_plan", "full_trace_bytes", "trace_bytes", "trace_names"]
