"""The app's pages, run in-process by Streamlit's AppTest."""

import copy
import json

import numpy as np
import pytest
import torch

from glassbox.model.engine import run_trace
from glassbox.model.io.checkpoint import load
from glassbox.model.worked_example.article import published
from glassbox.model.worked_example.steps import worked_example_steps
from tests.helpers import charts, exact, played, press, start

WORKED = "screens/worked_example.py"


def test_the_page_plays_every_step_the_engine_builds_with_every_cells_arithmetic():
    """The worked example is sent once and played in the page (stepping and clicking are tested in
    Chromium, tests/test_browser.py). Reference: worked_example_steps on the bundled weights,
    called here: the same steps in the same order, every grid's exact values unchanged (float64
    written with repr, so equal to the bit), and every output cell with its arithmetic."""
    at = start(WORKED)
    data = played(at)
    loaded = load("worked-example")
    steps = worked_example_steps(loaded.model, loaded.tokenizer, published(), lambda w: "")
    assert [s["key"] for s in data["steps"]] == [s.key for s in steps]
    assert data["step"] is None  # no step in the URL: the page opens on the tab's last step, or the first
    for sent, step in zip(data["steps"], steps):
        assert sent["title"] == step.title and sent["formula"], step.key
        for sent_panel, panel in zip(sent["panels"], step.panels, strict=True):
            for sent_grid, grid in zip(sent_panel["inputs"] + sent_panel["outputs"], panel.inputs + panel.outputs):
                assert np.array_equal(exact(sent_grid), grid.values), (step.key, grid.label)
            for sent_grid, grid in zip(sent_panel["outputs"], panel.outputs):
                if grid.explain is not None:
                    assert np.shape(sent_grid["cells"])[:2] == grid.shape
                    assert all(cell["lines"] for row in sent_grid["cells"] for cell in row), step.key


def test_the_loss_step_shows_the_articles_loss_and_its_arithmetic():
    at = start(WORKED, step="loss")
    assert played(at)["step"] == "loss"
    (loss,) = [g for g in played(at, "loss")["panels"][0]["outputs"] if "loss" in g["title"]]
    assert loss["text"] == [["1.768"]]
    lines = " ".join(loss["cells"][0][0]["lines"])
    assert "-\\log 0.1706" in lines and "1.7685" in lines


def test_a_cells_arithmetic_is_its_dot_product_with_the_operands_written_out():
    at = start(WORKED, step="b1-scores")
    head = played(at, "b1-scores")["panels"][0]
    assert head["label"] == "head 1 ([0])"
    (scores,) = head["outputs"]
    text = " ".join(scores["cells"][4][0]["lines"])
    # scores(1,1)[4,0] = Q[4]·K[0]/√2, with the operands written out
    trace = run_trace(load("worked-example").model, [0, 1, 2, 3, 0], names=["*attn.hook_*"])
    q, k = trace["blocks.0.attn.hook_q"][0], trace["blocks.0.attn.hook_k"][0]
    assert f"{q[4, 0].item():.4f}\\times{k[0, 0].item():.4f}" in text
    assert f"{trace['blocks.0.attn.hook_scores'][0, 4, 0].item():.4f}" in text
    assert ["Q(1,1)", 4, None] in scores["cells"][4][0]["uses"]  # the row it reads, outlined in the page


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
    payoff = played(at, "update")["after"]
    shown = {m["label"]: m for m in payoff["metrics"]}
    assert float(shown["loss −log p(mat)"]["value"]) == pytest.approx(after, abs=6e-5)
    assert f"from {before.item():.4f}" in shown["loss −log p(mat)"]["delta"]
    assert float(shown["p(mat)"]["value"]) == pytest.approx(p_after, abs=6e-5) and after < before.item()
    assert payoff["after"][config["target_id"]] == pytest.approx(p_after, abs=1e-9)
    p_before = torch.softmax(loaded.model(ids).logits[0, -1].double(), -1)[config["target_id"]].item()
    assert f"{p_after / p_before:.2f} times as likely" in payoff["sentence"]
    assert f"held {1 - p_before:.4f} together before and {1 - p_after:.4f} after" in payoff["sentence"]


def test_an_unknown_step_in_the_url_opens_the_first_and_says_so():
    at = start(WORKED, step="zzz")
    assert played(at)["step"] == "tokens"
    assert any("no step called “zzz”" in w.value for w in at.warning)
    at.run()  # a rerun still carries the address the page was opened with: said once
    assert not at.warning and played(at)["step"] == "tokens"


def test_settings_the_page_sends_are_checked_as_the_sliders_would():
    """The Generate click's settings come from the browser: a number out of range is clamped into
    the slider's range, one that is not a number is ignored, greedy is on only for true."""
    at = start("screens/playground.py", prompt="Tom had", max_new="1", top_p="0.9")
    press(at, temperature=9, top_k=-3, top_p="x", greedy="yes")
    assert not at.exception and not at.error
    assert (
        at.session_state["temperature"],
        at.session_state["top_k"],
        at.session_state["top_p"],
        at.session_state["greedy"],
    ) == (2.0, 0, 0.9, False)
    assert at.session_state["generation"]["settings"].startswith("temperature 2")


