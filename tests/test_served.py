"""The route the page fetches data from outside Streamlit's reruns (app/served.py), through
Starlette's own test client: the JSON the registered function returns, 404 for an unknown token,
a part that does not exist, or an object that is gone (its entry goes with it)."""

import gc

from starlette.applications import Starlette
from starlette.testclient import TestClient

from glassbox.app import served


class Owner:  # a trace stands here: anything a weak reference can name
    def __init__(self) -> None:
        self.values = [1.5, -2.25, 3.0]


def client() -> TestClient:
    return TestClient(Starlette(routes=served.routes()))


def test_the_route_answers_what_the_registered_function_returns():
    owner = Owner()
    token = served.register(owner, lambda o, part: {"part": part, "value": o.values[part]} if part < 3 else None)
    http = client()
    answer = http.get(f"{served.address(token)}/2")
    assert answer.status_code == 200 and answer.json() == {"part": 2, "value": 3.0}
    assert answer.headers["cache-control"] == "no-store"
    assert http.get(f"{served.address(token)}/3").status_code == 404  # the function has no such part
    assert http.get(f"{served.address('no-such-token')}/0").status_code == 404
    assert http.get(f"{served.address(token)}/x").status_code == 404  # not a part's number


def test_an_entry_goes_with_its_object():
    owner = Owner()
    token = served.register(owner, lambda o, part: {"value": o.values[part]})
    assert served.answer(token, 0) == {"value": 1.5}
    del owner
    gc.collect()
    assert served.answer(token, 0) is None and token not in served._entries
    assert client().get(f"{served.address(token)}/0").status_code == 404
