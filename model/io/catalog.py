"""The curated hub models: the ones people come to look inside, one or two per family.

Each entry carries the model's hub ``config.json`` (the keys Glassbox reads, copied from the
hub repository), so that its family, parameter count and download size are computed here,
offline, by the same converter and meta-device count the loader uses; and so that a benchmark
can build a model of exactly its shape with random weights (``python -m model bench --families``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property


from model.engine import ModelConfig
from model.io.convert import CONVERTERS
from model.io.hub import cached, parse_hub_id

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Curated:
    hub_id: str
    why: str
    config: dict  # the hub's config.json, the keys Glassbox reads

    @property
    def family(self) -> str:
        return CONVERTERS[self.config["model_type"]].FAMILY

    @cached_property
    def model_config(self) -> ModelConfig:
        return CONVERTERS[self.config["model_type"]].config(self.config)

    @cached_property
    def parameters(self) -> int:
        """Counted on the meta device: one block, two blocks, and the difference per block."""
        from model.io.checkpoint import _meta_model

        cfg = self.model_config

        def count(n_layers: int) -> int:
            model = _meta_model(dataclasses.replace(cfg, n_layers=n_layers, local_layers=None))
            return sum(p.numel() for p in model.parameters())

        one, two = count(1), count(2)
        return one + (cfg.n_layers - 1) * (two - one)

    @property
    def download_bytes(self) -> int:
        """The safetensors at the dtype the hub stores them in (torch_dtype); the tokenizer files
        add a few MB."""
        return self.parameters * BYTES[self.config.get("torch_dtype", "float32")]

    @property
    def cached(self) -> bool:
        return cached(parse_hub_id(self.hub_id)) is not None


CURATED: list[Curated] = []


def curated() -> list[Curated]:
    return CURATED
