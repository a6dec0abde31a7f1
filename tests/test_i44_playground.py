"""Issue 44, items 1 and 11: the playground's steering defaults, what a feature fires on, and the
max-new-tokens slider held to what the model can write. Run in-process by AppTest.

References: the steered and plain completions are ``Model.steer`` / ``Model.steer_feature`` called
here with the page's own defaults; "readable" is measured by the plain model itself: the steered
completion's mean next-token loss under the unsteered model (its log-softmax recomputed here from
the raw logits of ``model.model``, not from the page), held near the plain completion's. The
feature catalog is checked against a dense per-(token, feature) sum built here with index_add."""

import json

import numpy as np
import pytest
import torch

import glassbox as gb
from glassbox.app.components.steering import CATALOG_STORIES
from glassbox.model.analysis.features import feature_tokens
from glassbox.model.data.stories import corpus
from glassbox.model.plot.labels import token_text
from tests.helpers import press, shown, start

PROMPT = "Lily had a"  # the page's default
SEEDS = range(4)
READABLE = 1.0  # nats a token the steered story may cost over the plain one, under the plain model


@pytest.fixture(scope="module")
def model():
    return gb.load("default")


def plain_loss(model, prompt: str, tokens) -> float:
    """The mean cross-entropy of ``tokens`` after ``prompt`` under the unsteered model."""
    ids = model.tokens(prompt) + [t.token_id for t in tokens]
    with torch.no_grad():
        logits = model.model(torch.tensor([ids])).logits[0].double()
    log_probs = logits.log_softmax(-1)[len(ids) - len(tokens) - 1 : -1]
    return float(-log_probs.gather(-1, torch.tensor(ids[-len(tokens) :])[:, None]).mean())


def steer(at) -> None:
    next(b for b in at.button if b.label == "Steer").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]


def caption(at) -> str:
    return shown(" ".join(c.value for c in at.caption))


def test_the_default_contrastive_steering_turns_the_duck_into_a_fox_and_stays_readable(model):
    at = start("screens/playground.py")
    positive = at.text_input(key="playground_steer_positive").value
    negative = at.text_input(key="playground_steer_negative").value
    block = at.selectbox(key="playground_steer_block").value
    strength = at.slider(key="playground_steer_strength").value
    steer(at)
    vector = model.steering_vector(positive, negative, block)
    table = at.dataframe[-1].value
    steered, plain = model.steer(PROMPT, vector, block, strength, 0, 20, temperature=1.0, seed=0)
    assert list(table["steered"]) == [token_text(t.token) for t in steered]
    assert list(table["plain"]) == [token_text(t.token) for t in plain]
    said = caption(at)
    # the vector's norm beside the strength, against torch's norm of the engine's vector
    norm = float(torch.linalg.vector_norm(vector.double()))
    assert f"The vector's norm is {norm:.3g}" in said and f"adds a vector of norm {abs(strength) * norm:.3g}" in said
    site = f"blocks.{block}.hook_resid_pre"
    stream = float(model.trace(PROMPT, names=[site])[site].double().norm(dim=-1).mean())
    assert f"whose norm there is {stream:.3g}" in said
    # the claimed effect on the page's seed: the plain story's duck becomes a fox
    text, plain_text = "".join(t.token for t in steered), "".join(t.token for t in plain)
    assert " duck" in plain_text and " fox" not in plain_text and text.count(" fox") >= 2
    # on it and three more seeds: never fewer foxes than the plain story, and the story about as likely
    # under the plain model
    for seed in SEEDS:
        steered, plain = model.steer(PROMPT, vector, block, strength, 0, 20, temperature=1.0, seed=seed)
        text, plain_text = "".join(t.token for t in steered), "".join(t.token for t in plain)
        assert text.count(" fox") >= plain_text.count(" fox")
        assert plain_loss(model, PROMPT, steered) <= plain_loss(model, PROMPT, plain) + READABLE, (seed, text)
    # the old default, for scale: "Tom was sad" − "Tom was happy" at 2.5 falls apart under the same measure
    old = model.steering_vector("Tom was sad", "Tom was happy", block)
    garbled, plain = model.steer(PROMPT, old, block, 2.5, 0, 20, temperature=1.0, seed=0)
    assert plain_loss(model, PROMPT, garbled) > plain_loss(model, PROMPT, plain) + 2 * READABLE


