"""The app's pages, run in-process by Streamlit's AppTest."""

import copy
import json

import pytest
import numpy as np
import torch

from model.io.checkpoint import load
from model.lesson.steps import worked_example_steps
from model.engine import run_trace
from model.lesson.article import published

from tests.helpers import charts, shown as shown_text, start, values

WORKED = "screens/worked_example.py"

def test_worked_example_steps_through_every_step_and_back():
    at = start(WORKED)
    article = published()
    loaded = load("worked-example")
    keys = [s.key for s in worked_example_steps(loaded.model, loaded.tokenizer, article, lambda w: "")]
    assert at.selectbox(key="step").value == keys[0]
    seen = [keys[0]]
    next_button = next(b for b in at.button if b.label.startswith("Next"))
    while not next_button.disabled:
        next_button.click().run()
        assert not at.exception and not at.error, seen[-1]
        seen.append(at.selectbox(key="step").value)
        assert at.query_params["step"] == [seen[-1]] or at.query_params["step"] == seen[-1]  # shareable URL
        assert charts(at), seen[-1]
        assert at.latex, seen[-1]  # the step's formula and a cell's arithmetic
        next_button = next(b for b in at.button if b.label.startswith("Next"))
    assert seen == keys
    previous = next(b for b in at.button if b.label.startswith("◀"))
    previous.click().run()
    assert at.selectbox(key="step").value == keys[-2]


def test_the_loss_step_shows_the_articles_loss_and_its_arithmetic():
    at = start(WORKED, step="loss")
    assert at.selectbox(key="step").value == "loss"
    (loss_chart,) = [c for c in charts(at) if "loss" in c["layout"]["title"]["text"]]
    assert loss_chart["data"][0]["text"] == [["1.768"]]
    assert any("-\\log 0.1706" in el.value and "1.7685" in el.value for el in at.latex)


def test_choosing_a_cell_shows_its_dot_product():
    at = start(WORKED, step="b1-scores")
    at.selectbox(key="cell:b1-scores:head 1 ([0]):row").set_value(4).run()
    at.selectbox(key="cell:b1-scores:head 1 ([0]):col").set_value(0).run()
    assert not at.exception
    text = " ".join(el.value for el in at.latex)
    # scores(1,1)[4,0] = Q[4]·K[0]/√2, with the operands written out
    trace = run_trace(load("worked-example").model, [0, 1, 2, 3, 0], names=["*attn.hook_*"])
    q, k = trace["blocks.0.attn.hook_q"][0], trace["blocks.0.attn.hook_k"][0]
    assert f"{q[4, 0].item():.4f}\\times{k[0, 0].item():.4f}" in text
    assert f"{trace['blocks.0.attn.hook_scores'][0, 4, 0].item():.4f}" in text


def test_the_update_step_runs_the_forward_pass_again_with_the_new_weights():
    """The loss and p(mat) after the update. Reference: torch.optim.SGD (lr 0.5) on the shared
    model's copy, LayerNorm's γ and β held (as in the article), −log p(mat) from
    torch.nn.functional.cross_entropy of the model's own logits; the page shows 4 decimals."""
    loaded = load("worked-example")
    config = published()["config"]
    ids, target = torch.tensor([config["input_ids"]]), torch.tensor([config["target_id"]])
    model = copy.deepcopy(loaded.model)
    weights = [p for name, p in model.named_parameters() if ".ln" not in name and not name.startswith("ln_final")]
    loss = lambda: torch.nn.functional.cross_entropy(model(ids).logits[:, -1].double(), target)  # noqa: E731
    before = loss()
    before.backward()
    torch.optim.SGD(weights, lr=config["learning_rate"]).step()
    with torch.no_grad():
        after = loss().item()
        p_after = torch.softmax(model(ids).logits[0, -1].double(), -1)[config["target_id"]].item()

    at = start(WORKED, step="update")
    assert not at.exception
    shown = {m.label: m for m in at.metric}
    assert float(shown["loss −log p(mat)"].value) == pytest.approx(after, abs=6e-5)
    assert f"from {before.item():.4f}" in shown["loss −log p(mat)"].delta
    assert float(shown["p(mat)"].value) == pytest.approx(p_after, abs=6e-5) and after < before.item()
    (bars,) = [c for c in charts(at) if "Next-word probabilities" in c["layout"]["title"]["text"]]
    assert bars["data"][1]["x"][config["target_id"]] == pytest.approx(p_after, abs=1e-9)
    assert any("Train it live" in link.proto.label for link in at.get("page_link"))
    p_before = torch.softmax(loaded.model(ids).logits[0, -1].double(), -1)[config["target_id"]].item()
    said = shown_text(" ".join(m.value for m in at.markdown))
    assert f"{p_after / p_before:.2f} times as likely" in said
    assert f"held {1 - p_before:.4f} together before and {1 - p_after:.4f} after" in said


def test_an_unknown_step_in_the_url_opens_the_first_and_says_so():
    at = start(WORKED, step="zzz")
    assert at.selectbox(key="step").value == "tokens"
    assert any("no step called “zzz”" in w.value for w in at.warning)


