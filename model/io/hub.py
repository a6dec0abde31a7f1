"""Models from the Hugging Face hub: ``org/name`` or ``org/name@revision`` (a branch, tag or
commit, e.g. Pythia's training checkpoints ``EleutherAI/pythia-70m@step3000``).

Only what Glassbox reads is fetched, into the standard hub cache (``HF_HOME``, ``HF_HUB_CACHE``):
config.json, the tokenizer files and the safetensors weights, sharded ones with their index.
Pickled weights (``.bin``, ``.pt``) are never fetched: a model without safetensors is refused
with a message saying so. A model already in the cache loads without the network, and
``HF_HUB_OFFLINE=1`` never touches it; ``HF_ENDPOINT`` points at a mirror (never quoted in a
message: a server's mirror may be private).

A download is checked before its first byte (``check_room``): the weights the hub lists must
fit ``GLASSBOX_MAX_MODEL_GB`` (guard.py), the files ``GLASSBOX_MAX_DOWNLOAD_GB``, the hub cache
with them ``GLASSBOX_HUB_CACHE_GB`` (when set), and the disk of the cache must keep
``FREE_DISK_RESERVE`` free; downloads in flight in this process count as already there. While
it runs, each request is bounded in size, time and rate (hub_transfer.py), so a download ends,
done or with a message, within about its size over the least rate, plus (RETRIES + 1) timeouts a
file. Once the files are listed, ``progress`` is called at each request and each chunk: in the
app it draws the bar, and Streamlit raises StopException (or RerunException) from that call
once the page is gone or rerun, which stops the download there.
huggingface_hub deletes the partial file of a download that fails or stops; the ones a killed
process left are deleted by the next download of the model.

Server settings: ``GLASSBOX_HUB`` ("0", "false", "off": visitors may not open hub ids; on by
default); ``GLASSBOX_HUB_TIMEOUT`` (seconds, default 20); ``GLASSBOX_MAX_DOWNLOAD_GB`` (default
20); ``GLASSBOX_HUB_CACHE_GB`` (unset: no total beyond the disk's reserve);
``GLASSBOX_HUB_MIN_KB_PER_S`` (default 50).
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from glassbox.model.engine import GlassboxError
from glassbox.model.engine.device import default_device
from glassbox.model.io.guard import (
    MAX_MODEL_GB,
    allowed_roots,
    gigabytes_setting,
    memory_limit,
    shard_files,
    shortened,
)
from glassbox.model.io.hub_transfer import (
    RETRIES,
    Garbled,
    failures,
    reason,
    silent_tqdm,
    timeout,
    watched,
)

HUB_SETTING = "GLASSBOX_HUB"
MAX_DOWNLOAD_SETTING = "GLASSBOX_MAX_DOWNLOAD_GB"
DEFAULT_MAX_DOWNLOAD_GB = 20  # above every curated model (OLMoE-1B-7B: 13.8 GB), below a small host's disk
CACHE_QUOTA_SETTING = "GLASSBOX_HUB_CACHE_GB"
FREE_DISK_RESERVE = 2 * 2**30  # what a download must leave free on the disk of the hub cache
# what a hub id looks like: owner/name, each of letters, digits, "-", "_", "."; then @revision
# (anything: revision_problem says what git allows, so that a bad one is refused, not read as a path)
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(@(?P<revision>.*))?", re.DOTALL)
CONFIG_FILES = ["config.json"]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"]
WEIGHT_FILES = ["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"]
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)


@dataclass(frozen=True)
class HubId:
    repo: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo + (f"@{self.revision}" if self.revision else "")


def parse_hub_id(text: str) -> HubId | None:
    """The hub id ``text`` spells, or None when it is not one (a path, a bundled name).

    On a person's own machine (GLASSBOX_MODEL_DIRS unset) an existing directory of the shape
    ``org/name`` is that directory. A server that restricts directories takes ``org/name`` as a
    hub id whether or not such a folder exists, so that its answer never tells which folders
    exist (a directory there is written ``./org/name``, or in full). A revision git would not
    take as a branch or tag name is refused, never read as a path: huggingface_hub joins the
    revision onto the cache's refs/ folder, so ``@/abs/path`` would write there."""
    match = HUB_ID.fullmatch(text.strip())
    if match is None or ".." in match["repo"]:
        return None
    revision = match["revision"]
    why = None if revision is None else revision_problem(revision)
    if why:
        raise GlassboxError(f"No model {shortened(text)!r}: what follows the @ must be a branch, tag or commit name, and {why}")
    if allowed_roots() is None and os.path.isdir(text):
        return None
    return HubId(match["repo"], revision)


