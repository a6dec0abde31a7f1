"""The explorer's Features view (app/explore/features.py), run in-process by Streamlit's AppTest.
It draws the engine's numbers: the references are the same ``glassbox.Model`` calls made here
(Model.features, ablate_feature, feature_logits; those are checked against SAELens and
transformers in tests/test_features.py). float32 in the browser payload: 1e-6."""

import numpy as np
import pytest

import glassbox as gb
from glassbox.app.explore.common import drawn_vocabulary
from tests.helpers import charts, start, values, z

PROMPT = "Once upon a time, a little fox lived in the forest. The fox"


def titled(at, text: str) -> dict:
    (chart,) = [c for c in charts(at) if c["layout"]["title"]["text"].replace("<b>", "").startswith(text)]
    return chart


def test_the_default_models_sae_draws_its_features_error_and_one_feature():
    model = gb.load("default")
    sae = model.sae("default-sae")
    want = model.features(PROMPT, sae, top=5)
    at = start("screens/explore.py", prompt=PROMPT, view="Features")
    assert not at.exception and not at.error
    grid = titled(at, "Feature activations")
    np.testing.assert_allclose(z(grid), want.column_values, rtol=1e-6, atol=1e-6)
    assert list(grid["data"][0]["x"]) == [f"#{f}" for f in want.columns]
    np.testing.assert_allclose(values(titled(at, "What the features miss")["data"][0]["y"]), want.relative_error, rtol=1e-6)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["Next-token loss"]) == pytest.approx(want.loss, abs=1e-4)
    assert float(metrics["With the SAE's rebuild in place"]) == pytest.approx(want.spliced_loss, abs=1e-4)

    feature = int(want.columns[0])  # the view follows the strongest feature first
    ablation = model.ablate_feature(PROMPT, sae, feature)
    np.testing.assert_allclose(
        values(titled(at, f"Feature #{feature}")["data"][0]["y"]), ablation.activations, rtol=1e-6, atol=1e-6
    )
    effect = model.feature_logits(PROMPT, sae, feature, k=10)
    logits, next_token = at.dataframe[0].value, at.dataframe[1].value
    drawn = drawn_vocabulary(model.tokenizer)  # tokens as every view draws them (␣ for a space)
    assert list(logits["raises"]) == [drawn[i] for i in effect.promoted_ids]
    np.testing.assert_allclose(logits["by"], effect.promoted, rtol=1e-6)
    order = np.argsort(-ablation.plain, kind="stable")[:8]
    np.testing.assert_allclose(next_token["p without"], ablation.ablated[order], rtol=1e-6)

    other = int(want.columns[3])
    at.selectbox(key="explore_sae_feature").set_value(other).run()
    np.testing.assert_allclose(
        values(titled(at, f"Feature #{other}")["data"][0]["y"]),
        model.ablate_feature(PROMPT, sae, other).activations,
        rtol=1e-6,
        atol=1e-6,
    )


def test_another_sae_by_folder_and_bad_ones_get_a_message(tmp_path):
    at = start("screens/explore.py", prompt=PROMPT, view="Features")
    at.selectbox(key="explore_sae_choice").set_value("another: a folder, or owner/repo/folder on the hub").run()
    assert any("Type a folder" in i.value for i in at.info)
    at.text_input(key="explore_sae_source").input(str(tmp_path))
    next(b for b in at.button if b.label == "Open").click().run()
    assert not at.exception and "No sparse autoencoder" in at.error[0].value
    at.text_input(key="explore_sae_source").input("some-org/some-repo/blocks.9.hook_resid_pre")
    next(b for b in at.button if b.label == "Open").click().run()
    assert not at.exception and not at.error  # not fetched yet: offered, nothing asked of the hub before the click
    assert any(
        "some-org/some-repo/blocks.9.hook_resid_pre is not downloaded yet" in i.value.replace("\\", "").replace("\u2060", "")
        for i in at.info
    )
    at.button(key="explore_sae_fetch_download").click().run()
    assert not at.exception and at.error  # offline here: a clean message, never a traceback
