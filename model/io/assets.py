"""Where the shipped models are: the ``assets`` package, found through importlib.resources so
that a source checkout, an editable install and an installed wheel all find it."""

from __future__ import annotations

import os
import re
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
    return home() / "models" / name


def home() -> Path:
    """$GLASSBOX_HOME, else the user's cache ($XDG_CACHE_HOME or ~/.cache)/glassbox."""
    return Path(
        os.environ.get(HOME) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glassbox"
    ).expanduser()


# A lab checkpoint's model name, "lab:RUN@STEP": RUN is an experiment's name (its shipped run, in
# assets/lab/RUN) or a run the app trained (in $GLASSBOX_HOME/lab/runs/RUN, named EXPERIMENT-HASH).
LAB_NAME = re.compile(r"lab:(?P<run>[a-z][a-z0-9]*(?:-[0-9a-f]{10})?)@(?P<step>[0-9]{1,7})")


def lab_run_folder(run: str) -> Path:
    """Where the lab run ``run`` lies: shipped (an experiment's name) or trained by the app."""
    return asset("lab") / run if "-" not in run else home() / "lab" / "runs" / run


def lab_checkpoint_folder(run_folder: Path, step: int) -> Path:
    """Where a lab run keeps its model at ``step``: checkpoints/step-NNNNNN (model/lab/runs.py writes it)."""
    return Path(run_folder) / "checkpoints" / f"step-{step:06d}"


def lab_checkpoint(name: str) -> Path | None:
    """The folder of the lab checkpoint ``name`` names ("lab:induction@400"), None if ``name`` is
    not a lab name. Only these two forms are read: a name cannot reach anywhere else."""
    match = LAB_NAME.fullmatch(name)
    if match is None:
        return None
    return lab_checkpoint_folder(lab_run_folder(match["run"]), int(match["step"]))
