"""The explorer and the playground on the three micro-models, run in-process by AppTest: every
view opens on each without an exception or an error, draws no empty chart, and where it does
not apply (an attention-only model's MLP, a zero-layer model's blocks, a model without
positions) says so in one sentence while the rest of the page works. The Circuits view's head
scores are the engine's (references: run_trace's patterns, computed here) and single out
micro-induction's previous-token head in block 1 and induction head in block 2."""

import json

import numpy as np
import pytest

from glassbox.app.explore import VIEWS
from glassbox.app.explore.circuits import INDUCTION_MODEL, INDUCTION_PROMPT
from glassbox.model.analysis.architecture import NO_BLOCKS, NO_MLP, NO_POSITIONS
from glassbox.model.engine import run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import backward_sent, charts, press, shown, start, z

PROMPTS = {"micro-bigram": "the cat sat on the", "micro-attention-only": "the cat sat on the", INDUCTION_MODEL: INDUCTION_PROMPT}
ATTENTION_ONLY = {
    "MLP": NO_MLP,
    "Backward": NO_MLP,
    "Attribution graph": NO_MLP,
}  # the dead neurons' tab; the rest of the view draws
SAID = {
    "micro-bigram": {
        "Tokens & embeddings": NO_POSITIONS,
        "Attention": NO_BLOCKS,
        "LayerNorm": NO_BLOCKS,
        "MLP": NO_BLOCKS,
        "Backward": NO_BLOCKS,
        "Ask why": NO_BLOCKS,
        "Circuits": NO_BLOCKS,
        "Head catalog": NO_BLOCKS,
        "Features": NO_BLOCKS,
        "Attribution graph": NO_BLOCKS,
    },
    "micro-attention-only": ATTENTION_ONLY,
    INDUCTION_MODEL: ATTENTION_ONLY,
}
WHOLE = {
    "Attention",
    "LayerNorm",
    "MLP",
    "Head catalog",
    "Features",
    "Attribution graph",
}  # views whose sentence, where they have one, is all they show


@pytest.mark.parametrize("model", list(PROMPTS))
def test_every_view_opens_on_every_micro_model(model):
    for view in VIEWS:
        at = start("screens/explore.py", model=model, prompt=PROMPTS[model], view=view)
        assert not at.exception and not at.error, (model, view)
        drawn = charts(at)
        if view == "Backward":  # the step's maps are drawn in the page; the dead neurons' part is a lazy tab
            drawn = [{"data": grid["values"].size} for grid in backward_sent(at)["step"]["grids"]]
            at.session_state["explore_backward_part"] = "Dead neurons"
            at.run()
        if view == "Tokens & embeddings":  # and the positional table (app/explore/tokens.py)
            at.session_state["explore_tokens_part"] = "The positional table"
            at.run()
        said = [shown(i.value) for i in at.info]  # as a reader sees the escaped text
        expected = SAID[model].get(view)
        assert (expected in said) if expected else not any(s in said for s in (NO_BLOCKS, NO_MLP, NO_POSITIONS)), (
            model,
            view,
            said,
        )
        assert all(chart["data"] for chart in drawn), (model, view)  # no empty chart
        if view == "Export":
            assert len(at.get("download_button")) == 2
        elif view == "Compare":
            assert "prompt B" in said[-1]
        elif view == "Features" and not expected:  # no curated SAE for the micro-models: it asks for one
            assert "Type a folder" in said[-1]
        elif view == "Circuits" and model == "micro-bigram":  # the direct path is this model
            assert "these are the model's logits" in " ".join(m.value for m in at.markdown) and at.dataframe
        else:
            assert bool(drawn) != bool(view in WHOLE and expected), (model, view)


def test_circuits_view_finds_micro_inductions_previous_token_and_induction_heads():
    at = start("screens/explore.py", model=INDUCTION_MODEL, prompt=INDUCTION_PROMPT, view="Circuits")
    assert not at.exception and not at.error
    assert not [b for b in at.button if INDUCTION_MODEL in b.label]  # it is the open model: no offer to open it
    loaded = load(INDUCTION_MODEL)
    n = 20
    half = np.random.default_rng(0).integers(0, len(loaded.tokenizer.pieces), n).tolist()
    trace = run_trace(loaded.model, loaded.tokenizer.prefix() + half + half, names=["blocks.*.attn.hook_pattern"])
    start_ = len(loaded.tokenizer.prefix())
    induction = [
        [
            np.mean([trace[f"blocks.{b}.attn.hook_pattern"][h, t, t - n + 1].item() for t in range(start_ + n, start_ + 2 * n)])
            for h in range(2)
        ]
        for b in range(2)
    ]
    previous = [
        [
            np.mean([trace[f"blocks.{b}.attn.hook_pattern"][h, t, t - 1].item() for t in range(start_ + 1, start_ + 2 * n)])
            for h in range(2)
        ]
        for b in range(2)
    ]
    shown_induction = z(next(c for c in charts(at) if "Induction score" in c["layout"]["title"]["text"]))
    shown_previous = z(next(c for c in charts(at) if "Previous-token score" in c["layout"]["title"]["text"]))
    np.testing.assert_allclose(shown_induction, induction, atol=1e-5)
    np.testing.assert_allclose(shown_previous, previous, atol=1e-5)
    assert np.unravel_index(np.argmax(shown_previous), (2, 2)) == (0, 1)  # block 1, head 2
    assert np.unravel_index(np.argmax(shown_induction), (2, 2)) == (1, 0)  # block 2, head 1
    assert shown_previous[0, 1] > 0.9 and shown_induction[1, 0] > 0.9
    said = " ".join(c.value for c in at.caption)
    assert "Most induction-like here: block 2" in said and "Most previous-token-like: block 1" in said


def test_one_click_opens_micro_induction_as_the_model_picker_would():
    at = start("screens/explore.py", model="micro-bigram", prompt="the cat sat on the", view="Circuits")
    (offer,) = [b for b in at.button if INDUCTION_MODEL in b.label]
    offer.click().run()
    assert not at.exception and not at.error
    assert at.query_params["model"] in (INDUCTION_MODEL, [INDUCTION_MODEL])
    assert at.query_params["prompt"] in (INDUCTION_PROMPT, [INDUCTION_PROMPT])
    assert at.selectbox(key="explore_model_bundled").value == INDUCTION_MODEL  # the picker shows it
    assert any("Induction score" in c["layout"]["title"]["text"] for c in charts(at))


def test_the_playground_generates_on_a_zero_layer_model_and_says_it_caches_nothing():
    at = start("screens/playground.py", model="micro-bigram", prompt="Lily had a", max_new="3")
    press(at)
    assert not at.exception and not at.error
    # every step, as sent to the page (app/components/generation_player.js writes "KV cache none. …")
    (player,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "steps" in json.loads(c.proto.json)]
    assert all(NO_BLOCKS in step["kv"]["sentence"] and "latex" not in step["kv"] for step in player["steps"])
    assert not [c for c in charts(at) if c["layout"]["title"]["text"].startswith("KV cache size")]
