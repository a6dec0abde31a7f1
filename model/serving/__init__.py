"""Model passes for many browser sessions at once: what a trace will hold and cost, what to
capture when a full one would not fit, admission against a memory budget; and bounded caches
of traces and of loaded models shared by every session."""

from glassbox.model.serving.admission import Admission
from glassbox.model.serving.cache import BoundedCache, TraceCache
from glassbox.model.serving.models import ModelCache
from glassbox.model.serving.sizing import (
    Needs,
    capture_plan,
    check_budget,
    full_trace_bytes,
    held_bytes,
    trace_bytes,
    trace_cost,
    trace_names,
    working_bytes,
)

__all__ = [
    "Admission",
    "BoundedCache",
    "ModelCache",
    "Needs",
    "TraceCache",
    "capture_plan",
    "check_budget",
    "full_trace_bytes",
    "held_bytes",
    "trace_bytes",
    "trace_cost",
    "trace_names",
    "working_bytes",
]
