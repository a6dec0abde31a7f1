"""The app's components in a notebook (app/notebook/, ``gb.widgets``). References: the trace's own
tensors (what a widget sends decodes to them exactly), the app's own payload builders (a widget
sends what the app's component gets), the trace's hook_scores (what the exported page computes and
writes, 6 significant figures), and a real Jupyter kernel (nbclient) running docs/notebooks.ipynb."""

import base64
import re
import subprocess
import sys

import numpy as np
import pytest

import glassbox as gb
from glassbox.app.components.attention_head import block_payload
from glassbox.app.explore.attention_sent import how_notes
from glassbox.model.engine import GlassboxError
from glassbox.model.plot.labels import token_text
from tests.helpers import ROOT, require

PROMPT = "Zoe had a frog. Zoe loved the"


@pytest.fixture(scope="module")
def trace():
    return gb.load("default").trace(PROMPT)


def decoded(text: str, width: int, n: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=f"<f{width}").reshape(n, -1)


def test_the_attention_widget_sends_the_trace_and_what_the_app_sends(trace):
    """Exact: float32 tensors sent as float32."""
    widget = trace.show("attention", block=1, head=2)
    sent = widget.payload
    n, cfg = len(trace.tokens), trace.cfg
    assert [b["layer"] for b in sent["blocks"]] == list(range(cfg.n_layers))
    assert sent["chosen"] == {"block": 1, "head": 2, "query": n - 1, "key": 0}
    for block in sent["blocks"]:
        layer = block["layer"]
        for h, head in enumerate(block["heads"]):
            assert np.array_equal(decoded(head["pattern"], 4, n), trace[f"blocks.{layer}.attn.hook_pattern"][h].numpy())
            assert np.array_equal(decoded(head["scores"], 4, n), trace[f"blocks.{layer}.attn.hook_scores"][h].numpy())
            assert np.array_equal(decoded(head["q"], 4, n), trace[f"blocks.{layer}.attn.hook_q"][h].numpy())
        labels = [f"{i}:{token_text(trace.pieces[t])}" for i, t in enumerate(trace.tokens)]  # the explorer's
        app = block_payload(trace, cfg, layer, labels, [how_notes(cfg, layer, h) for h in range(cfg.n_heads)])
        assert app == block  # the explorer's own builder, the same arguments: the same data
    assert "gb-notebook" in widget._repr_html_() and widget.html().startswith("<!doctype html>")


def test_bad_calls_say_why(trace):
    with pytest.raises(GlassboxError, match="block must be"):
        trace.show("attention", block=9)
    with pytest.raises(GlassboxError, match="Say which tensor"):
        trace.show("grid")
    with pytest.raises(GlassboxError, match='"attention" or "grid"'):
        trace.show("heads")
    with pytest.raises(GlassboxError, match="heads × 3 × 3"):
        gb.widgets.attention_patterns(["a", "b", "c"], np.zeros((2, 3, 4)))


def test_the_playground_widget_is_the_tree_of_the_same_settings():
    """Reference: the library's tree with the same settings, branch and seed."""
    model = gb.load("default")
    widget = model.show_playground("Lily had a", 6, seed=3, force=[(5, " old")], seeds=[7])
    controls, player = widget.payload["sampling_controls"], widget.payload["generation_player"]
    tree = model.generate("Lily had a", 6, seed=3, tree=True)
    tree.branch(5, " old")
    tree.sample(7)
    sent = player["tree"]
    assert sent["static"] and sent["path"] == 1 and len(sent["paths"]) == 3
    for path, shown in zip(tree.paths, sent["paths"]):
        assert [s["token"] for s in shown["steps"]] == [t.token for t in path.steps]
    assert controls["ids"][0] == int(tree.paths[0].steps[0].before.argmax())  # the distribution's most likely first


@pytest.mark.browser
def test_the_exported_page_draws_the_pattern_and_computes_the_scores(trace, tmp_path, chromium):
    """The saved page, opened from a file in Chromium (no server, no network): it mounts, its pattern
    map shows the trace's weights (2 decimals, as drawn) and the dot product it computes and writes
    equals hook_scores (6 significant figures); choosing another query in the page recomputes it."""
    path = trace.show("attention", block=1, head=2, query=6, key=3).save(tmp_path / "attention.html")
    patterns = gb.widgets.attention_patterns(["a", "b", "c"], [[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]])
    patterns_path = patterns.save(tmp_path / "patterns.html")
    scores = trace["blocks.1.attn.hook_scores"][2].double().numpy()

    def written_score(page) -> float:
        text = page.locator(".gb-arithmetic").inner_text().replace("\u2212", "-").replace("\n", "")
        return float(re.findall(r"=(-?[0-9.]+(?:e-?[0-9]+)?)", text)[-1])

    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    try:
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_selector(".gb-attention[data-chosen='2,6,3']", timeout=60_000)
        assert written_score(page) == pytest.approx(scores[6, 3], rel=1e-5)
        page.get_by_role("combobox", name="Query position").select_option(index=4)
        page.wait_for_selector(".gb-attention[data-chosen='2,4,3']", timeout=60_000)
        assert written_score(page) == pytest.approx(scores[4, 3], rel=1e-5)
        page.goto(patterns_path.as_uri())
        page.wait_for_selector(".gb-attention[data-chosen='0,2,0']", timeout=60_000)
        assert "weight 0.2." in page.locator(".gb-attention").inner_text()
        assert not errors
    finally:
        page.close()


@pytest.mark.subprocess
def test_the_notebook_runs_in_a_kernel_and_shows_every_widget(tmp_path):
    """docs/notebooks.ipynb executed by a real kernel (nbclient, ipykernel): no cell fails, each
    widget is a text/html output with its mounting script, and the saved page is written. Run in a
    process of its own: nbclient leaves an asyncio loop set, which Playwright's sync API then refuses."""
    nbformat = require("nbformat")
    require("nbclient")
    require("ipykernel")
    executed = tmp_path / "executed.ipynb"
    run = (
        "import sys, nbformat, nbclient; nb = nbformat.read(sys.argv[1], as_version=4); "
        "nbclient.NotebookClient(nb, timeout=300, kernel_name='python3', resources={'metadata': {'path': sys.argv[3]}})"
        ".execute(); nbformat.write(nb, sys.argv[2])"
    )
    done = subprocess.run(
        [sys.executable, "-c", run, str(ROOT / "docs" / "notebooks.ipynb"), str(executed), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    notebook = nbformat.read(executed, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for c in code for o in c.outputs if "text/html" in o.get("data", {})]
    widgets = [h for h in html if "gb-notebook" in h or "plotly" in h]
    assert len(widgets) == 5, len(widgets)  # attention, grid, playground, worked example, patterns
    assert all("<script>" in h for h in widgets)
    assert (tmp_path / "attention.html").read_text().startswith("<!doctype html>")
