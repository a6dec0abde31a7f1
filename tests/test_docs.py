"""The documentation: docs/ builds into a site with MkDocs (mkdocs.yml), strict (a link to a
page or a heading that does not exist fails the build), every page is in its navigation, and
the README stays short, with links that land."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT, package_version, require


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built once, strict (any warning raises), with its MkDocs config."""
    require("mkdocs")  # in the dev extras,
    require("mkdocstrings", "mkdocstrings[python]")  # with mkdocstrings for docs/api.md
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    folder = tmp_path_factory.mktemp("site")
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(folder))
    build(config)
    return folder, config


def test_the_docs_build_strict(site):
    folder, config = site
    assert (folder / "engine" / "index.html").exists()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    listed = {next(iter(item.values())) for item in config["nav"]}
    assert listed == pages, pages ^ listed


def public_members(cls: type) -> set[str]:
    """What ``dir`` lists on the class, and its dataclass fields (a field without a default is
    not a class attribute), less the names that start with "_"."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return {name for name in {*dir(cls), *fields} if not name.startswith("_")}


def test_the_api_page_lists_every_public_member(site):
    """docs/api.md, as built from the docstrings: an entry (an anchor ``glassbox.Class.member``)
    for every public member of Model and of the class a trace is, both as ``glassbox`` exports
    them; the members a class takes from the standard library (a Mapping's ``keys``, ``items``…),
    which the generator cannot follow there, named on the page in code."""
    import glassbox as gb

    page = (site[0] / "api" / "index.html").read_text()
    anchors = set(re.findall(r'id="(glassbox\.[\w.]+)"', page))
    trace_class = type(gb.load("default").trace("the cat"))  # the class users get
    assert {"glassbox.load", "glassbox.name"} <= anchors
    for cls in (gb.Model, trace_class):
        assert getattr(gb, cls.__name__) is cls  # what the page's heading names
        members = public_members(cls)
        own = {name for name in members if defined_in_glassbox(cls, name)}
        assert {f"glassbox.{cls.__name__}.{name}" for name in own} <= anchors, own - {
            anchor.rsplit(".", 1)[1] for anchor in anchors
        }
        assert all(f"<code>{name}" in page for name in members - own), sorted(members - own)
    assert len(public_members(gb.Model)) >= 24  # the issue counted 24 without the inherited ones


def defined_in_glassbox(cls: type, name: str) -> bool:
    """Whether the class in ``cls``'s MRO that gives ``name`` is Glassbox's own (a dataclass field
    is always)."""
    owner = next((base for base in cls.__mro__ if name in vars(base)), cls)
    return owner.__module__.startswith("glassbox")


def test_the_readme_is_short_and_its_links_land():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 15 and all((ROOT / link).exists() for link in links), links


def test_the_example_notebook_runs(tmp_path, monkeypatch):
    """docs/example.ipynb's code cells, run in order in one namespace (as a kernel would, without
    Jupyter), in a folder of their own: the trace's loss is torch's cross-entropy on the model's
    logits (1e-6), the edit changed p(' frog'), the figure is the pattern's own values, and the
    PNG it writes is a PNG (kaleido with the system Chromium)."""
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
    require("kaleido")
    exec(compile(code[-1], "example.ipynb", "exec"), scope)
    assert (tmp_path / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_changelog_names_the_version_as_its_latest_entry():
    """CHANGELOG.md's first version heading is the version pyproject.toml gives the package (the
    one place it is written), and the headings go from newest to oldest."""
    version = package_version()
    headings = re.findall(r"^## (\d+\.\d+\.\d+)\b", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert headings and headings[0] == version, (headings, version)
    as_numbers = [tuple(map(int, heading.split("."))) for heading in headings]
    assert as_numbers == sorted(as_numbers, reverse=True) and len(set(as_numbers)) == len(as_numbers), headings


def test_the_api_docstrings_keep_their_angle_brackets_in_code():
    """The API page renders docstrings as Markdown, where ``<name>`` outside a code span is an HTML
    tag and vanishes ("grad:<name>" printed as "grad:"): every such text is written as code."""
    import inspect

    import glassbox as gb

    trace_class = type(gb.load("default").trace("the cat"))
    documented = [gb.load, gb.name, gb.Model, trace_class]
    members = [getattr(cls, name, None) for cls in (gb.Model, trace_class) for name in sorted(public_members(cls))]
    documented += [m for m in members if callable(m) or isinstance(m, property)]  # not a field's default value
    lost = {}
    for obj in documented:
        prose = re.sub(r"``.*?``|`[^`]*`", "", inspect.getdoc(obj) or "", flags=re.DOTALL)
        tags = re.findall(r"<[A-Za-z/][^>]*>", prose)
        if tags:
            lost[getattr(obj, "__qualname__", repr(obj))] = tags
    assert not lost, lost
