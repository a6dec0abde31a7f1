"""Files written whole or not at all, so that a full disk or a vanished folder is an error, never
a "wrote" over half a file. The npz export goes through it (Trace.save_npz); the other outputs
(models, training records, CSV) are still written directly."""

from __future__ import annotations

import os
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
        temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
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