def revision_problem(revision: str) -> str | None:
    """Why git would refuse ``revision`` as a branch or tag name (``git check-ref-format
    refs/heads/<revision>``), or None. Its rules keep the name a plain relative path: no leading
    ``/``, no empty, ``.`` or ``..`` part."""
    if not revision:
        return "it is empty"
    if len(revision) > 200:
        return "it is over 200 characters"
    if any(c < " " or c == "\x7f" or c in " ~^:?*[\\" for c in revision):
        return "it holds a space, a control character or one of ~ ^ : ? * [ \\"
    if revision.startswith("/") or revision.endswith(("/", ".")) or "//" in revision:
        return "it starts or ends with /, holds //, or ends with ."
    if ".." in revision or "@{" in revision:
        return "it holds .. or @{"
    if any(part.startswith(".") or part.endswith(".lock") for part in revision.split("/")):
        return "a part of it starts with . or ends with .lock"
    return None


def hub_enabled() -> bool:
    return os.environ.get(HUB_SETTING, "1").strip().lower() not in {"0", "false", "off", "no"}


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def max_download() -> int:
    """Bytes one download may fetch: GLASSBOX_MAX_DOWNLOAD_GB."""
    limit = gigabytes_setting(MAX_DOWNLOAD_SETTING)
    return DEFAULT_MAX_DOWNLOAD_GB * 2**30 if limit is None else limit


def cache_dir() -> Path:
    """The hub cache, as huggingface_hub finds it, read at each call (a test or server may set it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _wanted(filename: str) -> bool:
    return "/" not in filename and any(fnmatch.fnmatchcase(filename, p) for p in CONFIG_FILES + TOKENIZER_FILES + WEIGHT_FILES)


def _has_weights(folder: Path) -> bool:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        return all(f.exists() for f in shard_files(folder))
    return (folder / "model.safetensors").exists()


def _check_model_listing(hub: HubId, wanted: list[str], files: dict[str, int]) -> None:
    if not any(f.endswith(".safetensors") for f in wanted):
        pickles = [f for f in files if any(fnmatch.fnmatchcase(f, p) for p in PICKLES)]
        raise GlassboxError(
            f"{hub} has no safetensors weights"
            + (f" (only {', '.join(pickles[:3])})" if pickles else "")
            + ": Glassbox never loads pickled weights, which can run code"
        )
    if "config.json" not in wanted:
        raise GlassboxError(f"{hub} has no config.json: it is not a transformers model")


@dataclass(frozen=True)
class HubFiles:
    """What to fetch of a repository: a model's files (MODEL_FILES), or one folder of it (a
    sparse autoencoder's: glassbox.model.io.sae)."""

    wanted: Callable[[str], bool]  # a listed file's path → fetch it
    check: Callable[[HubId, list[str], dict[str, int]], None]  # refuse a listing that lacks what is needed
    complete: Callable[[Path], bool]  # a cached snapshot folder holds all that is needed
    look_up: list[str]  # patterns looked up in the cache first


MODEL_FILES = HubFiles(
    _wanted, _check_model_listing, lambda folder: (folder / "config.json").exists() and _has_weights(folder), CONFIG_FILES
)


