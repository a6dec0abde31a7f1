"""What may be read from disk, and how big a model may be, checked before anything is opened or
allocated: a server shares one machine among many visitors, so a path typed into the app must
not reveal the file system and a bad file must not turn into a 10 GB allocation.

Settings (environment variables, read at each call so a test or a server can set them):
- ``GLASSBOX_MODEL_DIRS``: the folders local model directories may lie under, separated by ``:``.
  Unset: any directory (a person on their own machine). Empty: none (only the bundled models).
- ``GLASSBOX_MAX_MODEL_GB``: the most memory a model's weights may take. Default: the device's
  memory (physical RAM, or the GPU's).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import torch

from glassbox.model.engine import GlassboxError

MODEL_DIRS = "GLASSBOX_MODEL_DIRS"
MAX_MODEL_GB = "GLASSBOX_MAX_MODEL_GB"

CONFIG_BYTES = 1 << 20  # a config.json is a few hundred bytes; 1 MiB is generous
TOKENIZER_BYTES = 100 << 20  # the largest hub tokenizer.json (Gemma's) is ~35 MB
SIDE_FILE_BYTES = 16 << 20  # training.json, published.json: tens of kilobytes; 16 MiB is generous


def allowed_roots() -> list[Path] | None:
    """The resolved folders model directories may lie under; None when any directory may be used."""
    value = os.environ.get(MODEL_DIRS)
    if value is None:
        return None
    return [Path(os.path.realpath(Path(part).expanduser())) for part in value.split(":") if part.strip()]


def model_directory(text: str, names: tuple[str, ...]) -> Path:
    """The directory ``text`` names, resolved (``~``, ``..``, symlinks). With allowed roots set, a
    path outside them is refused with one message whether or not it exists, before anything under
    it is looked at."""
    choices, roots = ", ".join(names), allowed_roots()
    if roots == []:
        raise GlassboxError(f"No model {text!r}: this server opens no model directories (its bundled models: {choices})")
    try:
        if not text.strip():
            raise ValueError("no path")
        path = Path(os.path.realpath(Path(text).expanduser()))
    except (RuntimeError, ValueError, OSError):  # "~nobody", an embedded NUL byte
        raise GlassboxError(f"No model {text!r}: give a model name ({choices}) or a model directory") from None
    if roots is not None and not any(path.is_relative_to(root) for root in roots):
        raise GlassboxError(
            f"No model {text!r}: give a model name ({choices}) or a model directory under " + ", ".join(map(str, roots))
        )
    try:
        is_dir = path.is_dir()
    except OSError:  # a name too long, no permission
        is_dir = False
    if not is_dir:
        raise GlassboxError(f"No model {text!r}: give a model name ({choices}) or a model directory")
    return path


def regular_file(path: Path, limit: int | None = None) -> Path:
    """``path`` if it is a regular file (after symlinks) of at most ``limit`` bytes; else a clear
    error. A directory, a device such as /dev/zero, a FIFO or a symlink loop is never opened."""
    try:
        info = path.stat()
    except OSError as exc:
        raise _unreadable(path, exc) from None
    _check(path, info, limit)
    return path


def read_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file (after symlinks) of at most ``limit`` bytes, else a
    clear error. Checked on the opened file itself, so that nothing can be swapped in between: a
    FIFO is opened without waiting for a writer (and refused), and a file that grows after the
    check is read no further than ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        _check(path, os.fstat(fd), limit)
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise GlassboxError(f"{path} is over {limit:,} bytes; a {path.name} is at most {limit:,}")
    return data


def read_json(path: Path, limit: int = CONFIG_BYTES) -> dict:
    """A JSON object from ``path``, read by ``read_file``; anything else is a clear error."""
    try:
        value = json.loads(read_file(path, limit))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GlassboxError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise GlassboxError(f"{path} is nested too deeply to be a config") from None
    if not isinstance(value, dict):
        raise GlassboxError(f"{path} is not a JSON object")
    return value


def shard_files(path: Path) -> list[Path]:
    """The weight files: model.safetensors, or the shards model.safetensors.index.json names
    (plain file names in the same folder; each a regular file)."""
    index = path / "model.safetensors.index.json"
    if not index.exists():
        return [regular_file(path / "model.safetensors")]
    weight_map = read_json(index, 16 * CONFIG_BYTES).get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(f, str) and "/" not in f and f not in ("", ".", "..") for f in weight_map.values())
    ):
        raise GlassboxError(f"{index} has no weight_map of file names in its folder")
    return [regular_file(path / name) for name in sorted(set(weight_map.values()))]


def _unreadable(path: Path, exc: OSError) -> GlassboxError:
    if isinstance(exc, FileNotFoundError):
        return GlassboxError(f"{path} is missing: is {path.parent} a model directory?")
    return GlassboxError(f"{path} cannot be read ({exc.strerror})")  # a symlink loop, a name too long, no permission


def _check(path: Path, info: os.stat_result, limit: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise GlassboxError(f"{path} is not a regular file")
    if limit is not None and info.st_size > limit:
        raise GlassboxError(f"{path} is {info.st_size:,} bytes; a {path.name} is at most {limit:,}")


def some(items: list, shown: int = 50) -> str:
    """Items for a message or a help text: the first ``shown`` (each ``shortened``), then how
    many more. A file's content (a word-level vocabulary of 500,000 words) must not become a
    70 MB message."""
    more = f" … and {len(items) - shown:,} more" if len(items) > shown else ""
    return str([shortened(x) if isinstance(x, str) else x for x in items[:shown]]) + more


def shortened(text: str, most: int = 80) -> str:
    """Text for a message, cut to its first ``most`` characters."""
    return text if len(text) <= most else text[:most] + "…"


def seconds_setting(name: str, default: float) -> float:
    """An environment setting in seconds, finite and above 0; ``default`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise GlassboxError(f"{name} must be a number of seconds above 0, not {value!r}")
    return seconds


def gigabytes_setting(name: str) -> int | None:
    """An environment setting in GB, as bytes; None when unset or empty."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        gigabytes = float(value)
    except ValueError:
        gigabytes = math.nan
    if not 0 <= gigabytes < math.inf:
        raise GlassboxError(f"{name} must be a number of GB (0 or more), not {value!r}")
    return int(gigabytes * 2**30)


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_memory(device: torch.device | None = None) -> int:
    """Free memory now: the GPU's (cuda) or MemAvailable from /proc/meminfo (else total RAM)."""
    if device is not None and device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return physical_memory()


def memory_limit(device: torch.device) -> int:
    """Bytes a model's weights may take on ``device``: GLASSBOX_MAX_MODEL_GB, else the device's memory."""
    limit = gigabytes_setting(MAX_MODEL_GB)
    if limit is not None:
        return limit
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return physical_memory()


def check_fits(model_bytes: int, dtype: str, device: torch.device) -> None:
    limit = memory_limit(device)
    if model_bytes > limit:
        raise GlassboxError(
            f"This model needs {model_bytes / 2**30:,.1f} GB for its weights in {dtype}; "
            f"this machine allows {limit / 2**30:,.1f} GB (setting {MAX_MODEL_GB})"
        )
