"""The guards on a hub download's HTTP requests, put into huggingface_hub's own client (its
event hooks): hub.py lists and fetches the files, this module bounds each request of it.

While a download runs (inside ``watched``), no file may send more bytes than its listing gives
(a hub that lies about a size is stopped there), no other answer more than ``LISTING_BYTES``, no
answer may come compressed, and each request must bring at least ``GLASSBOX_HUB_MIN_KB_PER_S``
over each ``GLASSBOX_HUB_TIMEOUT`` seconds. Every request waits at most ``GLASSBOX_HUB_TIMEOUT``
seconds to connect or for its next bytes, and is repeated (huggingface_hub resumes a dropped
transfer, for ever while bytes keep coming) at most ``RETRIES`` times. The download's progress
is told at each request and each chunk: in the app that call raises once the page is gone,
which stops the download there. ``reason`` says in words why a download failed.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from glassbox.model.engine import GlassboxError
from glassbox.model.io.guard import seconds_setting

TIMEOUT_SETTING = "GLASSBOX_HUB_TIMEOUT"
DEFAULT_TIMEOUT = 20.0  # seconds; huggingface_hub's own are 10, and none at all for an API call
RETRIES = 5  # repeats of one request (huggingface_hub's own, for a file, restart whenever bytes arrive)
MIN_RATE_SETTING = "GLASSBOX_HUB_MIN_KB_PER_S"
DEFAULT_MIN_RATE = 50.0  # kB/s: a 1 GB model in under 6 hours, or the download ends
LISTING_BYTES = 64 << 20  # the most an answer that is not a file may send (a listing is a few kB to a few MB)
REPORTS_A_SECOND = 10  # the page's bar is drawn, and a gone page noticed, this often while bytes come


def timeout() -> float:
    """Seconds a hub request may wait to connect or for its next bytes: GLASSBOX_HUB_TIMEOUT."""
    return seconds_setting(TIMEOUT_SETTING, DEFAULT_TIMEOUT)


def min_rate() -> float:
    """Bytes a second a request must bring, over each timeout: GLASSBOX_HUB_MIN_KB_PER_S (kB: 1000 bytes)."""
    value = os.environ.get(MIN_RATE_SETTING, "").strip()
    try:
        rate = float(value) if value else DEFAULT_MIN_RATE
    except ValueError:
        rate = math.nan
    if not 0 <= rate < math.inf:
        raise GlassboxError(f"{MIN_RATE_SETTING} must be a number of kB/s (0 or more), not {value!r}")
    return rate * 1000


class _GaveUp(Exception):
    """A request repeated more than RETRIES times."""


class Garbled(Exception):
    """The hub's answer about a model is not a model listing."""


class _TooMuch(Exception):
    """An answer longer than it may be: a file past its listed size, another answer past LISTING_BYTES."""

    def __init__(self, what: str, most: int):
        super().__init__(f"{what} sent more than the {most:,} bytes {'its listing gives' if what != 'an answer' else 'allowed'}")


class _Compressed(Exception):
    """An answer compressed though the request asked for none."""


class _TooSlow(Exception):
    """A request that brought less than the least rate over a timeout's length."""

    def __init__(self, what: str, got: int, seconds: float, rate: float):
        super().__init__(
            f"{what} came at {got / seconds / 1000:,.1f} kB/s over {seconds:g} s, below the "
            f"{rate / 1000:g} kB/s this server waits for ({MIN_RATE_SETTING})"
        )


