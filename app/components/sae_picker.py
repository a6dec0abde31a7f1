"""The sparse autoencoders offered for a model, as the explorer's Features view and the
playground's steering name them: the curated ones for it (model/io/sae.py), then any other."""

from __future__ import annotations

from glassbox.app.components.download import offer_download
from glassbox.model.io.sae import curated, pending_download

OTHER_SAE = "another: a folder, or owner/repo/folder on the hub"
SOURCE_EXAMPLE = "jbloom/GPT2-Small-SAEs-Reformatted/blocks.8.hook_resid_pre"
ASK_SOURCE = "Type a folder, or owner/repo/folder on the Hugging Face hub, for the sparse autoencoder."


def offered(model_key: str) -> dict[str, str]:
    """Label → source of the curated SAEs for ``model_key``: what each reads, its size, and
    whether it is here already or must be downloaded first."""
    return {
        f"{e.source} · reads {e.hook} · {e.d_sae:,} features · "
        f"{'ready' if e.cached else f'{e.download_bytes / 1e6:,.0f} MB to download'}": e.source
        for e in curated(model_key)
    }


def sae_ready(source: str, key: str) -> bool:
    """True when ``source`` opens without the network; else its Download button (True once it is
    fetched). A source that is not one raises GlassboxError, as opening it would."""
    pending = pending_download(source)
    if pending is None:
        return True
    hub, files, size = pending
    return offer_download(
        source.strip().strip("/"), hub, key, files, size, fetched="Only its folder's config and weights are fetched"
    )