def test_a_link_followed_within_the_session_wins_over_what_the_page_remembers():
    """A page_link carries its query parameters into a page the session has already opened (Streamlit
    keeps the session, and its widget state, across such a link and sometimes across a reload): the
    step and the view in the link are the ones shown, not those the session held before. (That the
    page then draws the step it is sent is tested in Chromium.)"""
    at = start(WORKED, step="b1-scores")
    assert played(at)["step"] == "b1-scores"
    at.switch_page("screens/welcome.py").run()
    at.query_params["step"] = "b1-ffn-expand"
    at.switch_page(WORKED).run()
    assert played(at)["step"] == "b1-ffn-expand"  # the page's player follows a step that differs from its last
    at = start("screens/explore.py", view="Attention")
    assert at.session_state["explore_view"] == "Attention"
    at.switch_page("screens/welcome.py").run()
    at.query_params["view"] = "FFN"  # the MLP view's name in links from before it was renamed
    at.switch_page("screens/explore.py").run()
    assert not at.exception and at.session_state["explore_view"] == "MLP"


def test_welcome_page_names_a_real_step_and_view_for_every_part_of_the_drawing():
    """Each part of the welcome page's drawing links to a worked-example step and an explorer view that
    exist (checked against the steps the engine builds and the explorer's views), and a part chosen in
    the URL is the one described."""
    from glassbox.app.components.architecture import PARTS
    from glassbox.app.explore import VIEWS

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
    article = played(at)["id"]
    at.radio(key="weights_choice").set_value(at.radio(key="weights_choice").options[1]).run()
    assert not at.exception and played(at)["id"] != article  # the page replays the trained weights
    (probs,) = [g for g in played(at, "softmax")["panels"][0]["outputs"] if g["title"].startswith("probs")]
    assert float(probs["text"][0][5]) == pytest.approx(p_mat, abs=6e-4)  # shown to 3 decimals
    assert probs["provenance"] == "" and "trained" in {g["provenance"] for g in played(at, "embedding")["panels"][0]["inputs"]}


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
    """The sliders and the distribution are in the page (tests/test_sampling_in_the_page.py holds
    its arithmetic to the sampler's); here, the settings it sends back (what its callback writes
    into the session) reach the page's data, the URL and Generate."""
    at = start("screens/playground.py", prompt="Tom had")
    sent = lambda: json.loads(at.get("bidi_component")[0].proto.json)  # noqa: E731
    assert sent()["settings"] == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "greedy": False}
    assert sent()["title"] == "Next token after the prompt"
    at.session_state["temperature"], at.session_state["top_k"] = 0.3, 3  # as a slider let go sends them
    at.run()
    assert sent()["settings"]["temperature"] == 0.3 and sent()["settings"]["top_k"] == 3
    assert at.query_params["temperature"] in (["0.3"], "0.3") and at.query_params["top_k"] in (["3"], "3")
    at.slider(key="max_new").set_value(5).run()
    press(at)
    assert not at.exception and not at.error
    generation = at.session_state["generation"]
    assert len(generation["tokens"]) == 5 and all(t["p"] > 0 for t in generation["tokens"])
    assert at.session_state["prompt"] == "Tom had"  # nothing typed is lost
    # the streamed text is cleared once the chips show the completion: it is not on the page twice
    assert not [m for m in at.markdown if "Generating" in m.value]
    # every step is sent to the page once (app/components/generation_player.js plays it): the token
    # drawn, its probability and the two distributions, as generated
    (player,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "steps" in json.loads(c.proto.json)]
    assert [s["token"] for s in player["steps"]] == [t["token"] for t in generation["tokens"]]
    for step, token in zip(player["steps"], generation["tokens"]):
        assert step["p"] == token["p"] and step["before"][step["bold"]] == token["p_model"]
        assert step["after"][step["bold"]] == token["p"]


def test_playground_greedy_continues_the_worked_example_with_mat():
    at = start("screens/playground.py", greedy="true", max_new="1", prompt="the cat sat on the")
    press(at)
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


def fill_at(value: float, low: float, high: float, scale: str) -> np.ndarray:
    """The colour plotly gives ``value`` on its named scale from ``low`` to ``high``, as RGB (the
    reference for the page's cell fills; plotly interpolates in floats, a page paints integers)."""
    import plotly.colors

    at = min(max((value - low) / (high - low), 0), 1)
    return np.array(plotly.colors.unlabel_rgb(plotly.colors.sample_colorscale(scale, [at])[0]))