@dataclass
class Transfer:
    """One download in progress, in the thread that runs it (see _on_request, _on_response)."""

    timeout: float
    rate: float  # bytes a second a request must bring
    report: Callable[[int], None]  # the download's progress, given the bytes of the file in flight: raises when its page is gone
    asked: Counter = field(default_factory=Counter)
    file: str = ""  # the file being fetched, its listed size and the bytes of it received so far
    size: int = 0
    received: int = 0
    reported: float = 0.0  # when the progress was last told (at most REPORTS_A_SECOND times a second)

    def start_file(self, name: str, size: int) -> None:
        self.file, self.size, self.received = name, size, 0

    def checked(self, response) -> None:
        """Put a check on ``response``'s body as it is read: a file's bytes (resumed or not) past
        its listed size, another answer's past LISTING_BYTES, or less than the least rate over
        any timeout's length, and it stops."""
        # once the files are listed, every request is for the file in flight: its GETs, wherever a
        # redirect took them (the hub sends a weight file's GET on to its CDN); a redirect's own body is an answer
        is_file = bool(self.file) and response.request.method == "GET" and response.status_code in (200, 206)
        if is_file:  # the whole file (200), or from the byte the resumed request asked for (206: bytes START-END/SIZE)
            start = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
            self.received = int(start[1]) if response.status_code == 206 and start else 0
        if response.headers.get("Content-Encoding", "identity").strip().lower() not in ("identity", ""):
            raise _Compressed()  # asked for identity: its size once unzipped is unbounded
        transfer, body = self, response.stream
        what, most = (repr(self.file), self.size) if is_file else ("an answer", LISTING_BYTES)

        class Checked(_http().SyncByteStream):  # type: ignore[misc]  # a base chosen at run time (httpx2 or httpx)
            def __iter__(self):
                counted = 0  # an answer's own bytes; a file's go to the transfer
                window_start, in_window = time.monotonic(), 0
                for chunk in body:
                    if is_file:
                        transfer.received += len(chunk)
                    counted += len(chunk)
                    if (transfer.received if is_file else counted) > most:
                        raise _TooMuch(what, most)
                    in_window += len(chunk)
                    if is_file and time.monotonic() - transfer.reported > 1 / REPORTS_A_SECOND:
                        transfer.reported = time.monotonic()
                        transfer.report(transfer.received)  # the page's bar; raises if the page is gone
                    elapsed = time.monotonic() - window_start
                    if elapsed >= transfer.timeout:
                        if in_window < transfer.rate * elapsed:
                            raise _TooSlow(what, in_window, round(elapsed, 1), transfer.rate)
                        window_start, in_window = time.monotonic(), 0
                    yield chunk

            def close(self):
                body.close()

        response.stream = Checked()


_TRANSFER: ContextVar[Transfer | None] = ContextVar("glassbox_hub_transfer", default=None)
_HOOK_LOCK = threading.Lock()
_hooked = False


def _on_request(request) -> None:
    """Called by huggingface_hub's HTTP client before each request it sends (an event hook), in
    the thread that asked. During a download: tell its page (which stops it if the page is
    gone), count a request asked again (a retry: the same method and address) and cap each of
    its waits (connect, read, write, pool) at the timeout."""
    transfer = _TRANSFER.get()
    if transfer is None:
        return
    transfer.report(transfer.received)
    key = (request.method, str(request.url))
    transfer.asked[key] += 1
    if transfer.asked[key] > RETRIES + 1:
        raise _GaveUp()
    request.headers["Accept-Encoding"] = "identity"  # the bytes counted are the bytes kept: nothing unzipped past a cap
    waits = request.extensions.get("timeout") or {}
    request.extensions = {
        **request.extensions,
        "timeout": {kind: min(waits.get(kind) or math.inf, transfer.timeout) for kind in ("connect", "read", "write", "pool")},
    }


def _on_response(response) -> None:
    """Called by huggingface_hub's HTTP client when an answer's headers have come, before its body
    is read: during a download, the body is read through the transfer's checks."""
    transfer = _TRANSFER.get()
    if transfer is not None:
        transfer.checked(response)


