"""The explorer's Attribution graph view (app/explore/graph.py), run in-process by AppTest on the
default model and its shipped transcoders. References: the real model's logit and a plain torch
forward hook for the intervention (1e-4, float32), a brute-force pass over the same stories for a
feature's top activations (1e-5), and the graph's own completeness (float64: 1e-10)."""

import pytest
import torch

import glassbox
from glassbox.model.data.stories import corpus
from tests.helpers import start

PROMPT = "Anna lived in a little house near the"


@pytest.fixture(scope="module")
def page():
    at = start("screens/explore.py", prompt=PROMPT, view="Attribution graph")
    assert not at.error, [e.value for e in at.error]
    return at


def test_the_view_draws_the_graph_of_the_likeliest_token_and_says_it_is_complete(page):
    loaded = glassbox.load("default")
    tokens = loaded.tokens(PROMPT)
    with torch.no_grad():
        logits = loaded.model(torch.tensor([tokens])).logits[0, -1]
    assert page.selectbox(key="explore_graph_target").value == int(logits.argmax())
    logit, completeness, kept = (m.value for m in page.metric)
    assert float(logit) == pytest.approx(float(logits.max()), abs=1e-4)
    assert float(completeness) < 1e-10  # a small model's graph is built in float64
    shown, total = map(int, kept.split(" of "))
    assert 0 < shown < total
    figure = page.get("plotly_chart")[0].proto.spec
    assert '"logit"' in figure and "position: token" in figure  # the axes: layers up, positions along


def test_a_features_top_activations_are_the_largest_in_the_stories(page):
    """Reference: every position of the same 64 stories read through the transcoder by hand."""
    loaded = glassbox.load("default")
    graph = loaded.attribution_graph(loaded.tokens(PROMPT), page.selectbox(key="explore_graph_target").value)
    node = graph.nodes[page.selectbox(key="explore_graph_node").value]
    block, feature = node.block, node.feature
    transcoder = loaded._transcoders("default-transcoders")[block]
    best = 0.0
    for text in corpus(64):
        trace = loaded.trace(loaded.tokens(text)[: loaded.cfg.n_ctx], names=[transcoder.reads])
        best = max(best, float(transcoder.encode(transcoder.rows(trace[transcoder.reads]))[:, feature].max()))
    table = page.dataframe[0].value
    assert list(table.columns) == ["activation", "before", "token", "after"]
    assert float(table["activation"].max()) == pytest.approx(best, abs=1e-5)


def test_switching_a_feature_off_is_run_by_the_real_model(page):
    """Reference: the default model with a torch forward hook on the feature's MLP that takes out
    the feature's activation times its decoder row at its position."""
    loaded = glassbox.load("default")
    tokens, token = loaded.tokens(PROMPT), page.selectbox(key="explore_graph_target").value
    graph = loaded.attribution_graph(tokens, token)
    node = graph.nodes[page.selectbox(key="explore_graph_node").value]
    transcoder = loaded._transcoders("default-transcoders")[node.block]

    def off(module, args, output):
        output = output.clone()
        output[0, node.position] -= node.value * transcoder.W_dec[node.feature]
        return output

    handle = loaded.model.blocks[node.block].mlp.register_forward_hook(off)
    try:
        with torch.no_grad():
            hooked = loaded.model(torch.tensor([tokens])).logits[0, -1]
    finally:
        handle.remove()
    effect = page.dataframe[2].value  # the effect table, then the intervention's
    assert effect["logit after"].iloc[0] == pytest.approx(float(hooked[token]), abs=1e-4)
    with torch.no_grad():
        before = loaded.model(torch.tensor([tokens])).logits[0, -1].softmax(-1)
    order = torch.argsort(before, descending=True, stable=True)[:8]  # the table's rows: the likeliest before
    probabilities = page.dataframe[3].value
    assert torch.allclose(torch.tensor(probabilities["p"].to_numpy()), before[order].double(), atol=1e-6)
    scaled = torch.tensor(probabilities["p with the feature scaled"].to_numpy())
    assert torch.allclose(scaled, hooked.softmax(-1)[order].double(), atol=1e-6)
