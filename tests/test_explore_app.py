"""The explorer page, run in-process by Streamlit's AppTest: every view on the worked example,
the default model and a GPT-2 checkpoint directory, each drawing the engine's own numbers (the
references are run_trace and model/analysis.py, called here directly; float32 in the browser
payload, so 1e-6 relative)."""

import base64
import copy
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch

from glassbox.app.explore import VIEWS
from glassbox.model.analysis import attention_pair, logit_lens
from glassbox.model.engine import GRAD, Target, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import (
    attention_sent,
    backward_sent,
    charts,
    choose_in_page,
    exact,
    played,
    shown,
    start,
    step_in_page,
    values,
    z,
)

PROMPT = "the cat sat on the"


def titled(at, text: str) -> dict:
    (chart,) = [c for c in charts(at) if text in c["layout"].get("title", {}).get("text", "")]
    return chart


@pytest.fixture(scope="module")
def gpt2_bf16_dir(gpt2_dir, tmp_path_factory):
    """The GPT-2 directory under another path, so that the server-wide GLASSBOX_DTYPE=bfloat16 of
    its runs gives it its own entries in the process's shared model and trace caches."""
    path = tmp_path_factory.mktemp("gpt2-bf16") / "gpt2"
    shutil.copytree(gpt2_dir, path)
    return path


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("model", ["worked-example", "gpt2", "gpt2 in bfloat16"])
def test_every_view_opens_on_every_kind_of_model(view, model, gpt2_dir, gpt2_bf16_dir, monkeypatch):
    name = {"worked-example": model, "gpt2": str(gpt2_dir), "gpt2 in bfloat16": str(gpt2_bf16_dir)}[model]
    if model.endswith("bfloat16"):  # a half-precision model: every view still draws, the caption says so
        monkeypatch.setenv("GLASSBOX_DTYPE", "bfloat16")
    prompt = PROMPT if model == "worked-example" else "The cat sat on the mat; the dog sat on the log."
    at = start("screens/explore.py", model=name, prompt=prompt, view=view)
    assert not at.exception and not at.error, view
    assert at.session_state["explore_view"] == view
    assert ("computed in bfloat16" in at.caption[1].value) == model.endswith("bfloat16")
    if view == "Export":
        assert len(at.get("download_button")) == 2 and "/explore?" in at.code[0].value
    elif view == "Compare":  # it asks for a second prompt first
        assert "prompt B" in at.info[0].value
    elif view == "Features":  # no curated SAE for these models: it asks for one
        assert "Type a folder" in at.info[-1].value
    elif view == "Attribution graph":  # no shipped transcoders for these models: it asks for a folder
        assert "glassbox train-transcoder" in at.info[-1].value
    elif view == "Backward":  # its first step's maps, drawn in the page
        assert backward_sent(at)["step"]["grids"], view
    else:
        assert charts(at), view


def test_attention_view_sends_the_traced_scores_pattern_queries_and_keys_to_the_page():
    """A small model's blocks and heads go to the page once (app/components/attention_head.py);
    choosing a block, a head and positions there comes back into the session and the URL, and
    leaves the element as it was (Streamlit then sends a reference, not the numbers again); a
    choice the server makes (a link) goes with a new pick. Reference: run_trace's own tensors,
    exactly (this model computes in float64, and float64 is sent); the page's arithmetic on them
    is held to attention_pair in tests/test_attention_in_the_page.py."""
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    assert not [s for s in at.selectbox if s.key == "explore_block"]  # every block is sent: chosen in the page
    element = lambda: next(c.proto.json for c in at.get("bidi_component") if '"blocks"' in c.proto.json)  # noqa: E731
    first = element()
    choose_in_page(at, 1, 1, 4, 2)
    assert not at.exception and element() == first
    assert at.query_params["block"] in ("2", ["2"]) and at.query_params["head"] in ("2", ["2"])  # counted from 1
    sent = attention_sent(at)
    assert [b["block"] for b in sent["blocks"]] == ["block 1 (blocks.0)", "block 2 (blocks.1)"]
    assert [h["label"] for h in sent["blocks"][1]["heads"]] == ["head 1 ([0])", "head 2 ([1])"]
    loaded = load("worked-example")
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    for h, head in enumerate(sent["blocks"][1]["heads"]):
        assert np.array_equal(head["pattern"], trace["blocks.1.attn.hook_pattern"][h].numpy())
        assert np.array_equal(head["scores"], trace["blocks.1.attn.hook_scores"][h].numpy())
        assert np.array_equal(head["q"], trace["blocks.1.attn.hook_q"][h].numpy())
        assert np.array_equal(head["k"], trace["blocks.1.attn.hook_k"][h].numpy())
    assert sent["labels"] == [f"{i}:{w}" for i, w in enumerate(PROMPT.split())]
    # the head's queries and keys, drawn by the server below, follow the page's choice
    at.toggle(key="explore_qkv").set_value(True).run()
    assert "blocks.1.attn.hook_q[1]" in titled(at, "Queries")["layout"]["title"]["text"]
    # a choice the page did not make (a link followed, another view's position): sent, with a new pick
    pick = json.loads(first)["pick"]
    at.session_state["explore_head"] = 0
    at.run()
    sent = attention_sent(at)
    assert sent["pick"] != pick and sent["chosen"] == {"block": 1, "head": 0, "query": 4, "key": 2}
    # and the page's choice, then the server's going back to the first one it sent: a new pick again
    choose_in_page(at, 1, 1, 4, 2)
    pick = attention_sent(at)["pick"]
    at.session_state["explore_head"] = 0
    at.run()
    assert attention_sent(at)["pick"] != pick and attention_sent(at)["chosen"]["head"] == 0