def _hook_into_huggingface_hub() -> None:
    """Add _on_request to huggingface_hub's HTTP client, once per process: through its client
    factory (set_client_factory), so that the client it makes anew after a connection error
    (it closes the old one) has the hook too."""
    global _hooked
    with _HOOK_LOCK:
        if _hooked:
            return
        from huggingface_hub import constants, set_client_factory
        from huggingface_hub.utils._http import default_client_factory  # the library's own client and hooks

        def client():
            made = default_client_factory()
            made.event_hooks["request"].append(_on_request)
            made.event_hooks["response"].append(_on_response)
            return made

        set_client_factory(client)
        # hf_xet moves files with its own Rust client, beyond this hook's timeout, retry bound and
        # stop: Glassbox downloads over plain HTTP (read by huggingface_hub at each download)
        constants.HF_HUB_DISABLE_XET = True
        _hooked = True


def _http():
    """The HTTP library huggingface_hub uses: httpx2 in its recent releases, httpx before."""
    try:
        import httpx2

        return httpx2
    except ImportError:
        import httpx

        return httpx


@contextmanager
def watched(report: Callable[[int], None]) -> Iterator[Transfer]:
    """Guard every hub request this thread sends until the block ends, as one download's (its
    progress: ``report``, given the bytes of the file in flight), with the timeout and least rate
    the settings give now. Name each file with ``start_file`` before fetching it."""
    _hook_into_huggingface_hub()
    transfer = Transfer(timeout(), min_rate(), report)
    token = _TRANSFER.set(transfer)
    try:
        yield transfer
    finally:
        _TRANSFER.reset(token)


def failures() -> tuple[type[BaseException], ...]:
    """What a download may fail with that ``reason`` puts in words: the guards' own stops, the
    HTTP library's errors, a file that cannot be written (OSError: huggingface_hub's HTTP errors
    are OSErrors too) and an answer that cannot be read (ValueError)."""
    return (_GaveUp, Garbled, _TooMuch, _TooSlow, _Compressed, _http().HTTPError, OSError, ValueError)


def reason(exc: BaseException, endpoint: str | None) -> str:
    """Why a download failed, in our own words where we know them: huggingface_hub's messages
    quote the hub's address, and a server's HF_ENDPOINT may be a private mirror."""
    from huggingface_hub.errors import HfHubHTTPError

    http = _http()
    if isinstance(exc, _GaveUp):
        return (
            f"a request failed {RETRIES + 1} times (each waits at most {timeout():g} s to connect or for data: {TIMEOUT_SETTING})"
        )
    if isinstance(exc, Garbled):
        return "its answer is not a model listing"
    if isinstance(exc, _Compressed):
        return "it sent compressed data, though asked for none: stopped"
    if isinstance(exc, (_TooMuch, _TooSlow)):
        return f"{exc}: stopped"
    short = re.search(r"Consistency check failed: file should be of size (\d+) but has size (\d+)", str(exc))
    if short:  # huggingface_hub's check of a file's size against its HEAD's
        return f"a file came with {int(short[2]):,} bytes where the hub lists {int(short[1]):,}"
    cause: BaseException | None = exc
    while cause is not None:  # huggingface_hub raises "not found locally" from the network error behind it
        if isinstance(cause, http.TimeoutException):
            return f"it did not answer within {timeout():g} s ({TIMEOUT_SETTING})"
        if isinstance(cause, HfHubHTTPError) and cause.response is not None:
            return f"it answered HTTP {cause.response.status_code}"
        if isinstance(cause, http.TransportError):
            return "the connection to it failed"
        if isinstance(cause, OSError) and cause.strerror:  # a full disk, a permission
            return f"the hub cache cannot be written ({cause.strerror})"
        cause = cause.__cause__
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if endpoint:  # the whole address first, then its host alone
        from urllib.parse import urlsplit

        for address in filter(None, (endpoint.rstrip("/"), urlsplit(endpoint).netloc)):
            line = line.replace(address, "the hub")
    return line


def silent_tqdm():
    """A progress-bar class for huggingface_hub that prints nothing: the page draws its own bar
    (the transfer reports the bytes as they come: Transfer.checked)."""
    from huggingface_hub.utils import tqdm

    class Silent(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "disable": True})

    return Silent
