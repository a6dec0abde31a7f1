"""The documentation: docs/ builds into a site with MkDocs (mkdocs.yml), strict (a link to a
page or a heading that does not exist fails the build), every page is in its navigation, and
the README stays short, with links that land."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT


def test_the_docs_build_strict(tmp_path):
    mkdocs = pytest.importorskip("mkdocs")  # in the dev extras
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path / "site"))
    build(config)  # raises on any warning (strict)
    assert (tmp_path / "site" / "engine" / "index.html").exists() and mkdocs.__version__
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    listed = {next(iter(item.values())) for item in config["nav"]}
    assert listed == pages, pages ^ listed


def test_the_readme_is_short_and_its_links_land():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 15 and all((ROOT / link).exists() for link in links), links


def test_the_example_notebook_runs(tmp_path, monkeypatch):
    """docs/example.ipynb's code cells, run in order in one namespace (as a kernel would, without
    Jupyter), in a folder of their own: the trace's loss is torch's cross-entropy on the model's
    logits (1e-6), the edit changed p(' frog'), the figure is the pattern's own values, and the
    PNG it writes is a PNG (kaleido with the system Chromium; skipped where kaleido is missing)."""
    import json

    import numpy as np
    import torch
    import torch.nn.functional as F

    notebook = json.loads((ROOT / "docs" / "example.ipynb").read_text())
    code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for source in code[:-1]:
        exec(compile(source, "example.ipynb", "exec"), scope)
    model, trace, edited = scope["model"], scope["trace"], scope["edited"]
    ids = torch.tensor([trace.tokens])
    with torch.no_grad():
        logits = model.module(ids).logits[0]
    assert trace.loss == pytest.approx(F.cross_entropy(logits[:-1], ids[0, 1:]).item(), rel=1e-6)
    assert scope["p"](edited) != scope["p"](trace)
    drawn = scope["figure"].data[0].z
    assert np.allclose(np.asarray(drawn, dtype=np.float64), trace["blocks.1.attn.hook_pattern"][2].numpy(), atol=1e-7)
    pytest.importorskip("kaleido")
    exec(compile(code[-1], "example.ipynb", "exec"), scope)
    assert (tmp_path / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
