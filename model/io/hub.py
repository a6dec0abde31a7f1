"""Models from the Hugging Face hub: ``org/name`` or ``org/name@revision`` (a branch, tag or
commit, e.g. Pythia's training checkpoints ``EleutherAI/pythia-70m@step3000``).

Only what Glassbox reads is fetched, into the standard hub cache (``HF_HOME``, ``HF_HUB_CACHE``):
config.json, the tokenizer files and the safetensors weights, sharded ones with their index.
Pickled weights (``.bin``, ``.pt``) are never fetched: a model without safetensors is refused
with a message saying so. A model already in the cache loads without the network, and
``HF_HUB_OFFLINE=1`` never touches it; ``HF_ENDPOINT`` points at a mirror.

Server setting: ``GLASSBOX_HUB`` ("0", "false", "off": visitors may not open hub ids; on by default).
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from model.engine import GlassboxError

HUB_SETTING = "GLASSBOX_HUB"
# what a hub id looks like: owner/name, each of letters, digits, "-", "_", "."; then @revision
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(@(?P<revision>[\w./-]{1,200}))?")
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
    """The hub id ``text`` spells, or None when it is not one (a path, a bundled name). A string
    shaped like ``org/name`` that is an existing local directory is that directory."""
    match = HUB_ID.fullmatch(text.strip())
    if match is None or ".." in text or os.path.isdir(text):
        return None
    return HubId(match["repo"], match["revision"])


def hub_enabled() -> bool:
    return os.environ.get(HUB_SETTING, "1").strip().lower() not in {"0", "false", "off", "no"}


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


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
        from model.io.checkpoint import shard_files  # the loader reads the index; one reader of it
        return all(f.exists() for f in shard_files(folder))
    return (folder / "model.safetensors").exists()


def cached(hub: HubId) -> Path | None:
    """The cached snapshot folder of ``hub`` with its config and weights, or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(hub.repo, revision=hub.revision, cache_dir=cache_dir(),
                                        local_files_only=True, allow_patterns=CONFIG_FILES))
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        return None
    return folder if (folder / "config.json").exists() and _has_weights(folder) else None


def download(hub: HubId, progress: Progress | None = None) -> Path:
    """Fetch what Glassbox reads of ``hub`` (or find it in the cache) and return its folder.
    ``progress`` is told the bytes done and in all as they arrive; without one, huggingface_hub's
    own progress bars are shown (tqdm, in a terminal)."""
    if not hub_enabled():
        raise GlassboxError(f"No model {str(hub)!r}: this server does not open models from the Hugging Face hub")
    folder = cached(hub)
    if folder is not None:
        return folder
    if offline():
        raise GlassboxError(f"{hub} is not in the hub cache ({cache_dir()}) and HF_HUB_OFFLINE is set: "
                            "download it first with `glassbox download`")
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub import errors

    endpoint = os.environ.get("HF_ENDPOINT") or None  # read at each call, like the cache's place
    try:
        info = HfApi(endpoint=endpoint).model_info(hub.repo, revision=hub.revision, files_metadata=True)
        files = {s.rfilename: s.size or 0 for s in info.siblings or []}
        wanted = [f for f in files if _wanted(f)]
        if not any(f.endswith(".safetensors") for f in wanted):
            pickles = [f for f in files if any(fnmatch.fnmatchcase(f, p) for p in PICKLES)]
            raise GlassboxError(f"{hub} has no safetensors weights" + (f" (only {', '.join(pickles[:3])})" if pickles else "")
                                + ": Glassbox never loads pickled weights, which can run code")
        if "config.json" not in wanted:
            raise GlassboxError(f"{hub} has no config.json: it is not a transformers model")
        total, done = sum(files[f] for f in wanted), 0
        tqdm_class = None if progress is None else _reporting_tqdm(lambda n: progress(min(done + n, total), total))
        for filename in wanted:  # by the revision's name, so that the cache records it (refs/<revision>)
            path = hf_hub_download(hub.repo, filename, revision=hub.revision, cache_dir=cache_dir(),
                                   tqdm_class=tqdm_class, endpoint=endpoint)
            if Path(path).parent.name != info.sha:  # a push midway: never mix two versions' files
                raise GlassboxError(f"{hub} changed on the hub during the download: try again")
            done += files[filename]
            if progress is not None:
                progress(done, total)
    except errors.RepositoryNotFoundError:
        raise GlassboxError(f"No model {hub.repo!r} on the Hugging Face hub (or it is private)") from None
    except errors.RevisionNotFoundError:
        raise GlassboxError(f"{hub.repo} has no revision {hub.revision!r}") from None
    except errors.GatedRepoError:
        raise GlassboxError(f"{hub.repo} is gated: accept its licence on huggingface.co and log in "
                            "(`hf auth login`), then try again") from None
    except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, errors.HFValidationError, OSError) as exc:
        raise GlassboxError(f"Cannot fetch {hub} from the Hugging Face hub: {str(exc).splitlines()[0]}") from None
    return Path(path).parent


def _reporting_tqdm(report: Callable[[int], None]):
    """A progress-bar class for huggingface_hub that prints nothing and reports the bytes of the
    file in flight (the app turns them into st.progress)."""
    from huggingface_hub.utils import tqdm

    class Reporting(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.bytes = 0

        def update(self, n=1):
            self.bytes += n or 0
            report(self.bytes)

    return Reporting
