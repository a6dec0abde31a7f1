"""The explorer on an encoder-decoder (micro-seq2seq, a tiny T5 that reverses its source), run
in-process by AppTest, and the analyses behind it (model/analysis/seq2seq.py).

References and tolerances:
- the page's numbers against a direct run_seq2seq_trace of the same source and target (float32 in
  the browser payload: 1e-6);
- the loss per position against −log softmax of the trace's logits, computed here with torch in
  float64 (the page reads the model's own float32 log-softmax, which its loss is computed from:
  1e-5 relative, 1e-6 absolute), and its mean against the trace's loss (1e-6);
- an empty target against the engine's greedy generation (exact ids), and against the
  teacher-forced argmax of one uncached pass;
- the analyses against numpy: norms, argmax and max per row, sorting (1e-12)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glassbox.app.explore.seq2seq import VIEWS
from glassbox.model.analysis.seq2seq import (
    DECODER,
    ENCODER,
    greedy_target,
    most_attended,
    predictions,
    stream_norms,
    stream_points,
    stream_vectors,
)
from glassbox.model.engine import run_seq2seq_trace
from glassbox.model.engine.sampling import Sampling, generate
from glassbox.model.engine.seq2seq import shift_right
from glassbox.model.io.checkpoint import load
from tests.helpers import charts, shown, start, values, z

MODEL, SOURCE = "micro-seq2seq", "ba ko mi to ze li"


@pytest.fixture(scope="module")
def loaded():
    return load(MODEL)


@pytest.fixture(scope="module")
def greedy(loaded) -> list[int]:
    """The engine's own greedy output for SOURCE: as many tokens as the source."""
    n = len(loaded.encode(SOURCE))
    return [step.token_id for step in generate(loaded, SOURCE, n, Sampling(temperature=0))]


def titled(at, text: str) -> dict:
    (chart,) = [c for c in charts(at) if text in c["layout"].get("title", {}).get("text", "")]
    return chart


def test_every_view_opens_and_draws(loaded):
    for view in VIEWS:
        at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view=view)
        assert not at.exception and not at.error, view
        assert at.session_state["explore_view"] == view
        drawn = charts(at)
        assert drawn and all(chart["data"] for chart in drawn), view  # something drawn, no empty chart
    # every kind of attention, and tensors on each axis of positions, on one page
    for kind in ("encoder", "decoder", "cross"):
        at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Attention", attn=kind)
        assert not at.exception and not at.error and all(c["data"] for c in charts(at)), kind
        assert at.radio(key="explore_attn").value == kind


def test_tensors_are_labelled_by_the_source_or_the_decoders_tokens(loaded, greedy):
    at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Tensors & gradients")
    source = loaded.encode(SOURCE)
    source_labels = [f"{i}:{loaded.pieces[t]}" for i, t in enumerate(source)]
    read = [loaded.cfg.decoder_start_token_id] + greedy[:-1]
    trace = run_seq2seq_trace(loaded.model, source, greedy, backward=True)
    names = at.selectbox(key="explore_tensor").options
    assert names == trace.names()  # every tensor, then every gradient

    def grid(name: str) -> dict:
        at.selectbox(key="explore_tensor").set_value(name).run()
        assert not at.exception and not at.error, name
        (chart,) = charts(at)
        return chart

    cross = grid("decoder.blocks.1.cross_attn.hook_scores")  # queries: decoder positions; keys: the source
    assert [shown(x).replace("\u2060", "") for x in cross["data"][0]["x"]] == source_labels
    assert [y.replace("\u2060", "") for y in cross["data"][0]["y"]][0] == "0:<s>"
    assert len(cross["data"][0]["y"]) == len(read)
    np.testing.assert_allclose(z(cross), trace["decoder.blocks.1.cross_attn.hook_scores"][0].numpy(), rtol=1e-6)
    encoder = grid("grad:encoder.blocks.0.hook_resid_post")  # a gradient in the encoder: source rows
    assert [y.replace("\u2060", "") for y in encoder["data"][0]["y"]] == source_labels
    np.testing.assert_allclose(z(encoder), trace["grad:encoder.blocks.0.hook_resid_post"].numpy(), rtol=1e-6)
    scale = grid("encoder.blocks.1.ln2.hook_scale")  # 1-D: one row, the source across
    assert [x.replace("\u2060", "") for x in scale["data"][0]["x"]] == source_labels


