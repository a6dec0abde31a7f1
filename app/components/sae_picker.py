"""The sparse autoencoders offered for a model, as the explorer's Features view and the
playground's steering name them: the curated ones for it (model/io/sae.py), then any other."""

from __future__ import annotations

from glassbox.model.io.sae import curated

OTHER_SAE = "another: a folder, or owner/repo/folder on the hub"
SOURCE_EXAMPLE = "jbloom/GPT2-Small-SAEs-Reformatted/blocks.8.hook_resid_pre"
ASK_SOURCE = "Type a folder, or owner/repo/folder on the Hugging Face hub, for the sparse autoencoder."


def offered(model_key: str) -> dict[str, str]:
    """Label → source of the curated SAEs for ``model_key``: what each reads, its size, and
    whether it is here already or must be downloaded first."""
    return {f"{e.source} · reads {e.hook} · {e.d_sae:,} features · "
            f"{'ready' if e.cached else f'{e.download_bytes / 1e6:,.0f} MB to download'}": e.source
            for e in curated(model_key)}
