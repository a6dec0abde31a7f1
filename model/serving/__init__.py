"""Traces for many browser sessions at once: how big a trace will be, what to capture when a
full one would not fit; and bounded caches of traces and of loaded models shared by every session."""

from model.serving.admission import WORKING_FACTOR, Admission
from model.serving.cache import BoundedCache, TraceCache
from model.serving.models import ModelCache
from model.serving.sizing import Needs, capture_plan, full_trace_bytes, trace_bytes, trace_names

__all__ = ["WORKING_FACTOR", "Admission", "BoundedCache", "ModelCache", "Needs", "TraceCache", "capture_plan", "full_trace_bytes", "trace_bytes", "trace_names"]
