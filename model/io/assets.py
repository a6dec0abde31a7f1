"""Where the shipped models are: the ``assets`` package, found through importlib.resources so
that a source checkout, an editable install and an installed wheel all find it."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

HOME = "GLASSBOX_HOME"  # where commands write what they make (models); default: the user's cache


def asset(name: str) -> Path:
    """The directory of a shipped asset ("default", "worked-example")."""
    return Path(str(resources.files("glassbox.assets").joinpath(name)))


def user_folder(name: str) -> Path:
    """Where a command that makes a model writes it by default: $GLASSBOX_HOME/models/NAME, else
    under the user's cache ($XDG_CACHE_HOME or ~/.cache)/glassbox/models/NAME; never into the
    installed package (a developer refreshing the shipped assets says --out assets/NAME)."""
    home = os.environ.get(HOME) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glassbox"
    return Path(home).expanduser() / "models" / name