def cached(hub: HubId, files: HubFiles = MODEL_FILES) -> Path | None:
    """The cached snapshot folder of ``hub`` with its config and weights (``files``), or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = Path(
            snapshot_download(
                hub.repo, revision=hub.revision, cache_dir=cache_dir(), local_files_only=True, allow_patterns=files.look_up
            )
        )
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        return None
    return folder if files.complete(folder) else None


def download(hub: HubId, progress: Progress | None = None, files: HubFiles = MODEL_FILES) -> Path:
    """Fetch what Glassbox reads of ``hub`` (``files``: a model's, by default) or find it in
    the cache, and return its snapshot folder.
    ``progress`` is told the bytes done and in all, once the files are listed, at each request
    and as they arrive (whatever it raises stops the download); without one, huggingface_hub's
    own progress bars are shown (tqdm, in a terminal)."""
    if not hub_enabled():
        raise GlassboxError(f"No model {str(hub)!r}: this server does not open models from the Hugging Face hub")
    folder = cached(hub, files)
    if folder is not None:
        return folder
    if offline():
        raise GlassboxError(
            f"{hub} is not in the hub cache ({cache_dir()}) and HF_HUB_OFFLINE is set: download it first with `glassbox download`"
        )
    from huggingface_hub import HfApi, errors, hf_hub_download

    endpoint = os.environ.get("HF_ENDPOINT") or None  # read at each call, like the cache's place
    done, total = 0, None  # the total once the hub has listed the files

    def report(in_flight: int = 0) -> None:
        if progress is not None and total is not None:
            progress(min(done + in_flight, total), total)

    stack = ExitStack()
    active = stack.enter_context(watched(report))
    try:
        sha, listed = _listing(HfApi(endpoint=endpoint), hub)
        wanted = [f for f in listed if files.wanted(f)]
        files.check(hub, wanted, listed)
        total = sum(listed[f] for f in wanted)
        stack.enter_context(_reserved(hub, sum(listed[f] for f in wanted if f.endswith(".safetensors")), total))
        _remove_stale_partials(hub)
        tqdm_class = None if progress is None else silent_tqdm()
        for filename in wanted:  # by the revision's name, so that the cache records it (refs/<revision>)
            active.start_file(filename, listed[filename])
            path = hf_hub_download(
                hub.repo, filename, revision=hub.revision, cache_dir=cache_dir(), tqdm_class=tqdm_class, endpoint=endpoint
            )
            snapshot = Path(path).parents[filename.count("/")]
            if snapshot.name != sha:  # a push midway: never mix two versions' files
                raise GlassboxError(f"{hub} changed on the hub during the download: try again")
            done += listed[filename]
            report()
    except errors.RepositoryNotFoundError:
        raise GlassboxError(f"No model {hub.repo!r} on the Hugging Face hub (or it is private)") from None
    except errors.RevisionNotFoundError:
        raise GlassboxError(f"{hub.repo} has no revision {hub.revision!r}") from None
    except errors.GatedRepoError:
        raise GlassboxError(
            f"{hub.repo} is gated: accept its licence on huggingface.co and log in (`hf auth login`), then try again"
        ) from None
    except failures() as exc:
        raise GlassboxError(f"Cannot fetch {hub} from the Hugging Face hub: {reason(exc, endpoint)}") from None
    finally:
        stack.close()
    return snapshot


def _listing(api, hub: HubId) -> tuple[str, dict[str, int]]:
    """The commit ``hub`` names and its files with their sizes, as the hub lists them, checked:
    a garbled answer (not JSON, sizes that are not byte counts) is an error, not a crash."""
    from huggingface_hub.errors import HFValidationError

    try:
        info = api.model_info(hub.repo, revision=hub.revision, files_metadata=True)
        sha, files = info.sha, {s.rfilename: s.size for s in info.siblings or []}
    except HFValidationError:  # a repository name the hub does not allow (a ValueError too)
        raise
    except (ValueError, TypeError, KeyError, AttributeError):  # not JSON (a ValueError), or not a listing
        raise Garbled() from None
    if not isinstance(sha, str) or not all(isinstance(f, str) and type(n) is int and n >= 0 for f, n in files.items()):
        raise Garbled()
    return sha, files


def check_room(what: str, weights: int, total: int) -> None:
    """Refuse, before the first byte, a download of ``total`` bytes (``weights`` of them
    safetensors) this server has no room for (a GlassboxError naming the sizes and the setting):
    weights that cannot fit GLASSBOX_MAX_MODEL_GB in any dtype (stored in at most 4 bytes a number,
    they are loaded in at least 2: half their size is the least they take; the exact check is the
    loader's, once the config is here), files over GLASSBOX_MAX_DOWNLOAD_GB, a hub cache that would
    pass GLASSBOX_HUB_CACHE_GB, or a disk left with less than FREE_DISK_RESERVE free. The downloads
    in flight in this process count as done. The picker asks it of a curated model's known size
    before offering its download."""
    limit = memory_limit(default_device())
    if weights / 2 > limit:
        raise GlassboxError(
            f"{what} has {_gb(weights)} of weights, at least {_gb(weights / 2)} in memory; "
            f"this server allows {_gb(limit)} ({MAX_MODEL_GB})"
        )
    if total > max_download():
        raise GlassboxError(
            f"{what} is {_gb(total)} to download; this server allows {_gb(max_download())} a download ({MAX_DOWNLOAD_SETTING})"
        )
    with _RESERVED_LOCK:
        in_flight = sum(r.to_come() for r in _RESERVED.values())  # what they have written is on the disk already
    quota = gigabytes_setting(CACHE_QUOTA_SETTING)
    if quota is not None:
        held = cache_bytes() + in_flight
        if held + total > quota:
            raise GlassboxError(
                f"{what} is {_gb(total)} to download; this server's hub cache holds {_gb(held)} "
                f"of the {_gb(quota)} it may take ({CACHE_QUOTA_SETTING})"
            )
    where = cache_dir()
    while not where.exists() and where != where.parent:  # the cache is made on the first download
        where = where.parent
    free = shutil.disk_usage(where).free - in_flight
    if total + FREE_DISK_RESERVE > free:
        raise GlassboxError(
            f"{what} is {_gb(total)} to download; the disk of this server's hub cache has {_gb(free)} "
            f"free, and keeps {_gb(FREE_DISK_RESERVE)}"
        )


def cache_bytes(folder: Path | None = None) -> int:
    """What the hub cache's files take (or one ``folder`` of it): each file once, the snapshots'
    links to the blobs not counted."""
    held = 0
    for parent, _, names in os.walk(cache_dir() if folder is None else folder):
        for name in names:
            try:
                info = os.lstat(os.path.join(parent, name))
            except OSError:  # gone meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                held += info.st_size
    return held


@dataclass
class _Reservation:
    """A download in flight: its bytes in all, and its repository's folder in the cache with
    what that held when the download began (so that what it has written so far is known)."""

    total: int
    folder: Path
    before: int

    def to_come(self) -> int:
        return max(0, self.total - max(0, cache_bytes(self.folder) - self.before))


_RESERVED: dict[int, _Reservation] = {}  # each download in flight in this process
_RESERVED_LOCK = threading.Lock()
_ROOM_LOCK = threading.Lock()  # one download checked and counted at a time
_DOWNLOADS = itertools.count()


@contextmanager
def _reserved(hub: HubId, weights: int, total: int):
    """check_room, then the download's bytes counted as taken until it ends: two visitors
    starting downloads at once cannot both take the last room."""
    from huggingface_hub.file_download import repo_folder_name

    folder = cache_dir() / repo_folder_name(repo_id=hub.repo, repo_type="model")
    with _ROOM_LOCK:
        check_room(str(hub), weights, total)
        key = next(_DOWNLOADS)
        with _RESERVED_LOCK:
            _RESERVED[key] = _Reservation(total, folder, cache_bytes(folder))
    try:
        yield
    finally:
        with _RESERVED_LOCK:
            del _RESERVED[key]


def _gb(n: float) -> str:
    return f"{n / 2**30:,.{2 if n < 10 * 2**30 else 1}f} GB"  # GB as GLASSBOX_MAX_MODEL_GB counts them


def _remove_stale_partials(hub: HubId) -> None:
    """Delete the partial files earlier downloads of ``hub`` left when their process was killed
    (huggingface_hub removes those of a download that fails or is stopped, but a killed one's
    name, unique to it, is never taken up again). A partial file is stale once untouched for
    longer than any live download goes without writing: each of its RETRIES + 1 tries waits at
    most the timeout, and huggingface_hub sleeps at most 8 s between them."""
    from huggingface_hub.file_download import repo_folder_name

    stale = (RETRIES + 1) * (timeout() + 8)
    for partial in (cache_dir() / repo_folder_name(repo_id=hub.repo, repo_type="model") / "blobs").glob("*.incomplete"):
        try:
            if time.time() - partial.stat().st_mtime > stale:
                partial.unlink()
        except OSError:  # gone meanwhile (another download finished or removed it)
            pass
