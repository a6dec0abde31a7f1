"""`glassbox models`: the curated hub models (family, parameters, download size, cached)."""

from __future__ import annotations

from glassbox.cli.common import print_table


def add_arguments(sub) -> None:
    p = sub.add_parser("models", help="the curated hub models: family, parameters, download size, cached or not")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.io.catalog import curated

    rows = [
        (m.hub_id, m.family, f"{m.parameters / 1e6:,.0f}M", f"{m.download_bytes / 1e9:.2f} GB", "cached" if m.cached else "-")
        for m in curated()
    ]
    print_table(("hub id", "family", "parameters", "download", "cache"), rows)
    print("download: the safetensors at the dtype the model is stored in (config.json's torch_dtype).")
    return 0
