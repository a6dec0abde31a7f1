"""Where the shipped models are: the ``assets`` package, found through importlib.resources so
that a source checkout, an editable install and an installed wheel all find it."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def asset(name: str) -> Path:
    """The directory of a shipped asset ("default", "worked-example")."""
    return Path(str(resources.files("assets").joinpath(name)))