def decoded_block(block: dict) -> dict:
    """A block as the page is sent it (or fetches it), its heads' numbers decoded (as attention_sent's)."""
    n = len(block["labels"])
    for head in block["heads"]:
        for name, shape in (("scores", (n, n)), ("pattern", (n, n)), ("q", (n, -1)), ("k", (n, -1))):
            if name in head:
                head[name] = np.frombuffer(base64.b64decode(head[name]), dtype=f"<f{block['bytes']}").reshape(shape)
    return block


def fetch_block(at, layer: int) -> dict | None:
    """What the page fetches of block ``layer`` (app/served.py's route: the address it is sent, and
    the answer the route gives for it), decoded; None where the route would answer 404."""
    from glassbox.app import served

    (data,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "blocks" in json.loads(c.proto.json)]
    body = served.answer(data["fetch"]["url"].removeprefix(served.PREFIX + "/"), layer)
    return None if body is None else decoded_block(json.loads(json.dumps(body)))


def test_attention_view_sends_one_block_and_the_page_fetches_the_others(monkeypatch):
    """One block fits IN_PAGE_BYTES, two do not (the worked example: 1,120 bytes a block, float64):
    the block the element opens on is sent, the page's own Block list names every block, and it
    fetches any other (app/served.py) with its scores and pattern as traced. Reference: run_trace's
    tensors, exactly (float64 sent). A page choice leaves the element as it was; a block the page
    could not fetch is the server's to send, with a new pick."""
    from glassbox.app.components.attention_head import fits

    monkeypatch.setattr("glassbox.app.components.attention_head.IN_PAGE_BYTES", 1500)
    assert fits(2, 5, 2, torch.float64) and not fits(2, 5, 2, torch.float64, n_blocks=2)
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    assert not [s for s in at.selectbox if s.key == "explore_block"]  # the page chooses the block
    sent = attention_sent(at)
    assert [b["layer"] for b in sent["blocks"]] == [0] and sent["chosen"]["block"] == 0
    loaded = load("worked-example")
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    block = fetch_block(at, 1)
    assert block["layer"] == 1 and not block["computed"] and block["labels"] == sent["labels"]
    for h, head in enumerate(block["heads"]):
        for name in ("scores", "pattern", "q", "k"):
            assert np.array_equal(head[name], trace[f"blocks.1.attn.hook_{name}"][h].numpy()), name
    assert fetch_block(at, 2) is None  # no such block: 404
    element = lambda: next(c.proto.json for c in at.get("bidi_component") if '"blocks"' in c.proto.json)  # noqa: E731
    first = element()
    choose_in_page(at, 1, 1, 4, 2)
    assert not at.exception and element() == first and at.query_params["block"] in ("2", ["2"])
    # the page could not fetch block 1 (its message says so): the server sends it, with a new pick
    del at.session_state["attention_page_choice"]  # what the callback does with an unfetched choice
    at.run()
    sent = attention_sent(at)
    assert [b["layer"] for b in sent["blocks"]] == [1] and sent["pick"] != json.loads(first)["pick"]


def test_attention_view_of_a_trace_without_every_blocks_queries_has_the_servers_block_list(monkeypatch):
    """Where the trace lacks other blocks' queries and keys (a trace of one block's attention, when
    the whole trace is over the server's budget), the server's Block list chooses the block and only
    that block's heads are sent."""
    monkeypatch.setattr("glassbox.app.components.attention_head.IN_PAGE_BYTES", 1500)
    monkeypatch.setattr("glassbox.app.explore.common.trace_budget", lambda: 0)  # what the view needs, no more
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    at.selectbox(key="explore_block").select(1).run()
    sent = attention_sent(at)
    assert [b["layer"] for b in sent["blocks"]] == [1] and sent["chosen"]["block"] == 1
    assert json.loads(next(c.proto.json for c in at.get("bidi_component") if '"blocks"' in c.proto.json))["fetch"] is None


def test_attention_view_of_a_long_prompt_sends_queries_and_keys_alone(monkeypatch):
    """Over IN_PAGE_BYTES (GPT-2 small's 12 heads at about 150 tokens) but within QK_BYTES, the
    queries and keys alone are sent (run_trace's float64 tensors, 1e-12) of the block the element
    opens on, and fetched of any other, for the page to compute the scores and pattern (held to
    the trace in tests/test_attention_in_the_page.py); the Block list is the page's, and a page
    choice still reaches the session. The trace is the lean one (every block's patterns, q and k:
    no full trace fits a budget of 0)."""
    monkeypatch.setattr("glassbox.app.components.attention_head.IN_PAGE_BYTES", 100)
    monkeypatch.setattr("glassbox.app.explore.common.trace_budget", lambda: 0)
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    assert not [s for s in at.selectbox if s.key == "explore_block"]
    sent = attention_sent(at)
    assert sent["computed"] and [b["layer"] for b in sent["blocks"]] == [0]
    loaded = load("worked-example")
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    for layer, heads in ((0, sent["heads"]), (1, fetch_block(at, 1)["heads"])):
        for h, head in enumerate(heads):  # to 1e-12: the lean trace sums the heads in one product (no
            assert "scores" not in head and "pattern" not in head  # hook_result), so block 2's input differs in its last bits
            assert np.allclose(head["q"], trace[f"blocks.{layer}.attn.hook_q"][h].numpy(), rtol=1e-12, atol=0)
            assert np.allclose(head["k"], trace[f"blocks.{layer}.attn.hook_k"][h].numpy(), rtol=1e-12, atol=0)
    choose_in_page(at, 1, 1, 4, 2)
    assert not at.exception and at.query_params["head"] in ("2", ["2"]) and at.query_params["block"] in ("2", ["2"])
    at.toggle(key="explore_qkv").set_value(True).run()  # the block's q, k, v charts: its whole attention traced
    assert not at.exception and "blocks.1.attn.hook_v[1]" in titled(at, "Values")["layout"]["title"]["text"]