def same_colour(fill: str, expected: np.ndarray) -> bool:
    """A page's "#rrggbb" within 2 of a reference colour in each channel (a 256-step scale and rounding)."""
    return bool(np.abs(np.array([int(fill[i : i + 2], 16) for i in (1, 3, 5)]) - expected).max() <= 2)


def played_grid(step: dict, title: str, panel: int = 0) -> dict:
    chosen = step["panels"][panel]
    grids = chosen["inputs"] + chosen["outputs"] + [g for c in chosen["compared"] for g in c["grids"]]
    (grid,) = [g for g in grids if g["title"] == title]
    return grid


def step_grids(step: dict) -> list[dict]:
    return [
        g
        for panel in step["panels"]
        for g in panel["inputs"] + panel["outputs"] + [c for compared in panel["compared"] for c in compared["grids"]]
    ]


def test_one_value_has_one_colour_within_a_step():
    """Within a step, every value grid is on one colour scale and every gradient grid on another,
    every panel (head, weight) included: W and W_new, Q and K, the computed figure, the article's
    and their difference (a 0.003 difference is pale, not saturated). Probabilities run 0..1 on a
    sequential scale. Reference: each cell's fill against plotly's own colour scale at the largest
    |value| of the step's grids of its kind, computed here from the exact values sent."""
    at = start(WORKED, step="update")
    for key in ("update", "b1-scores", "final-layernorm", "grad-b1-queries-keys"):
        step = played(at, key)
        grids = [g for g in step_grids(step) if g["scale"] and g["scale"]["low_text"] != "0"]
        kinds = {
            "gradient": [g for g in grids if g["label"].startswith("dL/d")],
            "value": [g for g in grids if not g["label"].startswith("dL/d") and " − " not in g["title"]],
        }
        for kind, members in kinds.items():
            if not members:
                continue
            top = max(np.abs(exact(g)[np.isfinite(exact(g))]).max() for g in members)
            for grid in members:  # the scale's end written in the grid's own unit, ×10^power as its cells
                assert float(grid["scale"]["high_text"]) * 10.0 ** grid["power"] == pytest.approx(top, rel=5e-3), (key, kind)
            for grid in members:
                for (r, c), value in np.ndenumerate(exact(grid)):
                    if np.isfinite(value):
                        assert same_colour(grid["fill"][r][c], fill_at(value, -top, top, "RdBu_r")), (key, grid["title"])
    update = played(at, "update")
    before, after = played_grid(update, "W_E"), played_grid(update, "W_E_new")
    assert before["scale"] == after["scale"]

    final = played(at, "final-layernorm")
    trio = [played_grid(final, title) for title in ("X_final computed", "X_final in the article", "computed − article")]
    ends = [float(g["scale"]["high_text"]) * 10.0 ** g["power"] for g in trio]  # one scale, each in its grid's unit
    assert max(ends) == pytest.approx(min(ends), rel=5e-3)
    top = float(trio[0]["scale"]["high_text"]) * 10.0 ** trio[0]["power"]
    assert np.abs(exact(trio[2])).max() < 0.01 * top
    white = fill_at(0.0, -top, top, "RdBu_r")
    assert all(same_colour(fill, white) for row in trio[2]["fill"] for fill in row)  # a 0.003 difference stays pale

    pattern = played_grid(played(at, "b1-softmax"), "A(1,1)")
    assert (pattern["scale"]["low_text"], pattern["scale"]["high_text"]) == ("0", "1")
    probabilities = exact(pattern)
    for (r, c), value in np.ndenumerate(probabilities):
        if np.isfinite(value):
            assert same_colour(pattern["fill"][r][c], fill_at(value, 0, 1, "Blues"))


def test_rounding_noise_is_written_as_zero_with_the_exact_value_on_hover():
    """The logit of "and": X_final[4]·W_E[and], where W_E[and] = (0.2, 0.2, 0.2, 0.2) and the
    LayerNorm output sums to 0, so the exact value is rounding noise (under 1e-12 × the largest)."""
    at = start(WORKED, step="logits")
    logits = played_grid(played(at, "logits"), "logits")
    largest = np.abs(exact(logits)).max()
    assert abs(exact(logits)[0, 7]) < 1e-12 * largest  # the exact value, written on hover
    assert logits["text"][0][7] == "0"


@pytest.mark.parametrize(
    "page, query", [(None, {}), ("screens/playground.py", {}), ("screens/explore.py", {"view": "Tokens & embeddings"})]
)
def test_every_chart_is_sent_with_glassboxs_template_and_no_streamlit_theme(page, query):
    """Streamlit's chart theme is applied in the browser on every draw (app/components/charts.py
    says why it is off); the reference is the message Streamlit sends: theme "" (None) and the
    template's own font in the figure."""
    at = start(page, **query)
    assert at.get("plotly_chart")
    for element in at.get("plotly_chart"):
        assert element.proto.theme == ""
        assert json.loads(element.proto.spec)["layout"]["template"]["layout"]["font"]["color"] == "#31333F"
