"""Data the page fetches itself, outside Streamlit's reruns: ``GET /glassbox/data/{token}/{part}``,
a route of the app's own server (``st.App(..., routes=ROUTES)`` in main.py), answers with what the
function registered under ``token`` returns for ``part`` (JSON), or 404 where it is gone.

Why: a choice whose numbers were not sent with the page (the Attention view's other blocks on a
long prompt, 3 MB each) would otherwise be a rerun, which the browser takes 0.5–0.7 s to draw;
fetched, the page draws it in about 0.1 s. A token is random and names one object (a trace) that
the entry holds weakly: evicted from the trace cache, the object takes its entry with it, and the
page then asks the server instead (a rerun). Nothing here changes the object or the model."""

from __future__ import annotations

import json
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import Any

PREFIX = "/glassbox/data"

_entries: dict[str, tuple[weakref.ref, Callable[[Any, int], dict | None]]] = {}
_lock = threading.Lock()


def register(owner: object, answer: Callable[[Any, int], dict | None]) -> str:
    """A new token for ``answer(owner, part)``, as long as ``owner`` lives (``answer`` must not hold it)."""
    token = secrets.token_urlsafe(18)

    def forget(_ref: weakref.ref) -> None:
        with _lock:
            _entries.pop(token, None)

    with _lock:
        _entries[token] = (weakref.ref(owner, forget), answer)
    return token


def answer(token: str, part: int) -> dict | None:
    """What ``token``'s function returns for ``part``; None where the token (or its object) is gone."""
    with _lock:
        entry = _entries.get(token)
    owner = entry[0]() if entry else None
    return None if owner is None else entry[1](owner, part)


def address(token: str) -> str:
    """The path the page fetches ``token``'s parts under (a part's number appended)."""
    return f"{PREFIX}/{token}"


def routes() -> list:
    """The route for st.App (imported here, in the server's process alone)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def endpoint(request) -> Response:
        body = await run_in_threadpool(answer, request.path_params["token"], request.path_params["part"])
        if body is None:
            return JSONResponse({"error": "gone: ask the server again"}, status_code=404)
        # not gzipped by Streamlit's middleware (it saw a coding set): floats in base64 gain little,
        # and compressing 4 MB took 0.12 s before the first byte
        headers = {"Cache-Control": "no-store", "Content-Encoding": "identity"}
        return Response(json.dumps(body), media_type="application/json", headers=headers)

    return [Route(PREFIX + "/{token}/{part:int}", endpoint, methods=["GET"])]