def test_attention_view_of_a_block_over_the_pages_budget_is_drawn_by_the_server(monkeypatch):
    """Over IN_PAGE_BYTES and QK_BYTES (GPT-2 small's 12 heads past about 680 tokens), the server draws the chosen
    head as before: lists for the head and positions, and its maps as plotly heatmaps."""
    monkeypatch.setattr("glassbox.app.components.attention_head.IN_PAGE_BYTES", 100)
    monkeypatch.setattr("glassbox.app.components.attention_head.QK_BYTES", 100)
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    at.selectbox(key="explore_block").select(1).run()
    at.selectbox(key="explore_head").select(1).run()
    at.selectbox(key="explore_pos").select(4).run()
    at.selectbox(key="explore_key_pos").select(2).run()
    assert not at.exception and at.subheader[0].value == "Block 2 (blocks.1), head 2 ([1])"
    assert not [c for c in at.get("bidi_component") if "heads" in json.loads(c.proto.json)]
    loaded = load("worked-example")
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    pattern = z(titled(at, "Pattern: softmax"))
    assert np.allclose(pattern, trace["blocks.1.attn.hook_pattern"][1].cpu().numpy(), rtol=1e-6, atol=1e-7)
    pair = attention_pair(trace, loaded.cfg, 1, 1, 4, 2)
    assert any(f"{pair.score:.6g}" in el.value for el in at.latex)  # the dot product written out ends in the score


def test_residual_view_logit_lens_is_the_engines():
    at = start("screens/explore.py", model="default", prompt="the cat sat on the", view="Residual stream")
    loaded = load("default")
    tokens = loaded.encode("the cat sat on the")
    trace = run_trace(loaded.model, tokens)
    lens = logit_lens(loaded.model, trace, int(trace["hook_probs"][-1].argmax()))
    grid = titled(at, "Top token after each block")
    assert np.allclose(z(grid), lens.top_probs[:, :, 0], rtol=1e-6)
    assert grid["data"][0]["text"][-1][-1] == "␣mat"  # the default model's top prediction, last row = its output
    at.text_input(key="explore_lens_token").set_value("no such token here").run()
    assert not at.exception and "Following the top prediction" in at.warning[0].value


def open_part(at, label: str):
    """One of the Backward view's lazy tabs opened (app/explore/backward.py: part_tabs), as a click would."""
    at.session_state["explore_backward_part"] = label
    return at.run()


def test_backward_view_differentiates_the_chosen_target_and_steps_through():
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward")
    loaded = load("worked-example")
    tokens = loaded.encode(PROMPT)
    article = run_trace(loaded.model, tokens, backward=True, target=Target(loaded.tokenizer.token_id("mat"), 4))
    # opened on the worked example's model, the loss is the article's, −log p(mat) = 1.768 as it prints
    assert f"L = {article.loss:.6g}" in at.markdown[0].value and abs(article.loss - 1.768) < 5e-4
    lm = run_trace(loaded.model, tokens, backward=True)
    at.radio(key="explore_target_mode").set_value("mean next-token loss").run()
    assert f"L = {lm.loss:.6g}" in at.markdown[0].value
    url_chose = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward", target="")
    assert f"L = {lm.loss:.6g}" in url_chose.markdown[0].value  # a URL's own choice is kept
    at.radio(key="explore_target_mode").set_value("one token at one position").run()
    at.text_input(key="explore_target").set_value("mat").run()
    at.selectbox(key="explore_target_pos").select(4).run()
    assert not at.exception and not at.error
    target = run_trace(loaded.model, tokens, backward=True, target=Target(loaded.tokenizer.token_id("mat"), 4))
    assert f"L = {target.loss:.6g}" in at.markdown[0].value  # −log p(mat), the article's 1.768
    assert at.query_params["target"] in ("mat", ["mat"])
    assert not [c for c in charts(at) if "Input saliency" in c["layout"].get("title", {}).get("text", "")]  # a lazy tab
    open_part(at, "Input saliency")
    saliency = titled(at, "Input saliency")
    expected = (target[GRAD + "hook_embed"] * target["hook_embed"]).sum(-1).cpu().numpy()
    unit = re.search(r"×10<sup>(-?\d+)</sup>", saliency["layout"]["yaxis"]["title"]["text"])  # the bars' power of ten
    assert np.allclose(values(saliency["data"][0]["y"]) * 10.0 ** int(unit.group(1) if unit else 0), expected, rtol=1e-6)
    open_part(at, "Step through the backward pass")
    keys = backward_sent(at)["keys"]
    gaps = []
    for key in keys[1:]:  # every step, chosen in the page as ▶ does
        step_in_page(at, key)
        assert not at.exception and not at.error, key
        gaps += [float(c.value.rsplit(": ", 1)[1].rstrip(".")) for c in at.caption if "from autograd's" in c.value]
    assert len(gaps) == 6 * loaded.cfg.n_layers and max(gaps) < 1e-12  # every W_Q…W_out, rebuilt as a product
    assert at.session_state["explore_bstep"] == "embed" == keys[-1]
    open_part(at, "Dead neurons")
    assert "exactly zero" in " ".join(m.value for m in at.markdown)  # the ReLU model's dead neurons


