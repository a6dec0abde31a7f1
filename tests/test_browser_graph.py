"""The Attribution graph view in Chromium: a click on a feature's node follows that feature, and a
circuit-tracer graph file opens in the page. References: the library's graph of the same prompt
(its pruned nodes, in the order the page draws them) and the file written from it by
graph_json.to_circuit_tracer (its node and edge counts)."""

import json
import re
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

import glassbox
from glassbox.model.analysis.graph_json import to_circuit_tracer
from tests.browser import settled

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]
PROMPT = "Anna lived in a little house near the"


def test_a_click_follows_a_feature_and_a_graph_file_opens(app_url, page, tmp_path):
    loaded = glassbox.load("default")
    tokens = loaded.tokens(PROMPT)
    graph = loaded.attribution_graph(tokens, loaded.tokens(" house")[0])
    kept, influence = graph.pruned(0.8), graph.influence()
    features = sorted((i for i in kept if graph.nodes[i].kind == "feature"), key=lambda i: -float(influence[i]))
    second = features[1]  # the page opens on the most influential; click the next one
    page.goto(app_url + "/explore?model=default&view=Attribution+graph&prompt=" + quote(PROMPT))
    settled(page)
    chart = page.locator("[data-testid='stPlotlyChart']", has=page.locator(".gtitle", has_text="nodes that carry")).first
    chart.wait_for(timeout=120_000)
    chart.scroll_into_view_if_needed()
    chart.locator(".scatterlayer .point").nth(kept.index(second)).click(force=True)  # the nodes: the one marker trace
    settled(page)
    chosen = page.locator("[data-testid='stSelectbox'] input").last  # the Feature box: its value is its input's
    expect(chosen).to_have_value(re.compile("^" + re.escape(graph.nodes[second].label)), timeout=60_000)

    exported = to_circuit_tracer(graph, tokens, loaded.pieces, loaded.cfg.n_layers, kept, "test-graph", "default")
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(exported))
    page.get_by_text("Open a graph file from circuit-tracer or Neuronpedia").click()
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(path))
    said = re.compile(
        f"test-graph:\u2060? {len(kept)} nodes, {len(exported['links'])} edges"
    )  # plain() joins a colon to its word
    expect(page.get_by_text(said)).to_be_visible(timeout=60_000)
    expect(page.locator(".gtitle", has_text="The imported graph")).to_be_visible(timeout=60_000)
