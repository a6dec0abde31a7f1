"""A long computation on a page (path patching, the head catalog, integrated gradients,
patching, training): its estimate checked against the server's limit before it starts, run on
the server's long lane (model/serving/lane.py: a bounded pool at the lowest CPU priority, one
computation at a time per visitor), with a progress bar and a Cancel button. Leaving the page,
a rerun that makes it stale, or Cancel stops it within one pass: the bar's updates are where
Streamlit tells a page it has gone (StopException, RerunException), and the lane then cancels
the computation (model/engine/work.py).

Results that depend only on the model and the inputs are shared by every visitor
(``shared=True``): computed once, kept in a bounded cache, and a visitor asking while another
computes it waits for that one."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from typing import TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from glassbox.app.components.labels import plain
from glassbox.app.resources import long_lane, model_pass, pass_clock, same_request_waits, shared_results
from glassbox.model.analysis.plans import Plan
from glassbox.model.engine import GlassboxError
from glassbox.model.engine.work import Work
from glassbox.model.serving.lane import minutes

V = TypeVar("V")
CANCELLED = "long_task:cancelled"  # the request this session cancelled, until it asks to run it again
CANCELLED_NOTE = "long_task:cancelled_note"  # what a button-started computation was, once cancelled


class CancelPressed(Exception):
    """The page's Cancel button was pressed while the computation ran."""


def _cancel_pressed(button_key: str) -> bool:
    """Whether a rerun waiting for this run was asked by a press of the button ``button_key``.
    Inside a fragment a press does not stop the running fragment (Streamlit queues a fragment's
    rerun behind it), so the pending request's widget states are read here: Streamlit's own
    request object, read only (its ids end with the widget's key)."""
    ctx = get_script_run_ctx()
    states = getattr(getattr(getattr(ctx, "script_requests", None), "_rerun_data", None), "widget_states", None)
    return states is not None and any(w.id.endswith(button_key) and w.trigger_value for w in states.widgets)


def _request_id(key: Hashable) -> str:
    return hashlib.sha1(repr(key).encode()).hexdigest()


def estimate(model, plan: Plan) -> float:
    """Seconds ``plan`` takes on this server (compute.py's PassClock, measured on ``model``, the
    Transformer that runs it or one of its shape)."""
    return pass_clock().seconds(model, plan)


def limit_note(model, plan: Plan, at: str | None = None) -> str:
    """“About 12 s on this server (96 passes); a computation may take at most 2.0 min here.”,
    beside a setting that sets the work; ``at``: the setting it is for (“600 steps, the most”)."""
    note = (
        f"about {minutes(estimate(model, plan))} on this server ({plan.passes:,} passes); a computation may take "
        f"at most {minutes(long_lane().max_seconds)} here."
    )
    return f"At {at}: {note}" if at else note[0].upper() + note[1:]


def long_computation(
    what: str,
    key: Hashable,
    plan: Plan,
    model,
    compute: Callable[[], V],
    memory: int = 0,
    shared: bool = True,
    seconds: float | None = None,
) -> V | None:
    """``compute()`` (``plan``'s passes of ``model``, or of a model of its shape, ``memory`` bytes admitted against the trace
    budget) as a long computation; None when this visitor cancelled it (the page says so, with
    a button to run it again) or could not run it (the page says why). ``key``: what the result depends on, with ``shared`` the key of
    the result every visitor shares. ``seconds``: the estimate, where the pass clock cannot make one
    (a lab run that trains a model of its own: its shipped run's measured time). A GlassboxError when it is over the time limit (with its
    estimate), or this visitor already runs one."""
    request = _request_id((what, key))
    if not shared:  # started by a button: pressing it again runs it again
        st.session_state.pop(CANCELLED, None)
    elif st.session_state.get(CANCELLED) == request:
        st.info(plain(f"{what}: cancelled."), icon=":material/cancel:")
        st.button("Run it again", key=f"long_task:again:{request}", on_click=st.session_state.pop, args=(CANCELLED,))
        return None
    try:
        if not shared:
            return _on_lane(what, request, plan, model, compute, memory, seconds)
        with same_request_waits(what.lower()) as waiting:
            return shared_results().get(
                (what, key), lambda: _on_lane(what, request, plan, model, compute, memory, seconds), waiting
            )
    except CancelPressed:  # the rerun the press asked for follows, and says so (the button's callback)
        st.info(plain(f"{what}: cancelled."), icon=":material/cancel:")
        return None
    except GlassboxError as exc:  # over the time limit, one already running, stopped past it, the model's own
        st.error(plain(exc))
        return None


def _cancel(request: str, what: str) -> None:
    """The Cancel button's click: noted before the rerun it causes, which stops the computation."""
    st.session_state[CANCELLED], st.session_state[CANCELLED_NOTE] = request, what


def cancelled_note() -> None:
    """Where a button starts a computation: say once that the last one was cancelled."""
    what = st.session_state.pop(CANCELLED_NOTE, None)
    if what is not None:
        st.info(plain(f"{what}: cancelled."), icon=":material/cancel:")


def _on_lane(
    what: str, request: str, plan: Plan, model, compute: Callable[[], V], memory: int, seconds: float | None = None
) -> V:
    seconds = estimate(model, plan) if seconds is None else seconds
    lane = long_lane()
    lane.check(what, seconds)  # before anything is drawn
    slot, cancel_key = st.empty(), f"long_task:cancel:{request}"
    with slot.container():
        bar = st.progress(0.0, text=plain(f"{what}: about {minutes(seconds)} ({plan.passes:,} passes)…"))
        st.button("Cancel", key=cancel_key, on_click=_cancel, args=(request, what), help="Stops it at its next pass")

    def waiting(ahead: int, waited: float, limit: float) -> None:
        bar.progress(
            0.0,
            text=plain(
                f"{what}: waiting for its turn, {ahead} long computation{'s' * (ahead != 1)} "
                f"ahead on this server ({waited:.0f} s of at most {limit:.0f} s)…"
            ),
        )

    def progress(work: Work) -> None:  # each call is where Streamlit stops a page that has gone
        if _cancel_pressed(cancel_key):
            raise CancelPressed()
        done = f"step {work.steps[0]:,} of {work.steps[1]:,}" if work.steps else f"pass {work.passes:,} of {plan.passes:,}"
        bar.progress(work.done, text=plain(f"{what}: {done}, {work.elapsed:.0f} s of about {minutes(seconds)}"))

    session = get_script_run_ctx().session_id if get_script_run_ctx() else None
    try:
        return lane.run(
            session,
            what,
            seconds,
            compute,
            plan.passes,
            on_wait=waiting,
            on_progress=progress,
            admitted=lambda: model_pass(what.lower(), memory),
        )
    finally:
        slot.empty()