def test_bad_input_says_why_and_keeps_what_was_typed():
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    at.text_area(key="explore_prompt").set_value("the cow sat")
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and "Unknown word" in at.error[0].value
    assert at.text_area(key="explore_prompt").value == "the cow sat"
    at.text_area(key="explore_prompt").set_value("the cat sat on the mat")  # six words: the toy's context is 5
    next(b for b in at.button if b.label == "Run").click().run()
    assert not at.exception and "context is 5 tokens" in at.error[0].value
    missing = start("screens/explore.py", model="/no/such/model", view="Overview")
    assert not missing.exception and "No model" in missing.error[0].value
    assert missing.text_input(key="explore_model_dir").value == "/no/such/model"
    bad_target = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward", target="cow")
    assert not bad_target.exception and "mean next-token loss" in bad_target.error[0].value
    assert backward_sent(bad_target)["step"]["grids"]  # the view still works, on the default loss


def test_default_model_overview_counts_and_predicts():
    at = start("screens/explore.py", model="default", prompt="Lily had a big", view="Overview")
    tokens = load("default").encode("Lily had a big")
    assert f"this prompt: {len(tokens)} tokens" in " ".join(c.value for c in at.caption)
    table = at.dataframe[0].value
    assert table["count"].sum() == sum(p.numel() for p in load("default").model.parameters())
    for count, text in zip(table["count"], table["parameters"]):  # names of one shape together, each counted
        groups = re.findall(r"((?:[\w.]+, )*[\w.]+) \[([\d, ]+)\]", text)
        assert (
            sum((names.count(",") + 1) * math.prod(int(n) for n in shape.split(", ")) for names, shape in groups) == count
            and len(text) <= 90
        ), text
    bars = titled(at, "What the model predicts")
    # a full trace, as the page's: a partial one computes the uncaptured norms with torch's fused
    # kernel, equal to about 1e-6 (README, "The engine")
    probs = run_trace(load("default").model, tokens)["hook_probs"][-1]
    assert values(bars["data"][0]["y"])[0] == pytest.approx(float(probs.max()), rel=1e-6)


def test_the_same_tensor_has_the_same_label_and_numbers_on_both_pages():
    """Blocks and heads are counted from 1 with the engine's index beside them on both pages, and
    the worked example's A(1,1) is the explorer's pattern of block 1, head 1 on the same prompt.
    Reference: the engine's own trace; drawn as float32 (worked example float64), atol 1e-6."""
    loaded = load("worked-example")
    expected = run_trace(loaded.model, loaded.encode(PROMPT))["blocks.0.attn.hook_pattern"][0].cpu().numpy()

    worked = start("screens/worked_example.py", step="b1-softmax")
    assert not worked.exception
    step = played(worked, "b1-softmax")
    assert step["panels"][0]["label"] == "head 1 ([0])"
    assert "block 1 (blocks.0)" in step["pipeline"]  # the pipeline strip
    (pattern,) = [g for g in step["panels"][0]["outputs"] if g["name"] == "blocks.0.attn.hook_pattern[0]"]
    assert np.allclose(exact(pattern), expected, atol=1e-6)

    explorer = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention", block="1", head="1")
    assert not explorer.exception
    sent = attention_sent(explorer)  # the page titles the head "Block 1 (blocks.0), head 1 ([0])"
    assert sent["block"] == "block 1 (blocks.0)" and sent["heads"][0]["label"] == "head 1 ([0])"
    assert sent["chosen"]["block"] == 0 and sent["chosen"]["head"] == 0
    assert any("block 1 (blocks.0)" in el.proto.body for el in explorer.get("html"))
    assert sent["prefix"] == "blocks.0.attn."  # the page names the map blocks.0.attn.hook_pattern[0]
    assert np.allclose(sent["heads"][0]["pattern"], expected, atol=1e-6)


def test_a_link_counts_blocks_and_heads_from_one_and_says_what_it_corrected():
    explorer = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention", block="99", head="0")
    notes = [shown(el.value) for el in explorer.info]
    assert "The link's block=99 is outside 1–2: using 2." in notes  # the worked example's model has 2 blocks
    assert "The link's head=0 is outside 1–2: using 1." in notes
    sent = attention_sent(explorer)
    assert sent["block"] == "block 2 (blocks.1)" and sent["chosen"]["head"] == 0


def test_values_are_written_into_cells_only_where_they_fit(gpt2_dir):
    """A 5×2 grid of queries in half the page has its values written in; 16 head dimensions in half
    of it do not (they would run into each other) and keep their exact values on hover."""
    small = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Attention")
    small.toggle(key="explore_qkv").set_value(True).run()
    assert titled(small, "Queries")["data"][0].get("text")  # 5 positions × 2 dimensions
    wide = start("screens/explore.py", model=str(gpt2_dir), prompt="hello world, this is a test", view="Attention")
    assert not wide.exception and not [c for c in charts(wide) if "Queries" in c["layout"]["title"]["text"]]
    wide.toggle(key="explore_qkv").set_value(True).run()  # q, k, v, z and the output are one toggle away
    queries = titled(wide, "Queries")["data"][0]
    assert values(queries["z"]).shape[1] == 16 and not queries.get("text")
    assert "%{z" in queries["hovertemplate"]


