"""What a visitor sees when something goes wrong. A problem they can fix (GlassboxError) is shown
as its message, as text. Anything else is a bug: the visitor gets a short message with a
reference, and the traceback goes to the server's log under that reference, never to the
browser (which would show the server's paths and code)."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.timing import timed
from glassbox.app.resources import long_lane
from glassbox.model.engine import GlassboxError

log = logging.getLogger("glassbox.app")


@contextmanager
def crash_guard() -> Iterator[None]:
    """Around a page's run (main.py) and each fragment's (``fragment``). st.stop and st.rerun
    are BaseExceptions and pass through. Each run is light work, which long computations pause
    for (model/serving/lane.py)."""
    try:
        with long_lane().light():
            yield
    except GlassboxError as exc:
        st.error(plain(exc))
    except Exception:
        reference = uuid.uuid4().hex[:8]
        log.exception("Unhandled error in the app (reference %s)", reference)
        st.error(
            f"Something went wrong on the server (reference {plain(reference)}); the details are in its log. "
            "Try again, or change the settings."
        )


def fragment(func: Callable) -> Callable:
    """``st.fragment`` with ``crash_guard`` around its body: a fragment's own reruns do not pass
    through main.py's guard."""

    @functools.wraps(func)
    def guarded(*args, **kwargs):
        with timed(func.__name__), crash_guard():
            return func(*args, **kwargs)

    return st.fragment(guarded)
