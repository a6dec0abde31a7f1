"""Glassbox, imported: ``import glassbox as gb``.

    model = gb.load("default")                      # a bundled name, a folder, or a hub id
    trace = model.trace("Zoe had a frog", backward=True)
    trace["blocks.0.attn.hook_pattern"]             # every tensor by its one name, and its gradient:
    trace[gb.GRAD + gb.name("resid_post", block=1)]
    with model.edit({gb.name("z", block=0): zero_head}):
        edited = model.trace("Zoe had a frog")      # the edited model's trace (edits nest too)

Installed from the repository's folders: this one (model/api/) is the ``glassbox`` package,
model/ is ``glassbox.model`` (the engine and everything without a UI), app/ is ``glassbox.app``
(the Streamlit app), assets/ is ``glassbox.assets`` (the shipped models). The app and the
command line (``glassbox.cli``) hold the same ``Model`` and call the same methods.

The names below are loaded from ``glassbox.core`` on first use: importing ``glassbox`` does not
import torch, so the command line (``glassbox.cli.main``) sets what torch reads when it loads
(``glassbox.cli.PROCESS_ENVIRONMENT``) before anything imports it."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

__all__ = ["GRAD", "GlassboxError", "Model", "ModelConfig", "Target", "Trace", "load", "name"]

if TYPE_CHECKING:
    from glassbox.core import GRAD, GlassboxError, Model, ModelConfig, Target, Trace, load, name


def __getattr__(attribute: str):
    # the notebook widgets are a UI (app/notebook/): imported only when asked for
    if attribute == "widgets":
        return import_module("glassbox.app.notebook")
    if attribute == "show_worked_example":
        return import_module("glassbox.app.notebook").show_worked_example
    if attribute in __all__:
        return getattr(import_module("glassbox.core"), attribute)
    raise AttributeError(f"module 'glassbox' has no attribute {attribute!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__, "widgets", "show_worked_example"])
