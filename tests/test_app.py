"""The placeholder page, run in-process by Streamlit's AppTest."""

import json

import pytest

from streamlit.testing.v1 import AppTest

from model.checkpoint import load
from model.trace import run_trace


def charts(at):
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def test_page_shows_the_models_own_numbers():
    at = AppTest.from_file("../app/main.py", default_timeout=120).run()
    assert not at.exception and not at.error
    tokens = at.dataframe[0].value
    assert [tokens[f"position {i}"][0] for i in range(5)] == ["the", "cat", "sat", "on", "the"]
    bars, heatmap = charts(at)
    loaded = load("worked-example")
    probs = run_trace(loaded.model, loaded.encode("the cat sat on the"), names=["hook_probs"])["hook_probs"][-1]
    shown = dict(zip(bars["data"][0]["x"], bars["data"][0]["y"]))
    # bar heights are the model's probabilities (sent to the browser as float32)
    assert shown["mat"] == pytest.approx(probs[5].item(), rel=1e-6)


def test_bad_prompt_gives_a_message_and_keeps_the_text():
    at = AppTest.from_file("../app/main.py", default_timeout=120).run()
    at.text_input[0].set_value("the cow sat")
    at.button[0].click().run()
    assert not at.exception
    assert "Unknown word" in at.error[0].value
    assert at.text_input[0].value == "the cow sat"  # nothing the user typed is lost
