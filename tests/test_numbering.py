"""One numbering everywhere (issue 44, item 4): every page counts blocks, heads, experts and
layers from 1, as "block 1 (blocks.0)" and "head 1 ([0])" do; only the engine's own names
(blocks.0, hook_q[0]) and the CLI's JSON keep the engine's indices.

The scan: each page drawn by AppTest, every text a reader sees gathered (markdown, captions,
alerts, headings, tables' headers and cells, charts' titles, axis titles, tick labels and
categories, legend names), and searched for a counted word followed by 0 ("block 0", "head 0",
"expert 0", "layer 0") or for "layer" with a number at all (the pages say "block"). The reference
is the convention itself, written out here as patterns; a page that broke it would show one."""

import json
import re
from pathlib import Path

import pytest

from tests.helpers import start

ZERO_BASED = re.compile(r"\b(?:blocks?|heads?|experts?|layers?|MLPs?|key/value heads?) 0(?![.\d])|\blayers? \d", re.IGNORECASE)

EXPLORER = [
    "Overview",
    "Tokens & embeddings",
    "Attention",
    "LayerNorm",
    "MLP",
    "Residual stream",
    "Backward",
    "Ask why",
    "Circuits",
    "Head catalog",
    "Features",
]


def chart_texts(spec: dict) -> list[str]:
    texts = []
    layout = spec.get("layout", {})
    for key, value in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(value, dict):
            texts.append(str(value.get("title", {}).get("text", "")))
            texts += [str(t) for t in value.get("ticktext", []) or []]
    texts.append(str(layout.get("title", {}).get("text", "")))
    texts += [str(a.get("text", "")) for a in layout.get("annotations", [])]
    for trace in spec.get("data", []):
        texts.append(str(trace.get("name", "")))
        for axis in ("x", "y"):
            values = trace.get(axis)
            if isinstance(values, list):
                texts += [v for v in values if isinstance(v, str)]
    return texts


def page_texts(at) -> list[str]:
    texts = []
    for kind in ("markdown", "caption", "info", "warning", "error", "success", "title", "header", "subheader"):
        texts += [str(e.value) for e in at.get(kind)]
    for frame in at.get("dataframe") + at.get("table"):
        value = frame.value
        texts += [str(c) for c in value.columns] + [str(v) for v in value.astype(str).to_numpy().ravel()]
    for chart in at.get("plotly_chart"):
        texts += chart_texts(json.loads(chart.proto.spec))
    for kind in ("selectbox", "radio", "segmented_control"):
        for widget in at.get(kind):
            texts += [str(o) for o in getattr(widget, "options", [])]
    return texts


def violations(at) -> list[str]:
    return sorted({m.group(0) + " in: " + t[:120] for t in page_texts(at) for m in [ZERO_BASED.search(t)] if m})


@pytest.mark.parametrize("view", EXPLORER)
def test_every_explorer_view_counts_from_one(view):
    at = start("screens/explore.py", model="default", prompt="Zoe had a frog. Zoe loved the", view=view)
    assert not at.exception
    assert not violations(at), violations(at)


@pytest.mark.parametrize("view", ["Overview", "MLP", "Ask why"])
def test_a_mixture_of_experts_counts_its_experts_from_one(view):
    at = start("screens/explore.py", model="micro-moe", prompt="Lily had a red ball.", view=view)
    assert not at.exception
    assert not violations(at), violations(at)


def lesson_pages() -> list[str]:
    from glassbox.model.course import LESSONS

    return [lesson.page for lesson in LESSONS]


@pytest.mark.parametrize("page", ["screens/playground.py", "screens/train_live.py", "screens/welcome.py", *lesson_pages()])
def test_every_page_counts_from_one(page):
    at = start(page)
    assert not at.exception
    assert not violations(at), violations(at)


def test_every_doc_counts_from_one():
    """The docs and the README name blocks, heads and experts as the pages do."""
    root = Path(__file__).resolve().parent.parent
    found = [
        f"{path.name}: {m.group(0)}"
        for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        for m in ZERO_BASED.finditer(path.read_text())
    ]
    assert not found, found


def test_the_scan_finds_a_zero_based_label():
    """The patterns catch what they are for, and leave the engine's names alone."""
    assert ZERO_BASED.search("layer 0…3") and ZERO_BASED.search("Block 0, head 2") and ZERO_BASED.search("layer 3")
    assert not ZERO_BASED.search("block 1 (blocks.0), head 1 ([0])") and not ZERO_BASED.search("2 layers")
    assert not ZERO_BASED.search("heads 0.26 s")