def test_block_means_are_labelled_by_the_columns_they_average():
    """The default model's 512 FFN neurons are drawn as 256 block means (at most MAX_COLS), two
    neurons each: a tick at block b reads "2b–2b+1", the range it averages (reference: 512 / 256,
    worked out here), never a bare first index with an ellipsis."""
    at = start("screens/explore.py", prompt=PROMPT, view="MLP")
    axis = titled(at, "Pre-activation")["layout"]["xaxis"]
    assert len(axis["ticktext"]) > 3
    for block, text in zip(axis["tickvals"], axis["ticktext"]):
        assert text == f"{2 * block}–{2 * block + 1}"


def test_zooming_in_shows_exact_values_and_zooming_out_the_block_means_again():
    """The figures are kept with the trace by zoom: narrowing the default model's 512 neurons to
    100 draws exactly hook_pre's columns 0–99 (reference: run_trace, float32 in the payload,
    ≤1e-6), and widening them again goes back to the block-means image."""
    at = start("screens/explore.py", prompt=PROMPT, view="MLP")
    assert titled(at, "Pre-activation")["data"][0]["type"] == "image"
    at.slider(key="ffn:pre:cols").set_value((0, 100)).run()
    loaded = load("default")
    reference = run_trace(loaded.model, loaded.encode(PROMPT), names=["blocks.0.mlp.hook_pre"])
    drawn = z(titled(at, "Pre-activation"))
    assert drawn.shape == (5, 100)
    np.testing.assert_allclose(drawn, reference["blocks.0.mlp.hook_pre"][:, :100].numpy(), rtol=1e-6, atol=1e-6)
    at.slider(key="ffn:pre:cols").set_value((0, 512)).run()
    assert titled(at, "Pre-activation")["data"][0]["type"] == "image"


def test_backward_view_asks_for_a_head_only_where_a_step_has_heads_and_explains_zero_gradients():
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward", bstep="logits")
    selectboxes = lambda: {s.key for s in at.selectbox}  # noqa: E731
    assert "explore_head" not in selectboxes()  # loss → logits has no head axis
    step_in_page(at, "b0-qkv")
    assert "explore_head" in selectboxes() and not at.exception
    captions = lambda: " ".join(c.value for c in at.caption)  # noqa: E731
    assert "later position" not in captions() and "the last one, under the mean" not in captions()  # mat at 4: the last
    at.selectbox(key="explore_target_pos").select(2).run()
    open_part(at, "Dead neurons")
    assert "reads only position 2" in captions()
    at.radio(key="explore_target_mode").set_value("mean next-token loss").run()
    assert "the last one, under the mean next-token loss" in captions()


def test_head_view_draws_a_line_for_every_weight_of_at_least_five_percent_in_every_head():
    """The head view's lines, read back per head panel, are exactly the (query, key) pairs whose
    weight in the engine's pattern is ≥ 0.05. Reference: run_trace's hook_pattern."""
    prompt = "the cat sat on the mat and the dog ran"
    at = start("screens/explore.py", model="default", prompt=prompt, view="Attention", block="2")
    assert not at.exception
    fig = titled(at, "Every head of block 2 (blocks.1) as lines")
    loaded = load("default")
    pattern = run_trace(loaded.model, loaded.encode(prompt))["blocks.1.attn.hook_pattern"].cpu().numpy()
    drawn = {h: set() for h in range(loaded.cfg.n_heads)}
    for trace in fig["data"]:
        if trace.get("mode") != "lines":
            continue
        xs, ys = trace["x"], trace["y"]
        for i in range(0, len(xs), 3):  # x0, x0 + 1, None per line
            drawn[trace["meta"]].add((int(ys[i]), int(ys[i + 1])))
    for h in range(loaded.cfg.n_heads):
        expected = {(q, k) for q, k in zip(*np.nonzero(pattern[h] >= 0.05))}
        assert drawn[h] == expected, h


def test_backward_view_writes_out_any_cells_arithmetic_on_any_model(gpt2_dir):
    """The worked example's model at a softmax-backward step, and a GPT-2 directory at the head's
    input: the written arithmetic's recomputed value is autograd's (the caption prints both, and
    the test compares them with the engine's trace, 6 significant digits)."""
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward", bstep="b0-pattern")
    at.selectbox(key="explore_cell_tensor").set_value("grad:blocks.0.attn.hook_scores_masked").run()
    at.selectbox(key="explore_cell_row").set_value(3).run()
    at.selectbox(key="explore_cell_col").set_value(1).run()
    assert not at.exception
    loaded = load("worked-example")
    trace = run_trace(loaded.model, loaded.encode(PROMPT), backward=True, target=Target(5, 4))
    expected = trace[GRAD + "blocks.0.attn.hook_scores_masked"][0, 3, 1].item()
    assert any("softmax" in el.value for el in at.latex)
    assert f"Autograd's value: {expected:.6g}; recomputed above in float64 from the numbers written: {expected:.6g}." in [
        shown(c.value) for c in at.caption
    ]

    wide = start("screens/explore.py", model=str(gpt2_dir), prompt="hello world", view="Backward", bstep="ln_final")
    assert not wide.exception
    wide.selectbox(key="explore_cell_tensor").set_value("grad:ln_final.hook_out").run()
    assert not wide.exception and any("the other" in el.value and "terms" in el.value for el in wide.latex)


