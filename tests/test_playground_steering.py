"""Steering in the playground (issue 29), run in-process by Streamlit's AppTest. Reference:
``Model.steer`` with ``Model.steering_vector``'s vector, called here with the page's settings: the
page's steered and plain completions are its tokens and probabilities, and it marks the first
step where the two differ."""

import numpy as np

import glassbox as gb
from glassbox.model.plot.labels import token_text
from tests.helpers import shown, start

PROMPT = "Lily had a"


def steer(at) -> None:
    next(b for b in at.button if b.label == "Steer").click().run()
    assert not at.exception and not at.error


def test_steering_shows_model_steers_two_completions_side_by_side_and_where_they_part():
    model = gb.load("default")
    at = start("screens/playground.py", prompt=PROMPT, max_new="8", seed="3", temperature="0.8")
    at.text_input(key="playground_steer_positive").input("Tom was sad")
    at.text_input(key="playground_steer_negative").input("Tom was happy")
    at.selectbox(key="playground_steer_block").set_value(2)
    for strength, start_at in ((6.0, 0), (-3.5, 2)):  # a negative strength steers the other way
        at.slider(key="playground_steer_strength").set_value(strength)
        at.number_input(key="playground_steer_start").set_value(start_at)
        steer(at)
        vector = model.steering_vector("Tom was sad", "Tom was happy", 2)
        steered, plain = model.steer(PROMPT, vector, 2, strength, start_at, 8, temperature=0.8, seed=3)
        table = at.dataframe[-1].value
        assert list(table["steered"]) == [token_text(t.token) for t in steered]
        assert list(table["plain"]) == [token_text(t.token) for t in plain]
        np.testing.assert_allclose(table["p steered"], [t.p for t in steered], rtol=1e-6)
        np.testing.assert_allclose(table["p plain"], [t.p for t in plain], rtol=1e-6)
        parted = next(i for i, (a, b) in enumerate(zip(steered, plain)) if a.token_id != b.token_id)
        assert list(table[""]).index("← they part") == parted
        said = shown(" ".join(c.value for c in at.caption))
        assert f"They part at step {parted + 1}." in said
        assert f"{strength:g} × “Tom was sad” − “Tom was happy”" in said and f"from position {start_at} on" in said
        html = " ".join(h.proto.body for h in at.get("html"))
        assert html.count("outline:2px") == 2  # the step where they part, on each side


def test_steering_says_what_is_missing_and_where_it_does_not_apply():
    at = start("screens/playground.py", prompt=PROMPT)
    at.text_input(key="playground_steer_negative").input("")
    next(b for b in at.button if b.label == "Steer").click().run()
    assert not at.exception and "Type both prompts" in shown(at.error[0].value)
    seq2seq = start("screens/playground.py", model="micro-seq2seq", prompt="ba ko mi")
    assert not seq2seq.exception
    assert any("this model is an encoder-decoder" in shown(i.value) for i in seq2seq.info)
    assert not [b for b in seq2seq.button if b.label == "Steer"]


def test_a_sparse_autoencoder_feature_steers_where_the_sae_writes():
    """The shipped default-sae's feature 486 (it fires on " fox"): reference ``Model.steer_feature``
    (its decoder row added at blocks.2.hook_resid_pre; tests/test_features.py checks that against
    transformers) with the page's settings. A feature past the SAE's last is a clean message."""
    model = gb.load("default")
    sae = model.sae("default-sae")
    at = start("screens/playground.py", prompt=PROMPT, max_new="8", seed="1", temperature="0.7")
    at.radio(key="playground_steer_source").set_value("a sparse-autoencoder feature").run()
    at.number_input(key="playground_steer_feature").set_value(486)
    at.slider(key="playground_steer_strength").set_value(12.0)
    steer(at)
    steered, plain = model.steer_feature(PROMPT, sae, 486, 12.0, 0, 8, temperature=0.7, seed=1)
    table = at.dataframe[-1].value
    assert list(table["steered"]) == [token_text(t.token) for t in steered]
    assert list(table["plain"]) == [token_text(t.token) for t in plain]
    np.testing.assert_allclose(table["p steered"], [t.p for t in steered], rtol=1e-6)
    assert [t.token for t in steered] != [t.token for t in plain]
    assert "feature #486 of default-sae" in shown(" ".join(c.value for c in at.caption))
    at.number_input(key="playground_steer_feature").set_value(5000)
    next(b for b in at.button if b.label == "Steer").click().run()
    assert not at.exception and "feature must be from 0 to 1023" in shown(at.error[0].value)