def test_the_feature_source_starts_on_a_feature_with_a_meaning_and_says_what_it_fires_on(model):
    sae = model.sae("default-sae")
    at = start("screens/playground.py")
    at.radio(key="playground_steer_source").set_value("a sparse-autoencoder feature").run()
    feature = at.number_input(key="playground_steer_feature").value
    strength = at.slider(key="playground_steer_strength").value
    assert (feature, strength) == (486, 8.0)  # the choice; what follows checks what it does
    texts = [model.tokens(s)[: model.cfg.n_ctx] for s in corpus(CATALOG_STORIES)]
    catalog = feature_tokens(model.model, texts, sae, k=3)
    pieces = model.tokenizer.pieces
    top = [pieces[i] for i in catalog.top_ids[feature]]
    said = caption(at)
    assert f"Feature #{feature} fires most on: “{token_text(top[0])}”" in said
    assert all(token_text(t) in said for t in top)
    clear = at.dataframe[0].value
    assert list(clear["feature"])[:3] == [f for f in catalog.clearest() if pieces[catalog.top_ids[f, 0]].strip().isalpha()][:3]
    for f in clear["feature"]:
        assert catalog.share[f] >= 0.5  # most of its activation on one word
    steer(at)
    for seed in SEEDS:
        steered, plain = model.steer_feature(PROMPT, sae, feature, strength, 0, 20, temperature=1.0, seed=seed)
        assert plain_loss(model, PROMPT, steered) <= plain_loss(model, PROMPT, plain) + READABLE
    steered, plain = model.steer_feature(PROMPT, sae, feature, strength, 0, 20, temperature=1.0, seed=0)
    assert [t.token_id for t in steered] != [t.token_id for t in plain]  # the page's seed shows a change
    assert "The vector's norm is 1" in caption(at)


def test_feature_tokens_match_a_dense_sum_per_token():
    model = gb.load("default")
    sae = model.sae("default-sae")
    texts = [model.tokens(s)[: model.cfg.n_ctx] for s in corpus(8)]
    got = feature_tokens(model.model, texts, sae, k=4)
    dense = torch.zeros(model.cfg.vocab_size, sae.d_sae, dtype=torch.float64)
    fired = torch.zeros(sae.d_sae)
    for tokens in texts:
        acts = sae.encode(sae.rows(model.trace(tokens, names=[sae.reads])[sae.reads])).double()
        dense.index_add_(0, torch.tensor(tokens), acts.clamp(min=0))
        fired += (acts > 0).sum(0)
    values, ids = dense.topk(4, dim=0)
    share = (values / dense.sum(0).clamp(min=1e-30)).T.numpy()
    live = dense.sum(0) > 0
    np.testing.assert_array_equal(got.fired, fired.numpy())
    np.testing.assert_allclose(got.total, dense.sum(0).numpy(), rtol=1e-12, atol=1e-12)
    for f in torch.nonzero(live).flatten().tolist():
        n = int((values[:, f] > 0).sum())
        np.testing.assert_allclose(got.top_mass[f, :n], share[f, :n], rtol=1e-10)
        np.testing.assert_allclose(dense[got.top_ids[f, :n], f].numpy(), values[:n, f].numpy(), rtol=1e-10)
    assert got.positions == sum(map(len, texts))


def test_max_new_tokens_are_held_to_the_context_and_the_source():
    wx = start("screens/playground.py", model="worked-example")  # its sample prompt fills its 5-token context
    assert not [s for s in wx.slider if s.key == "max_new"]
    assert "no room for a new token" in caption(wx)
    sent = json.loads(wx.get("bidi_component")[0].proto.json)
    assert "no room" in sent["blocked"]
    press(wx)
    assert not wx.exception and "Shorten the prompt" in shown(wx.error[0].value)
    wx.text_area(key="prompt").input("the cat sat").run()  # 3 tokens of 5: room for 2
    assert [s.max for s in wx.slider if s.key == "max_new"] == [2]
    press(wx)
    assert not wx.exception and not wx.error
    assert len(wx.session_state["generation"]["tokens"]) == 2
    source = "ba ko mi to ze li na sa pe ro"
    s2s = start("screens/playground.py", model="micro-seq2seq", prompt=source)
    assert [s.value for s in s2s.slider if s.key == "max_new"] == [10]  # the source's length, not the context's 16
    assert "no end-of-text token" in caption(s2s)
    press(s2s)
    written = [t["token"] for t in s2s.session_state["generation"]["tokens"]]
    assert len(written) == 10
    assert written == source.split()[::-1]  # the reversal it was trained to write, and nothing after it


def test_choosing_curated_hub_models_opens_the_first_at_once():
    """Issue 44 item 11: switching "Model from" to the curated list used to leave the page blank until
    another model was picked. Reference: glassbox.model.io.catalog's curated list (its first entry
    is what the list shows) and the hub cache's own answer on whether it is here."""
    from glassbox.model.io.catalog import curated
    from glassbox.model.io.hub import cached, parse_hub_id

    at = start("screens/playground.py")
    at.selectbox(key="model_source").set_value("Curated hub models").run()
    assert not at.exception
    first = curated()[0]
    assert at.session_state["model"] == first.hub_id
    if cached(parse_hub_id(first.hub_id)) is None:  # not here: the Download button and the size, at once
        assert any("is not downloaded yet" in shown(i.value) for i in at.info)
        assert [b for b in at.button if b.label == "Download"]
    else:  # here: the model opens
        assert at.text_area(key="prompt")