def test_a_prompt_longer_than_the_articles_model_says_why_it_is_that_short():
    at = start("screens/explore.py", model="worked-example", prompt="the cat sat on the mat", view="Overview")
    (error,) = [shown(e.value) for e in at.error]
    assert "The prompt is 6 tokens; this model's context is 5 tokens." in error and "positional table W_P has 5 rows" in error
    assert at.text_area(key="explore_prompt").value == "the cat sat on the mat"  # what was typed stays


def test_ask_why_patches_attributes_and_splits_the_logit():
    """The Ask why view on the default model. References: run_trace's logits for the metric and
    the logit split (float32 payload, ≤1e-4); patching's own arithmetic for one cell (block 1's
    residual stream at the one position where the prompts differ is the clean run: restored 1)."""
    clean, corrupt = "Zoe had a frog. Zoe loved the", "Zoe had a boat. Zoe loved the"
    at = start("screens/explore.py", prompt=clean, view="Ask why")
    at.text_input(key="explore_why_token").input(" frog")
    at.text_input(key="explore_why_wrong").input(" boat").run()
    loaded = load("default")
    logits = run_trace(loaded.model, loaded.encode(clean), names=["hook_logits"])["hook_logits"][-1]
    frog, boat = loaded.tokenizer.token_id(" frog"), loaded.tokenizer.token_id(" boat")
    said = shown(" ".join(c.value for c in at.caption))
    shown_logit = re.search(r"the model's logit\(␣frog\) is (-?\d+(?:\.\d+)?(?:e-?\d+)?)", said)
    assert shown_logit and float(shown_logit[1]) == pytest.approx(float(logits[frog]), abs=1e-4), said
    parts = titled(at, "What each part writes into")
    assert len(values(parts["data"][0]["x"])) == 16
    at.segmented_control(key="explore_why_method").set_value("integrated gradients").run()
    assert "Completeness" in shown(" ".join(c.value for c in at.caption))

    # ablation: block 1, head 1 set to zero, against a copy whose W_O[0] is zero (≤1e-6, float32)
    edited = copy.deepcopy(loaded.model)
    with torch.no_grad():
        edited.blocks[0].attn.W_O[0].zero_()
        p_edited = edited(torch.tensor([loaded.encode(clean)])).logits[0, -1].softmax(-1)
    bars = titled(at, "set to zero")
    assert "blocks.0.attn.hook_z[0]" in bars["layout"]["title"]["text"]
    labels = bars["data"][1]["y"]
    (row,) = [i for i, label in enumerate(labels) if "frog" in label]
    assert values(bars["data"][1]["x"])[row] == pytest.approx(float(p_edited[frog]), abs=1e-6)
    at.radio(key="explore_why_mode").set_value("mean on another prompt").run()
    at.text_input(key="explore_why_reference").input("Sam had a boat.").run()
    assert "set to its mean on the reference" in titled(at, "Next token after")["layout"]["title"]["text"]

    at.text_input(key="explore_why_corrupt").input(corrupt)
    next(b for b in at.button if b.label == "Patch").click().run()
    assert not at.exception and not at.error
    metric = shown(" ".join(m.value for m in at.markdown))
    # the page's figure (4 decimals) against the engine's float32 logits: within the rounding, not digit for digit
    written = float(re.search(r"Metric on this prompt \*\*(-?[\d.]+)\*\*", metric)[1])
    assert written == pytest.approx(float(logits[frog] - logits[boat]), abs=5e-5 + 1e-5)
    restored = z(titled(at, "Fraction restored: patched"))
    assert restored.shape == (loaded.cfg.n_layers, 8)
    assert restored[0, 3] == pytest.approx(1.0, abs=1e-5)
    assert z(titled(at, "Attribution patching's estimate")).shape == restored.shape
    scales = [titled(at, t)["data"][0]["zmax"] for t in ("Fraction restored: patched", "Attribution patching's estimate")]
    assert scales[0] == scales[1] >= np.abs(restored).max()  # one colour scale for the two


def test_ask_why_offers_tokens_to_pick_and_says_where_attribution_patching_is_unreliable():
    """References: the model's top 5 predictions (run_trace's hook_probs at the last position) and
    the prompt's own tokens are what the token boxes offer, and a pick writes the token's text into
    the box; attribution patching's agreement with the patched runs (activation_patching, run
    here): on "MLP output" the correlation is −0.94 and the page warns, on the residual stream
    0.80 and it does not. The corrupted-prompt hint names a pair only for the model it works on."""
    from glassbox.app.explore.why import SITES
    from glassbox.model.analysis.patching import activation_patching

    clean, corrupt = "Zoe had a frog. Zoe loved the", "Zoe had a boat. Zoe loved the"
    loaded = load("default")
    at = start("screens/explore.py", prompt=clean, view="Ask why")
    assert "Zoe had a boat" in shown(" ".join(i.value for i in at.info))  # the pair that works with this model
    probs = run_trace(loaded.model, loaded.encode(clean), names=["hook_probs"])["hook_probs"][-1]
    offered = list(dict.fromkeys(torch.argsort(probs, descending=True, stable=True)[:5].tolist() + loaded.encode(clean)))
    picks = at.selectbox(key="explore_why_token:pick")
    assert len(picks.options) == len(offered) and picks.value is None
    frog, boat = loaded.tokenizer.token_id(" frog"), loaded.tokenizer.token_id(" boat")
    picks.set_value(frog).run()
    assert at.text_input(key="explore_why_token").value == " frog"
    assert at.selectbox(key="explore_why_token:pick").value is None  # the list is ready for another pick
    at.selectbox(key="explore_why_wrong:pick").set_value(offered[-1]).run()  # the prompt's last token
    assert at.text_input(key="explore_why_wrong").value == loaded.tokenizer.pieces[offered[-1]]
    assert "logit(␣frog)" in shown(" ".join(c.value for c in at.caption))
    at.text_input(key="explore_why_wrong").input(" boat").run()  # typed: " boat" is neither predicted nor in the prompt

    at.text_input(key="explore_why_corrupt").input(corrupt)
    for label, site in SITES.items():
        if site not in ("mlp_out", "resid_pre"):
            continue
        at.radio(key="explore_why_site").set_value(label)
        next(b for b in at.button if b.label == "Patch").click().run()
        r, _ = activation_patching(loaded.model, loaded.encode(clean), loaded.encode(corrupt), frog, boat, site).agreement()
        warned = any("unreliable" in w.value for w in at.warning)
        assert (r < 0.5) == warned and (site == "mlp_out") == warned, (site, r)

    other = start("screens/explore.py", model="worked-example", prompt="the cat sat on the", view="Ask why")
    hint = shown(" ".join(i.value for i in other.info))
    assert "keeping its 5 tokens" in hint and "Zoe" not in hint


