"""Waiting on the app in Chromium by what the page is doing, never for a fixed time.

``settled(page)`` returns once every script run the page has asked the server for has ended and
the page shows it idle. The script-state attribute alone cannot say so: after a click, the page
keeps saying "notRunning" until the server's answer arrives, so a wait on it alone can return
before the rerun has begun. What the page asked for is on its websocket (one Streamlit protobuf
a frame): each BackMsg ``rerun_script`` (the page opened, a widget changed, a link followed) is
answered by a run that starts (ForwardMsg ``new_session``) and ends (``script_finished``). A click
that asks nothing of the server (an expander, an in-page drawing) waits for nothing.

A page is watched from before it opens the app: conftest's ``page`` fixture is; a test that makes
its own page calls ``watch`` on it first."""

from __future__ import annotations

import time

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"  # 'initial' until the first run starts
STREAM = "/_stcore/stream"  # the app's websocket


class Runs:
    """The script runs of one page's current app session, as its websocket carries them."""

    def __init__(self):
        self.socket = None
        self.asked = self.started = self.answered = 0

    def opened(self, socket) -> None:
        if STREAM not in socket.url:
            return
        self.socket = socket  # a new session (the page opened or reloaded): its runs are counted afresh
        self.asked = self.started = self.answered = 0
        socket.on("framesent", lambda payload: self.sent(socket, payload))
        socket.on("framereceived", lambda payload: self.received(socket, payload))

    def sent(self, socket, payload) -> None:
        if socket is self.socket and isinstance(payload, bytes):
            if BackMsg.FromString(payload).WhichOneof("type") == "rerun_script":
                self.asked += 1

    def received(self, socket, payload) -> None:
        if socket is not self.socket or not isinstance(payload, bytes):
            return
        message = ForwardMsg.FromString(payload)
        kind = message.WhichOneof("type")
        if kind == "new_session":  # a run starts: it serves every rerun asked so far
            self.started = self.asked
        elif kind == "script_finished" and message.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            self.answered = self.started  # (a run stopped early for a rerun is followed by that rerun)

    def done(self) -> bool:
        return self.answered == self.asked


def watch(page: Page) -> Page:
    """Count ``page``'s script runs from now on (before it opens the app); returns the page."""
    if not hasattr(page, "glassbox_runs"):
        page.glassbox_runs = Runs()
        page.on("websocket", page.glassbox_runs.opened)
    return page


def settled(page: Page, timeout: float = 120_000) -> None:
    """Wait (at most ``timeout`` ms) until every rerun ``page`` asked for has ended and the page
    shows its script idle."""
    runs = getattr(page, "glassbox_runs", None)
    assert runs is not None, "watch(page) before it opens the app: settled() counts the runs on its websocket"
    deadline = time.monotonic() + timeout / 1000
    left = lambda: max(1.0, (deadline - time.monotonic()) * 1000)  # noqa: E731  (ms, for Playwright)
    page.wait_for_selector(IDLE, timeout=left())  # a page just opened: its first run has ended
    while not runs.done():
        if time.monotonic() > deadline:
            raise PlaywrightTimeout(
                f"the app's runs did not end within {timeout / 1000:g} s ({runs.asked} asked, {runs.answered} answered)"
            )
        try:  # the next message from the server, or a second without one (then the count is read again)
            runs.socket.wait_for_event("framereceived", timeout=min(left(), 1000))
        except PlaywrightTimeout:
            pass
        except PlaywrightError:  # the socket closed (the page navigated): the next session's first run
            page.wait_for_selector(IDLE, timeout=left())
    page.wait_for_selector(IDLE, timeout=left())