def test_a_link_followed_within_the_session_wins_over_what_the_page_remembers():
    """A page_link carries its query parameters into a page the session has already opened (Streamlit
    keeps the session, and its widget state, across such a link and sometimes across a reload): the
    step and the view in the link are the ones shown, not those the session held before."""
    at = start(WORKED, step="b1-scores")
    assert at.selectbox(key="step").value == "b1-scores"
    at.switch_page("screens/welcome.py").run()
    at.query_params["step"] = "b1-ffn-expand"
    at.switch_page(WORKED).run()
    assert at.selectbox(key="step").value == "b1-ffn-expand"
    next(b for b in at.button if b.label.startswith("Next")).click().run()  # its own writes are not links
    assert at.selectbox(key="step").value not in ("b1-ffn-expand", "b1-scores")
    at = start("screens/explore.py", view="Attention")
    assert at.session_state["explore_view"] == "Attention"
    at.switch_page("screens/welcome.py").run()
    at.query_params["view"] = "FFN"
    at.switch_page("screens/explore.py").run()
    assert not at.exception and at.session_state["explore_view"] == "FFN"


def test_welcome_page_names_a_real_step_and_view_for_every_part_of_the_drawing():
    """Each part of the welcome page's drawing links to a worked-example step and an explorer view that
    exist (checked against the steps the engine builds and the explorer's views), and a part chosen in
    the URL is the one described."""
    from app.components.architecture import PARTS
    from app.explore import VIEWS

    loaded = load("worked-example")
    keys = {s.key for s in worked_example_steps(loaded.model, loaded.tokenizer, published(), lambda w: "")}
    for part in PARTS:
        assert part.step in keys and part.view in VIEWS, part
    at = start(part="loss")
    assert not at.exception
    assert any("1.768" in m.value for m in at.markdown)  # the loss part's sentence
    assert charts(at)[0]["data"][0]["customdata"] == [p.key for p in PARTS]
    at = start(part="no-such-part")
    assert at.session_state["welcome_part"] == "attention"


def test_train_it_live_then_step_through_the_trained_weights():
    at = start("screens/train_live.py")
    at.number_input(key="train_steps").set_value(40)
    at.radio(key="train_data").set_value("the example + corpus")
    next(b for b in at.button if b.label == "Train").click().run()
    assert not at.exception and not at.error
    p_mat = float(at.metric[1].value)
    assert p_mat > 0.171
    assert len(charts(at)) == 4 + 12  # loss, η, p(mat), embedding; 2 blocks x 2 heads: before, after, change
    at.switch_page("screens/worked_example.py").run()
    at.radio(key="weights_choice").set_value(at.radio(key="weights_choice").options[1]).run()
    at.query_params["step"] = "softmax"
    at.selectbox(key="step").set_value("softmax").run()
    assert not at.exception
    (probs,) = [c for c in charts(at) if "<b>probs" in c["layout"]["title"]["text"]]
    assert float(probs["data"][0]["text"][0][5]) == pytest.approx(p_mat, abs=6e-4)  # shown to 3 decimals


def test_train_it_live_gives_adamw_its_own_learning_rate_and_a_schedule():
    """Reference: torch's documented AdamW default, 0.001; warmup over the first tenth of 20 steps
    (η/2 at the first of 2 warmup steps), written out here."""
    at = start("screens/train_live.py")
    at.number_input(key="train_steps").set_value(20)
    at.radio(key="train_optimizer").set_value("AdamW")
    at.radio(key="train_schedule").set_value("warmup + cosine")
    next(b for b in at.button if b.label == "Train").click().run()
    assert not at.exception and not at.error
    assert "AdamW, peak η = 0.001 (warmup + cosine)" in at.subheader[0].value
    rates = next(c for c in charts(at) if c["layout"]["title"]["text"].startswith("Learning rate"))["data"][0]["y"]
    assert rates[0] == pytest.approx(0.0005, rel=1e-12) and rates[1] == pytest.approx(0.001, rel=1e-12)


def test_playground_shows_what_the_sliders_do_and_generates():
    at = start("screens/playground.py", prompt="Tom had")
    (chart,) = [c for c in charts(at) if "Next token" in c["layout"]["title"]["text"]]
    model_bars, sampled_bars = chart["data"]  # horizontal bars: the probabilities are x
    # temperature 1, no filtering: the same distribution
    assert model_bars["x"] == pytest.approx(sampled_bars["x"], rel=1e-9)
    at.slider(key="temperature").set_value(0.3).run()
    at.slider(key="top_k").set_value(3).run()
    (chart,) = [c for c in charts(at) if "Next token" in c["layout"]["title"]["text"]]
    model_bars, sampled_bars = chart["data"]
    assert sum(p > 0 for p in sampled_bars["x"]) == 3 and "3 of" in chart["layout"]["title"]["text"]
    assert sampled_bars["x"][0] > model_bars["x"][0]  # a low temperature sharpens
    assert at.query_params["temperature"] in (["0.3"], "0.3") and at.query_params["top_k"] in (["3"], "3")
    at.slider(key="max_new").set_value(5).run()
    next(b for b in at.button if b.label == "Generate").click().run()
    assert not at.exception and not at.error
    generation = at.session_state["generation"]
    assert len(generation["tokens"]) == 5 and all(t["p"] > 0 for t in generation["tokens"])
    assert at.session_state["prompt"] == "Tom had"  # nothing typed is lost
    # the streamed text is cleared once the chips show the completion: it is not on the page twice
    assert not [m for m in at.markdown if "Generating" in m.value]
    # the chosen step's chip is outlined, and only that one
    chips = lambda: next(h.proto.body for h in at.get("html") if "gb-chip" in h.proto.body)  # noqa: E731
    assert chips().count("gb-chosen") == 1 and chips().index("gb-chosen") < chips().index("step 2:")
    at.get("button_group")[0].set_value(2).run()
    assert chips().count("gb-chosen") == 1 and chips().index("step 3:") < chips().index("gb-chosen") < chips().index("step 4:")


