"""A lab run on disk: a folder with run.json (every figure, as ``glassbox lab NAME --json``
prints it) and, where the experiment trains a transformer, checkpoints/step-NNNNNN/, each a
Glassbox model folder the explorer opens by the name "lab:RUN@STEP" (model/io/assets.py).

Shipped runs: assets/lab/NAME. Runs the app trains on the spot: $GLASSBOX_HOME/lab/runs/NAME-HASH,
HASH of their settings, so that every visitor asking for the same run shares one folder."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from glassbox.model.engine import GlassboxError
from glassbox.model.engine.work import pass_started, report
from glassbox.model.io.assets import asset, home, lab_run_folder
from glassbox.model.io.assets import lab_checkpoint_folder as checkpoint_folder
from glassbox.model.io.guard import SIDE_FILE_BYTES, read_json

RUN_FILE = "run.json"


def shipped_folder(name: str) -> Path:
    """The shipped run of experiment ``name``: assets/lab/NAME."""
    return asset("lab") / name


def user_run_folder(name: str) -> Path:
    """Where ``glassbox lab NAME`` writes by default: $GLASSBOX_HOME/lab/NAME."""
    return home() / "lab" / name


def live_run_name(name: str, settings: dict) -> str:
    """The run's name for the app's live run of ``name`` with ``settings``: NAME-HASH."""
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


@dataclass
class Run:
    """A run read back: its folder, its figures, and the name its folder goes by ("induction"
    for a shipped run, "induction-HASH" for one the app trained; None: elsewhere, e.g. --out)."""

    path: Path
    figures: dict
    name: str | None = None

    @classmethod
    def read(cls, path: Path, name: str | None = None) -> Run:
        file = Path(path) / RUN_FILE
        if not file.is_file():
            raise GlassboxError(f"No lab run in {path}: no {RUN_FILE} there")
        return cls(Path(path), read_json(file, SIDE_FILE_BYTES), name)

    @classmethod
    def shipped(cls, name: str) -> Run:
        return cls.read(shipped_folder(name), name)

    @classmethod
    def named(cls, run: str) -> Run:
        """A shipped run or one the app trained, by its name."""
        return cls.read(lab_run_folder(run), run)

    @property
    def checkpoint_steps(self) -> list[int]:
        """The steps with a saved model, ascending (empty for an experiment without a transformer)."""
        return sorted(int(p.name.removeprefix("step-")) for p in (self.path / "checkpoints").glob("step-*") if p.is_dir())

    def checkpoint(self, step: int) -> Path:
        folder = checkpoint_folder(self.path, step)
        if not folder.is_dir():
            raise GlassboxError(f"This run has no checkpoint at step {step}: it has {self.checkpoint_steps}")
        return folder

    def model_name(self, step: int) -> str:
        """What the explorer and ``glassbox.load`` open this run's step-``step`` model by: "lab:RUN@STEP"
        where the run has a name, else its folder."""
        self.checkpoint(step)
        return f"lab:{self.name}@{step}" if self.name else str(checkpoint_folder(self.path, step))


def write_run(path: Path, figures: dict) -> None:
    """run.json: every figure, strict JSON (no NaN)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    (Path(path) / RUN_FILE).write_text(json.dumps(figures, ensure_ascii=False, allow_nan=False) + "\n")


def save_checkpoint(path: Path, step: int, model, tokenizer, about: dict) -> Path:
    """The model as it is at ``step``, a Glassbox model folder (float32) in path/checkpoints."""
    from glassbox.model.io.checkpoint import save

    folder = checkpoint_folder(path, step)
    save(folder, model, tokenizer, "float32", dict(about, source=f"{about.get('source', 'a lab run')}, step {step}"))
    return folder


def step_done(done: int, total: int) -> None:
    """After each training step of a lab run: its progress for the page's bar, and the point where a
    cancelled run stops (also for loops that never call the engine's forward)."""
    pass_started()
    report(done, total)