def test_the_cross_attention_drawn_is_the_engines(loaded, greedy):
    at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Attention", attn="cross", block="2", head="3")
    assert not at.exception and not at.error
    assert (at.selectbox(key="explore_block").value, at.selectbox(key="explore_head").value) == (1, 2)
    trace = run_seq2seq_trace(loaded.model, loaded.encode(SOURCE), greedy)
    pattern = trace["decoder.blocks.1.cross_attn.hook_pattern"][2].double().numpy()
    np.testing.assert_allclose(z(titled(at, "Pattern: softmax")), pattern, atol=1e-6)
    shares = titled(at, "most")  # each query's weight on the source position it reads most
    np.testing.assert_allclose(values(shares["data"][0]["y"]), pattern.max(-1), atol=1e-6)
    source = loaded.encode(SOURCE)
    assert [t.replace("\u2060", "") for t in shares["data"][0]["text"]] == [
        f"{j}:{loaded.pieces[source[j]]}" for j in pattern.argmax(-1)
    ]
    at.selectbox(key="explore_head").select(0).run()  # another head: its own pattern
    np.testing.assert_allclose(
        z(titled(at, "Pattern: softmax")), trace["decoder.blocks.1.cross_attn.hook_pattern"][0].numpy(), atol=1e-6
    )


def test_the_loss_per_position_is_minus_log_softmax_and_its_mean_the_loss(loaded, greedy):
    at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Overview", target="ko ba mi to li ze")
    assert not at.exception and not at.error
    target = loaded.encode("ko ba mi to li ze")
    trace = run_seq2seq_trace(loaded.model, loaded.encode(SOURCE), target)
    expected = -torch.log_softmax(trace["hook_logits"].double(), -1)[torch.arange(len(target)), target].numpy()
    bars = titled(at, "Loss per position")
    np.testing.assert_allclose(values(bars["data"][0]["y"]), expected, rtol=1e-5, atol=1e-6)
    assert [x.replace("\u2060", "") for x in bars["data"][0]["x"]] == [f"{i}:{loaded.pieces[t]}" for i, t in enumerate(target)]
    assert values(bars["data"][0]["y"]).mean() == pytest.approx(trace.loss, rel=1e-6)
    assert f"L = {trace.loss:.6g}" in at.markdown[1].value and expected.max() > 1  # not what it would write
    assert "greedy" not in " ".join(c.value for c in at.caption)


def test_an_empty_target_is_the_models_greedy_output(loaded, greedy):
    at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Overview")
    assert not at.exception and not at.error
    assert greedy == loaded.encode(SOURCE)[::-1]  # the model reverses this source
    said = shown(at.markdown[0].value)
    assert said.endswith(
        "**Target** (what the decoder writes): " + "  ".join(f"{i}:{loaded.pieces[t]}" for i, t in enumerate(greedy))
    )
    assert any("greedy output" in c.value for c in at.caption)
    source = loaded.encode(SOURCE)
    with torch.no_grad():  # teacher-forced on its own output, it predicts that output at every position
        logits = loaded.model(torch.tensor([source]), shift_right(torch.tensor([greedy]), 0)).logits[0]
    assert logits.argmax(-1).tolist() == greedy


def test_url_settings_survive_a_rerun():
    at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Streams", target="li ze to mi ko ba")
    assert not at.exception and not at.error
    at.selectbox(key="explore_stack").set_value("encoder").run()
    at.selectbox(key="explore_pos").select(3).run()
    at.run()
    assert not at.exception and not at.error
    for name, value in (
        ("prompt", SOURCE),
        ("target", "li ze to mi ko ba"),
        ("view", "Streams"),
        ("stack", "encoder"),
        ("pos", "3"),
        ("model", MODEL),
    ):
        assert at.query_params[name] in (value, [value]), name
    assert at.session_state["explore_view"] == "Streams" and at.session_state["explore_pos"] == 3
    assert "“3:to” in the encoder" in titled(at, "in the encoder")["layout"]["title"]["text"].replace("\u2060", "")


