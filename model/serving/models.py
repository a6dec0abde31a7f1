"""The loaded models every session shares, one object per (model, dtype, device) whatever the
spelling of its path, bounded in bytes so that visitors cannot fill the server's memory."""

from __future__ import annotations

from collections.abc import Callable

import torch

from glassbox.model.engine import default_device
from glassbox.model.io.checkpoint import LoadedModel, load, model_key
from glassbox.model.io.guard import gigabytes_setting, physical_memory
from glassbox.model.serving.cache import BoundedCache

MODEL_CACHE_GB = "GLASSBOX_MODEL_CACHE_GB"


def default_budget() -> int:
    """GLASSBOX_MODEL_CACHE_GB, else half the machine's memory."""
    budget = gigabytes_setting(MODEL_CACHE_GB)
    return physical_memory() // 2 if budget is None else budget


class ModelCache(BoundedCache[LoadedModel]):
    """Models by (resolved directory or bundled name, dtype, device): ``dir``, ``dir/`` and
    ``./dir`` are one model, loaded once. Past ``max_bytes`` of weights the least recently used
    is dropped (a session still holding it keeps it alive until it is done)."""

    def __init__(self, max_bytes: int | None = None, max_entries: int = 8, loader: Callable[..., LoadedModel] = load):
        super().__init__(LoadedModel.nbytes.fget, default_budget() if max_bytes is None else max_bytes, max_entries)
        self.loader = loader  # the app's: glassbox.load, whose Model has the methods the pages call

    def model(self, name: str, dtype: str | None = None, device: str | torch.device | None = None) -> LoadedModel:
        key = (model_key(name), dtype, str(torch.device(device or default_device())))
        return self.get(key, lambda: self.loader(key[0], dtype=dtype, device=key[2]))
