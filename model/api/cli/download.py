"""`glassbox download ID[@REVISION]`: fetch a hub model's config, tokenizer and safetensors into
the hub cache."""

from __future__ import annotations


def add_arguments(sub) -> None:
    p = sub.add_parser("download", help="fetch a hub model (config, tokenizer, safetensors) into the hub cache")
    p.add_argument("id", help="owner/name, optionally @revision (a branch, tag or commit)")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import GlassboxError
    from glassbox.model.io.hub import download, parse_hub_id

    hub = parse_hub_id(args.id)
    if hub is None:
        raise GlassboxError(f"{args.id!r} is not a hub id: give owner/name, optionally @revision")
    print(f"{hub}: {download(hub)}")
    return 0