def test_bad_input_says_why_and_keeps_what_was_typed():
    at = start("screens/explore.py", model=MODEL, prompt=SOURCE, view="Attention")
    at.text_area(key="explore_prompt").set_value("ba ko cow")
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and "The source: Unknown word" in shown(at.error[0].value)
    assert at.text_area(key="explore_prompt").value == "ba ko cow"
    at.text_area(key="explore_prompt").set_value(" ".join(["ba", "ko"] * 9))  # 18 tokens: the context is 16
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and "The source is 18 tokens; this model's context is 16 tokens" in shown(at.error[0].value)
    at.text_area(key="explore_prompt").set_value(SOURCE)
    at.text_input(key="explore_target").set_value("li ze dog")
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and "The target: Unknown word" in shown(at.error[0].value)
    at.text_input(key="explore_target").set_value("")  # back to the model's own output: every view works again
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and not at.error and charts(at)


def test_lesson_11_links_to_the_explorer_on_the_micro_model():
    at = start("course/cross_attention.py")
    assert not at.exception
    (link,) = [link.proto for link in at.get("page_link") if "micro-model in the explorer" in link.proto.label]
    assert link.page == "explore" and f"model={MODEL}" in link.query_string and "view=Attention" in link.query_string
    assert "target" not in link.query_string  # no target: the model's own output


# The analyses, against independent computations


@pytest.fixture(scope="module")
def traced(loaded):
    source = loaded.encode(SOURCE)
    target = loaded.encode("ko ba mi to li ze")
    return source, target, run_seq2seq_trace(loaded.model, source, target, backward=True)


def test_predictions_are_the_log_softmax_and_its_top_tokens(traced):
    _, target, trace = traced
    seen = predictions(trace, target, k=4)
    log_probs = torch.log_softmax(trace["hook_logits"].double(), -1).numpy()
    expected = -log_probs[np.arange(len(target)), target]
    np.testing.assert_allclose(seen.loss, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen.p_target, np.exp(-expected), rtol=1e-5)
    np.testing.assert_array_equal(seen.loss, trace["hook_loss"].double().numpy())  # the model's own, per position
    assert seen.mean_loss == pytest.approx(trace.loss, rel=1e-6)
    own = trace["hook_log_probs"].double().numpy()  # the model's own float32 log-softmax: its ties and order
    order = np.argsort(-own, axis=-1, kind="stable")[:, :4]
    assert (seen.top_ids == order).all()
    np.testing.assert_allclose(seen.top_probs, np.exp(np.take_along_axis(log_probs, order, -1)), rtol=1e-5)
    with pytest.raises(Exception, match="The target has 2 tokens"):
        predictions(trace, target[:2])


def test_stream_points_norms_and_vectors(loaded, traced):
    _, _, trace = traced
    encoder, decoder = stream_points(trace, ENCODER), stream_points(trace, DECODER)
    assert [name for _, name in encoder] == [
        "encoder.blocks.0.hook_resid_pre",
        "encoder.blocks.0.hook_resid_mid",
        "encoder.blocks.0.hook_resid_post",
        "encoder.blocks.1.hook_resid_mid",
        "encoder.blocks.1.hook_resid_post",
        "encoder.ln_final.hook_out",
    ]
    assert [name for _, name in decoder][1:4] == [
        "decoder.blocks.0.hook_resid_mid",
        "decoder.blocks.0.hook_resid_cross",
        "decoder.blocks.0.hook_resid_post",
    ]
    assert len(decoder) == 2 + 3 * loaded.cfg.n_decoder_layers
    norms = stream_norms(trace, decoder)
    by_hand = np.stack([np.sqrt((trace[name].double().numpy() ** 2).sum(-1)) for _, name in decoder])
    np.testing.assert_allclose(norms, by_hand, rtol=1e-12)
    vectors = stream_vectors(trace, encoder, 2)
    np.testing.assert_array_equal(vectors, np.stack([trace[name][2].double().numpy() for _, name in encoder]))


def test_most_attended_is_each_rows_argmax_and_max():
    rows = np.array([[0.1, 0.7, 0.2], [0.4, 0.4, 0.2], [0.0, 0.0, 1.0]])
    where, share = most_attended(rows)
    assert where.tolist() == [1, 0, 2]  # a tie: the first
    np.testing.assert_array_equal(share, [0.7, 0.4, 1.0])


def test_greedy_target_is_the_engines_generation(loaded, greedy):
    assert greedy_target(loaded, SOURCE, len(greedy)) == greedy
    assert greedy_target(loaded, SOURCE, 2) == greedy[:2]
