"""Files and folders written whole or not at all, so that a full disk or a vanished folder is an
error, never a "wrote" over half a file, and nothing half-written is left where a later load
would read it. The npz export, the model folders the training commands make (``written_whole``),
the course's measured record and the benchmarks' JSON go through it."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from glassbox.model.engine.errors import GlassboxError


def write_file(path: str | Path, write) -> None:
    """``write(file)`` into ``path`` so that a failed write is an error and leaves nothing a later
    read would trust: into a temporary file beside it, flushed to the disk, then renamed over it
    (the old file, if any, stays until then). A path that exists and is not a regular file (a
    device such as /dev/full, a pipe) is written in place, every error reported. The name is used
    as given: nothing is appended to it."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            with open(path, "wb") as file:
                write(file)
                file.flush()
            return
        temporary = _beside(path, "partial")
        try:
            with open(temporary, "wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    except OSError as exc:
        raise GlassboxError(f"Cannot write {path}: {exc.strerror or exc}") from None


def write_text(path: str | Path, text: str) -> None:
    """``text`` (UTF-8) into ``path``, as write_file writes."""
    write_file(path, lambda file: file.write(text.encode()))


@contextmanager
def written_whole(path: str | Path) -> Iterator[Path]:
    """A folder (a model, a sparse autoencoder) written whole or not at all: the body writes into
    the folder this yields, a hidden one beside ``path``; when it ends, every file is flushed to
    the disk and the folder takes ``path``'s place (an old folder there stays until then, and is
    then deleted). If the body fails, or a write does, nothing at ``path`` changes and the hidden
    folder is removed; an OSError (a full disk, a permission) becomes one GlassboxError."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise GlassboxError(f"Cannot write {path}: it is a file, and a model is a folder")
    staged = _beside(path, "partial")
    _remove_abandoned(path)
    try:
        staged.mkdir()
        yield staged
        _flush_tree(staged)
        _take_place(staged, path)
    except OSError as exc:
        raise GlassboxError(f"Cannot write {path}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _beside(path: Path, what: str) -> Path:
    """A hidden name beside ``path``, unique to this process (two writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{what}")


def _remove_abandoned(path: Path) -> None:
    """Delete the hidden folders beside ``path`` that runs no longer alive left (killed midway):
    their names carry their process id, so a live run's are never touched."""
    for left in path.parent.glob(f".{glob.escape(path.name)}.*.*"):
        pid, _, what = left.name[len(path.name) + 2 :].partition(".")
        if what in ("partial", "old") and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process is writing it now, so any folder of its id is an old one's
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _flush_tree(folder: Path) -> None:
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        with open(file, "rb") as opened:
            os.fsync(opened.fileno())


def _take_place(staged: Path, path: Path) -> None:
    """Rename ``staged`` to ``path``; an old folder there is moved aside first, put back if the
    rename fails, and deleted once the new one is in place."""
    if not path.exists():
        os.rename(staged, path)
        return
    old = _beside(path, "old")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(path, old)
    try:
        os.rename(staged, path)
    except OSError:
        os.rename(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)
