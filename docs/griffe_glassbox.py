"""A Griffe extension for the API page (docs/api.md, mkdocs.yml): the installed package's layout.

Installed, ``glassbox`` is the folder model/api/ and ``glassbox.model`` is the folder model/
(pyproject.toml's package-dir), so on disk ``glassbox.model`` is not inside ``glassbox``. Griffe
finds packages by their folders: without this, it cannot follow ``Model``'s base class
(``glassbox.model.io.checkpoint.LoadedModel``) or the trace's (``glassbox.model.engine.trace.Trace``),
and the page would leave out every member they give. This loads model/ (wherever Python finds
``glassbox.model``: an editable install's checkout or site-packages) as ``glassbox.model``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import griffe


class GlassboxLayout(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.name != "glassbox" or "model" in pkg.members:  # a regular install: already inside
            return
        spec = importlib.util.find_spec("glassbox.model")
        if spec is None or not spec.submodule_search_locations:
            return
        engine = loader.load(Path(spec.submodule_search_locations[0]))  # loaded as a package named "model"
        loader.modules_collection.del_member(engine.name)
        pkg.set_member("model", engine)  # its path is now glassbox.model, its modules glassbox.model.*