def test_playground_greedy_continues_the_worked_example_with_mat():
    at = start("screens/playground.py", greedy="true", max_new="1", prompt="the cat sat on the")
    next(b for b in at.button if b.label == "Generate").click().run()
    assert not at.exception
    assert at.session_state["generation"]["tokens"][0]["token"].strip() == "mat"


def test_playground_bad_settings_from_the_url_fall_back_and_bad_prompts_say_why():
    at = start("screens/playground.py", temperature="hot", top_p="7")
    assert at.session_state["temperature"] == 1.0 and at.session_state["top_p"] == 1.0
    # and the page says what it changed (the message is plain(): escapes and word joiners removed here)
    notes = " ".join(i.value for i in at.info).replace("\\", "").replace("\u2060", "")
    assert "temperature=hot is not a number: using 1.0" in notes and "top_p=7 is outside 0.01–1.0" in notes
    at.session_state["model"] = "worked-example"
    at.text_area(key="prompt").set_value("the cow").run()
    assert not at.exception and "Unknown word" in at.error[0].value


def chart_titled(at, title: str) -> dict:
    (chart,) = [c for c in charts(at) if c["layout"]["title"]["text"].startswith(f"<b>{title}</b>")]
    return chart


def test_grids_meant_to_be_compared_share_one_colour_scale():
    """W and W_new share a scale; so do the computed figure, the article's and their difference
    (a 0.003 difference is pale, not saturated); probabilities run 0..1 on a sequential scale;
    every quantity grid has a colour bar. Reference: the grids' own values sent to the browser."""
    at = start(WORKED, step="update")
    before, after = chart_titled(at, "W_E"), chart_titled(at, "W_E_new")
    top = max(np.nanmax(np.abs(values(c["data"][0]["z"]))) for c in (before, after))
    assert before["data"][0]["zmax"] == after["data"][0]["zmax"] == pytest.approx(top, rel=1e-6)
    assert before["data"][0]["showscale"] and after["data"][0]["showscale"]

    at = start(WORKED, step="final-layernorm")
    trio = [chart_titled(at, title) for title in ("X_final computed", "X_final in the article")]
    trio.append(next(c for c in charts(at) if c["layout"]["title"]["text"].startswith("<b>computed − article")))
    assert len({c["data"][0]["zmax"] for c in trio}) == 1
    difference = np.abs(values(trio[2]["data"][0]["z"]))
    assert np.nanmax(difference) < 0.01 * trio[2]["data"][0]["zmax"]

    at = start(WORKED, step="b1-softmax")
    pattern = chart_titled(at, "A(1,1)")["data"][0]
    assert (pattern["zmin"], pattern["zmax"]) == (0, 1) and pattern["colorscale"][0][1] != pattern["colorscale"][-1][1]


def test_rounding_noise_is_written_as_zero_with_the_exact_value_on_hover():
    """The logit of "and": X_final[4]·W_E[and], where W_E[and] = (0.2, 0.2, 0.2, 0.2) and the
    LayerNorm output sums to 0, so the exact value is rounding noise (under 1e-12 × the largest)."""
    at = start(WORKED, step="logits")
    heat = chart_titled(at, "logits")["data"]
    exact = float(heat[1]["customdata"][7])  # the click layer carries the exact values
    largest = np.abs(values(heat[0]["z"])).max()
    assert abs(exact) < 1e-12 * largest
    assert heat[0]["text"][0][7] == "0"


@pytest.mark.parametrize("page, query", [(None, {}), (WORKED, {"step": "update"}), ("screens/playground.py", {}),
                                         ("screens/explore.py", {"view": "Tokens & embeddings"})])
def test_every_chart_is_sent_with_glassboxs_template_and_no_streamlit_theme(page, query):
    """Streamlit's chart theme is applied in the browser on every draw (app/components/charts.py
    says why it is off); the reference is the message Streamlit sends: theme "" (None) and the
    template's own font in the figure."""
    at = start(page, **query)
    assert at.get("plotly_chart")
    for element in at.get("plotly_chart"):
        assert element.proto.theme == ""
        assert json.loads(element.proto.spec)["layout"]["template"]["layout"]["font"]["color"] == "#31333F"
