"""Three explorer tools in the page (issue 29), run in-process by Streamlit's AppTest: the Head
catalog view, path patching in Ask why and the Overview's exactness panel. Each draws the
engine's own numbers; the references are the same ``glassbox.Model`` calls made here (float32
in the browser payload: 1e-6)."""

import sys

import numpy as np

import glassbox as gb
from tests.helpers import charts, shown, start, z

CLEAN, CORRUPT = "Zoe had a frog. Zoe loved the", "Zoe had a boat. Zoe loved the"


def titled(at, text: str) -> dict:
    (chart,) = [c for c in charts(at) if c["layout"]["title"]["text"].startswith(f"<b>{text}")]
    return chart


def test_head_catalog_draws_every_score_and_finds_micro_inductions_induction_heads():
    """micro-induction over the bundled stories (it cannot spell them: repeated random sequences),
    then over this prompt and over two pasted texts. Reference: ``Model.heads`` with the same texts
    and its ``find``; the finder's heads are outlined on the induction grid."""
    model = gb.load("micro-induction")
    prompt = "ba ko mi to ze li ba ko mi to"
    at = start("screens/explore.py", model="micro-induction", prompt=prompt, view="Head catalog")
    assert not at.exception and not at.error
    expected = model.heads()
    for title, score in (
        ("Induction score", "induction"),
        ("Previous-token score", "previous_token"),
        ("Duplicate-token score", "duplicate_token"),
        ("Self score", "self"),
        ("Mean entropy (nats)", "entropy"),
    ):
        chart = titled(at, title)
        np.testing.assert_allclose(z(chart), expected.scores[score], rtol=1e-6, atol=1e-7)
        assert chart["layout"]["yaxis"]["title"]["text"] == "block" and chart["layout"]["xaxis"]["title"]["text"] == "head"
    found = expected.find("induction", 0.5)
    assert [(b, h) for b, h, _ in found] == [(1, 0), (1, 1)]  # block 2's two heads (docs/explorer.md)
    table = at.dataframe[0].value
    assert list(table["head"]) == ["block 2 (blocks.1), head 1 ([0])", "block 2 (blocks.1), head 2 ([1])"]
    np.testing.assert_allclose(table["induction"], [v for _, _, v in found])
    assert len(titled(at, "Induction score")["layout"]["shapes"]) == 2  # the two found, outlined
    assert "shapes" not in titled(at, "Self score")["layout"]

    at.number_input(key="explore_heads_above").set_value(0.95).run()
    assert any("No head's induction score is over 0.95" in shown(i.value) for i in at.info)

    at.radio(key="explore_heads_source").set_value("this prompt").run()
    np.testing.assert_allclose(z(titled(at, "Induction score")), model.heads([prompt]).scores["induction"], atol=1e-7)
    texts = ["ba ko mi ba ko mi", "to ze li ne to ze li ne"]
    at.radio(key="explore_heads_source").set_value("pasted text").run()
    at.text_area(key="explore_heads_texts").input("\n\n".join(texts))
    next(b for b in at.button if b.label == "Score").click().run()
    assert not at.error
    pasted = model.heads(texts)
    for score in ("previous_token", "induction"):
        title = {"previous_token": "Previous-token score", "induction": "Induction score"}[score]
        np.testing.assert_allclose(z(titled(at, title)), pasted.scores[score], atol=1e-7)
    assert "2 texts" in " ".join(c.value for c in at.caption)


def test_path_patching_in_ask_why_draws_the_engines_sender_by_receiver_grid():
    """The default model, frog against boat, through the receivers' queries and then their keys.
    Reference: ``Model.path_patch`` (its fraction restored; blank where the receiver is not later)."""
    model = gb.load("default")
    at = start("screens/explore.py", prompt=CLEAN, view="Ask why")
    at.text_input(key="explore_why_token").input(" frog")
    at.text_input(key="explore_why_wrong").input(" boat").run()
    assert any("corrupted prompt under activation patching" in i.value for i in at.info)  # nothing to patch yet
    at.text_input(key="explore_why_corrupt").input(CORRUPT)
    next(b for b in at.button if b.label == "Patch").click().run()
    assert not at.exception and not at.error
    for receiver_input, word in (("q", "queries"), ("k", "keys")):
        at.segmented_control(key="explore_why_path_input").set_value(receiver_input).run()
        expected = model.path_patch(CLEAN, CORRUPT, " frog", " boat", receiver_input)
        chart = titled(at, f"Fraction restored through each receiver's {word}")
        np.testing.assert_allclose(z(chart), expected.restored(), rtol=1e-5, atol=1e-6)  # NaN where NaN
        # counted from 1, as every view counts blocks and heads (issue 44, item 4)
        assert chart["data"][0]["y"] == [
            f"block {b + 1}, MLP" if h is None else f"block {b + 1}, head {h + 1}" for b, h in expected.senders
        ]
        assert chart["data"][0]["x"] == [f"block {b + 1}, head {h + 1}" for b, h in expected.receivers]
        assert chart["layout"]["yaxis"]["title"]["text"].startswith("sender")
        assert chart["layout"]["xaxis"]["title"]["text"].startswith("receiver")


def said(at, text: str) -> bool:
    """Whether one of the page's info boxes says ``text`` (as read: plain()'s escapes removed)."""
    return any(text in shown(i.value) for i in at.info)


def compare(at) -> None:
    next(b for b in at.button if b.label == "Compare with transformers").click().run()


def test_exactness_panel_shows_verify_and_says_why_where_it_cannot(gpt2_dir, monkeypatch):
    """A GPT-2 folder (transformers' own files) with gradients: the table is ``Model.verify``'s, as
    written. The bundled default model, a Glassbox checkpoint of GPT-2's architecture, is compared
    with GPT2LMHeadModel holding its weights; micro-induction (attention only) cannot be, and
    without transformers nothing can: each says so in one line, no traceback."""
    prompt = "The cat sat on the mat."
    at = start("screens/explore.py", model=str(gpt2_dir), prompt=prompt, view="Overview")
    at.toggle(key="explore_exactness_gradients").set_value(True)
    compare(at)
    assert not at.exception and not at.error
    expected = gb.load(str(gpt2_dir)).verify(prompt, gradients=True)
    table = at.dataframe[-1].value
    assert list(table["largest |Glassbox − transformers|"]) == [
        f"{v:.3g}" for v in (expected.logits, expected.residual, expected.loss, expected.gradient)
    ]
    assert list(table["largest |value| (its scale)"]) == [
        f"{expected.logits_scale:.4g}",
        f"{expected.residual_scale:.4g}",
        "",
        f"{expected.gradient_scale:.4g}",
    ]
    assert expected.logits < 1e-4 and any("GPT2LMHeadModel" in c.value for c in at.caption)

    default = start("screens/explore.py", prompt=prompt, view="Overview")
    compare(default)
    assert not default.exception and not default.error
    expected = gb.load("default").verify(prompt)
    assert list(default.dataframe[-1].value["largest |Glassbox − transformers|"]) == [
        f"{v:.3g}" for v in (expected.logits, expected.residual)
    ]
    assert any("holding this Glassbox checkpoint" in shown(c.value) for c in default.caption)

    micro = start("screens/explore.py", model="micro-induction", prompt="ba ko mi", view="Overview")
    compare(micro)
    assert not micro.exception and not micro.error
    assert said(micro, "This is a Glassbox checkpoint whose architecture is not GPT-2's")

    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails
    other = start("screens/explore.py", model=str(gpt2_dir), prompt="The dog sat.", view="Overview")
    compare(other)
    assert not other.exception and not other.error
    assert said(other, "transformers is not installed: `pip install")