def test_circuits_view_draws_the_heads_circuits_and_scores():
    """The default model, block 1, head 1. References, computed here: the QK product
    (e W_Q)(e W_K)ᵀ / √d_head over the prompt's distinct tokens, and the induction scores from
    run_trace's patterns on the view's own repeated sequence (float32 payload, ≤1e-5)."""
    at = start("screens/explore.py", prompt=PROMPT, view="Circuits")
    loaded = load("default")
    tokens = list(dict.fromkeys(loaded.encode(PROMPT)))
    attn = loaded.model.blocks[0].attn
    e = loaded.model.embed.W_E.detach()[tokens]
    expected = (e @ attn.W_Q[0].detach()) @ (e @ attn.W_K[0].detach()).T / attn.W_Q.shape[-1] ** 0.5
    np.testing.assert_allclose(z(titled(at, "QK circuit")), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert z(titled(at, "OV circuit")).shape == (len(tokens), len(tokens))
    half = np.random.default_rng(0).integers(0, len(loaded.tokenizer.pieces), 20).tolist()
    assert loaded.tokenizer.prefix() == []  # the default model's tokenizer puts nothing first
    trace = run_trace(loaded.model, half + half, names=["blocks.*.attn.hook_pattern"])
    scores = [
        [
            np.mean([trace[f"blocks.{b}.attn.hook_pattern"][h, t, t - 19].item() for t in range(20, 40)])
            for h in range(loaded.cfg.n_heads)
        ]
        for b in range(loaded.cfg.n_layers)
    ]
    np.testing.assert_allclose(z(titled(at, "Induction score")), scores, atol=1e-5)
    at.text_input(key="explore_circuit_tokens").input("Zoe Sam frog").run()  # a chosen set of tokens
    chosen = list(dict.fromkeys(loaded.encode("Zoe Sam frog")))
    e = loaded.model.embed.W_E.detach()[chosen]
    expected = (e @ attn.W_Q[0].detach()) @ (e @ attn.W_K[0].detach()).T / attn.W_Q.shape[-1] ** 0.5
    np.testing.assert_allclose(z(titled(at, "QK circuit")), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_compare_view_shows_two_prompts_and_their_difference():
    """Prompt A and B differing in their second token, on the default model. References:
    run_trace of each, subtracted here (float32 payload, ≤1e-5); causality: the first position's
    difference is exactly 0, as nothing before a token changed."""
    a, b = "the cat sat on the", "the dog sat on the"
    at = start("screens/explore.py", prompt=a, view="Compare")
    assert at.info  # asks for prompt B first
    at.text_input(key="explore_compare_prompt").input(b).run()
    assert not at.exception and not at.error
    loaded = load("default")
    name = "blocks.0.hook_resid_post"
    expected = (
        run_trace(loaded.model, loaded.encode(a), names=[name])[name]
        - run_trace(loaded.model, loaded.encode(b), names=[name])[name]
    ).numpy()
    difference = titled(at, "A − B")
    drawn = z(difference) if difference["data"][0]["type"] == "heatmap" else None
    if drawn is None:  # drawn as block means: zoom in to the exact values
        at.slider(key="cmp:diff:cols").set_value((0, 64)).run()
        drawn, expected = z(titled(at, "A − B")), expected[:, :64]
    np.testing.assert_allclose(drawn, expected, atol=1e-5)
    assert np.all(drawn[0] == 0) and np.abs(drawn[1]).max() > 0
    assert titled(at, "A − B")["data"][0]["y"][1] == "1:␣cat | 1:␣dog"


def test_compare_reads_the_key_value_head_a_query_head_uses():
    """Grouped-query: 4 query heads share 2 key/value heads; query head 1 reads key/value head 0
    (ModelConfig.kv_head), so Compare's hook_k for head 1 is hook_k[0], not hook_k[1]."""
    import types

    from glassbox.model.engine import ModelConfig
    from glassbox.model.plot.grid import tensor_grid

    ctx = types.SimpleNamespace(
        cfg=ModelConfig(vocab_size=10, n_ctx=8, d_model=16, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=8),
        labels=["0:a", "1:b", "2:c"],
    )
    keys = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # kv_head × position × d_head
    values, rows, _, row_title, _, _ = tensor_grid(ctx, "blocks.0.attn.hook_k", keys, head=1)
    np.testing.assert_array_equal(values, keys[0].numpy())
    assert rows == ctx.labels and row_title == "position"
    values, *_ = tensor_grid(ctx, "blocks.0.attn.hook_k", keys, head=3)
    np.testing.assert_array_equal(values, keys[1].numpy())


def test_the_layernorm_view_names_what_an_rmsnorm_has():
    """micro-moe's norms are RMSNorm without a shift (its config): the view records no mean,
    says so, and draws the learned scale alone."""
    assert load("micro-moe").cfg.norm == "rmsnorm"
    at = start("screens/explore.py", model="micro-moe", prompt="the cat sat on the", view="LayerNorm")
    assert not at.exception and not at.error
    per_position = titled(at, "Per position")["layout"]["title"]["text"]
    assert "hook_scale" in per_position and "hook_mean" not in per_position
    assert any("RMSNorm" in m.value and "no mean is subtracted" in m.value for m in at.markdown)
    at.session_state["explore_norm_stage"] = "Learned scale"  # a lazy tab (app/explore/layernorm.py)
    at.run()
    assert "Learned scale (this norm has no shift)" in titled(at, "Learned scale")["layout"]["title"]["text"]


def test_the_heads_queries_and_keys_are_the_ones_its_scores_multiply(tmp_path):
    """On a QK-norm model without RoPE the Attention view's Queries and Keys charts show the
    normed q and k (q_norm.hook_out), as the scores multiply them, not the projections.
    Reference: run_trace's own tensors, and the scores recomputed from them (1e-5, float32)."""
    from glassbox.model.engine import ModelConfig, Transformer
    from glassbox.model.io.checkpoint import save

    cfg = ModelConfig(vocab_size=598, n_ctx=32, d_model=16, n_layers=1, n_heads=2, d_ff=24, qk_norm=True)
    save(
        tmp_path / "normed",
        Transformer(cfg).init_weights(1).float(),
        load("default").tokenizer,
        "float32",
        {"source": "a test's"},
    )
    at = start("screens/explore.py", model=str(tmp_path / "normed"), prompt=PROMPT, view="Attention")
    at.toggle(key="explore_qkv").set_value(True).run()
    assert not at.exception
    queries, keys = titled(at, "Queries"), titled(at, "Keys")
    assert "blocks.0.attn.q_norm.hook_out[0]" in queries["layout"]["title"]["text"]
    assert "blocks.0.attn.k_norm.hook_out[0]" in keys["layout"]["title"]["text"]
    loaded = load(str(tmp_path / "normed"))
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    q, k = z(queries), z(keys)
    assert np.array_equal(q, trace["blocks.0.attn.q_norm.hook_out"][0].numpy())
    recomputed = q @ k.T * cfg.d_head**-0.5
    assert np.allclose(recomputed, trace["blocks.0.attn.hook_scores"][0].numpy(), rtol=1e-5, atol=1e-6)


def test_circuits_whole_vocabulary_table_lists_text_not_byte_fragments(gpt2_dir):
    """Issue 44, item 14: a byte-level vocabulary holds fragments of characters (bytes 0x80–0xFF
    alone, labelled <0xD0>); the Circuits view's whole-vocabulary table leaves them out and says
    how many. Reference: the tokenizer's readable pieces, counted here, and the OV circuit over the
    whole vocabulary recomputed from the weights (e W_V W_O W_U) with the fragments masked."""
    loaded = load(str(gpt2_dir))
    pieces = [loaded.tokenizer.readable(i) for i in range(loaded.tokenizer.vocab_size)]
    n_fragments = sum("<0x" in p for p in pieces)
    assert n_fragments > 0
    at = start("screens/explore.py", model=str(gpt2_dir), prompt="The cat sat on the mat.", view="Circuits")
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "top 1" in d.value.columns and len(d.value.columns) > 1)
    cells = [shown(c) for c in table.astype(str).to_numpy().ravel()]  # as read: the word joiners gone
    assert cells and not any("<0x" in c for c in cells)
    assert any(f"{n_fragments} byte fragments" in shown(m.value) for m in at.markdown)


def test_tokens_view_draws_its_parts_as_tabs_and_the_pca_of_the_embedding_matrix_on_its_tab():
    """The Tokens view opens on the token rows alone (its other parts are lazy tabs); the
    embedding matrix's tab draws the PCA, the prompt's points at their coordinates on the
    matrix's principal components. Reference: numpy's SVD of the centred float64 W_E (each
    component's sign is free: compared by absolute value), 1e-4 of the largest coordinate."""
    prompt = "the cat sat on the mat"
    at = start("screens/explore.py", model="default", prompt=prompt, view="Tokens & embeddings")
    titles = lambda: [c["layout"].get("title", {}).get("text", "") for c in charts(at)]  # noqa: E731
    assert any("Token embeddings W_E[token]" in t for t in titles()) and not any("PCA of embed.W_E" in t for t in titles())
    at.session_state["explore_tokens_part"] = "The embedding matrix"
    at.run()
    assert not at.exception
    fig = titled(at, "PCA of embed.W_E")
    first = at.selectbox(key="explore_pca_first").value  # the pair of components shown (PC2–3 on this model)
    loaded = load("default")
    W_E = loaded.model.embed.W_E.detach().double().numpy()
    centred = W_E - W_E.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    ids = list(dict.fromkeys(loaded.encode(prompt)))
    expected = centred[ids] @ vt[first : first + 2].T
    points = next(t for t in fig["data"] if t.get("name") == "this prompt")
    shown = np.stack([values(points["x"]), values(points["y"])], axis=1)
    assert np.allclose(np.abs(shown), np.abs(expected), atol=1e-4 * np.abs(expected).max())
