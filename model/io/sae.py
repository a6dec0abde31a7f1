"""Sparse autoencoders and transcoders from a folder or the hub, in the formats they are published in.

- **SAELens's** (``cfg.json`` + ``sae_weights.safetensors``: W_enc, b_enc, W_dec, b_dec,
  threshold, W_skip), as ``SAE.save_model`` writes it and its hub releases hold it, one folder
  per SAE (``jbloom/GPT2-Small-SAEs-Reformatted/blocks.8.hook_resid_pre``). Older configs keep
  the hook name at the top level (``hook_name``, ``hook_point``) and TopK's k in
  ``activation_fn_kwargs``; both are read.
- a shipped one by name: ``default-sae``, the default model's (``glassbox train-sae``).
- **Gemma Scope 2's** (``params.safetensors``: w_enc, w_dec, b_enc, b_dec, threshold), JumpReLU,
  its hook read from the folder's name as SAELens's loader reads it (``resid_post/layer_12_…``:
  blocks.12.hook_resid_post; ``mlp_out``, ``attn_out``, ``transcoder``).

A hub source is ``owner/repo/folder…`` (the SAE's folder inside the repository); only that
folder's config and weights are fetched, into the hub cache (hub.py: its timeouts, size checks
and offline rules). A local folder that exists is read as it is. Hook names are
TransformerLens's, which Glassbox shares, but for ``hook_mlp_in`` (TransformerLens's copy of
resid_mid; Gemma Scope's transcoders read the MLP's normed input, ``ln2.hook_out``).

Before any weight is read the sizes in the safetensors headers are checked against the
server's memory limit (guard.py), and nothing is unpickled.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from glassbox.model.engine.sae import ARCHITECTURES, NORMALIZATIONS, SparseAutoencoder
from glassbox.model.engine import GlassboxError
from glassbox.model.io.assets import asset
from glassbox.model.io.guard import allowed_roots, check_fits, model_directory, read_json, regular_file, shortened
from glassbox.model.io.hub import HubFiles, HubId, cached, download, parse_hub_id

SAELENS_CONFIG, SAELENS_WEIGHTS = "cfg.json", "sae_weights.safetensors"
GEMMA_SCOPE_WEIGHTS = "params.safetensors"
WEIGHT_NAMES = {"W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip"}
GEMMA_SCOPE_NAMES = {"w_enc": "W_enc", "w_dec": "W_dec", "b_enc": "b_enc", "b_dec": "b_dec", "threshold": "threshold",
                     "affine_skip_connection": "W_skip"}
LEGACY_ARCHITECTURES = {"jump_relu": "jumprelu", "gated": None}


@dataclass(frozen=True)
class CuratedSAE:
    """A public SAE release for a model Glassbox opens, one folder of it per entry."""
    model: str  # the hub id of the model it reads
    source: str  # owner/repo/folder
    hook: str
    d_in: int
    d_sae: int
    why: str
    center_input: bool = False  # trained on TransformerLens's centred residual stream

    @property
    def download_bytes(self) -> int:
        """float32 weights: W_enc, W_dec, b_enc, b_dec (and a JumpReLU's threshold)."""
        return 4 * (2 * self.d_in * self.d_sae + 2 * self.d_sae + self.d_in)

    @property
    def cached(self) -> bool:
        if self.source in BUNDLED:
            return True
        hub, folder = _hub_source(self.source)
        return cached(hub, _sae_files(folder)) is not None


BUNDLED = {"default-sae": "default"}  # shipped SAE → the bundled model it reads (glassbox train-sae)
CURATED = [
    CuratedSAE("default", "default-sae", "blocks.2.hook_resid_pre", 128, 1024,
               "trained here on the default model's stories (glassbox train-sae): TopK, k = 16"),
    *[CuratedSAE("openai-community/gpt2", f"jbloom/GPT2-Small-SAEs-Reformatted/blocks.{layer}.hook_resid_pre",
                 f"blocks.{layer}.hook_resid_pre", 768, 24576,
                 "Joseph Bloom's residual-stream SAEs for GPT-2 small (gpt2-small-res-jb), the ones Neuronpedia shows",
                 center_input=True) for layer in (0, 4, 8, 11)],
    *[CuratedSAE("google/gemma-3-270m", f"google/gemma-scope-2-270m-pt/resid_post/layer_{layer}_width_16k_l0_medium",
                 f"blocks.{layer}.hook_resid_post", 640, 16384,
                 "Gemma Scope 2's JumpReLU residual SAEs for Gemma 3 270M (16k features, medium L0)")
      for layer in (5, 9, 12, 15)],
]
# What SAELens applies to these releases when it loads them (its pretrained_saes.yaml's config_overrides).
CENTERED_RELEASES = {entry.source for entry in CURATED if entry.center_input}


def curated(model: str | None = None) -> list[CuratedSAE]:
    """The curated SAEs, or those of one model (its hub id)."""
    return [entry for entry in CURATED if model is None or entry.model == model]


def load_sae(source: str, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
             max_bytes: int | None = None) -> SparseAutoencoder:
    """The SAE in folder ``source``, or at ``owner/repo/folder`` on the hub (fetched on first use)."""
    folder, name = _resolve(source)
    if (folder / SAELENS_WEIGHTS).exists() or (folder / SAELENS_CONFIG).exists():
        config = read_json(folder / SAELENS_CONFIG)
        tensors = _read(folder / SAELENS_WEIGHTS, WEIGHT_NAMES, dtype, device, max_bytes)
        fields = _saelens_fields(config, name)
    elif (folder / GEMMA_SCOPE_WEIGHTS).exists():
        raw = _read(folder / GEMMA_SCOPE_WEIGHTS, set(GEMMA_SCOPE_NAMES), dtype, device, max_bytes)
        tensors = {GEMMA_SCOPE_NAMES[key]: value for key, value in raw.items()}
        fields = _gemma_scope_fields(name, "W_skip" in tensors)
    else:
        raise GlassboxError(f"No sparse autoencoder in {shortened(str(source))}: it needs SAELens's {SAELENS_CONFIG} "
                            f"and {SAELENS_WEIGHTS}, or Gemma Scope's {GEMMA_SCOPE_WEIGHTS}")
    missing = sorted({"W_enc", "b_enc", "W_dec", "b_dec"} - set(tensors))
    if missing:
        raise GlassboxError(f"{shortened(str(source))}: its weights lack {', '.join(missing)}")
    sae = SparseAutoencoder(**fields, **tensors, name=name)
    _check_shapes(sae, source)
    return sae


# --- where the files are ---
def _hub_source(source: str) -> tuple[HubId, str]:
    parts = source.strip().strip("/").split("/")
    hub = parse_hub_id("/".join(parts[:2])) if len(parts) > 2 else None
    if hub is None or hub.revision or not all(re.fullmatch(r"[\w.=+-]+", part) and part not in {".", ".."}
                                              for part in parts[2:]):
        raise GlassboxError(f"No sparse autoencoder {shortened(source)!r}: give a folder, or owner/repo/folder on the "
                            "Hugging Face hub")
    return hub, "/".join(parts[2:])


def _sae_files(folder: str) -> HubFiles:
    names = [f"{folder}/{name}" for name in (SAELENS_CONFIG, SAELENS_WEIGHTS, GEMMA_SCOPE_WEIGHTS, "config.json")]

    def check(hub: HubId, wanted: list[str], listed: dict[str, int]) -> None:
        if not any(f.endswith(".safetensors") for f in wanted):
            raise GlassboxError(f"{hub}/{folder} holds no sparse autoencoder ({SAELENS_WEIGHTS} or {GEMMA_SCOPE_WEIGHTS})")

    def complete(snapshot: Path) -> bool:
        return (snapshot / folder / SAELENS_WEIGHTS).exists() or (snapshot / folder / GEMMA_SCOPE_WEIGHTS).exists()

    return HubFiles(lambda name: name in names, check, complete, [f"{folder}/*"])


def pending_download(source: str) -> tuple[HubId, HubFiles, int | None] | None:
    """What must be fetched before ``source`` opens: (its repository, the folder's files, their
    size when the curated list knows it), or None (a bundled SAE, a folder, one in the cache)."""
    on_hub = _hub_folder(source)
    if on_hub is None:
        return None
    hub, folder = on_hub
    files = _sae_files(folder)
    if cached(hub, files) is not None:
        return None
    return hub, files, next((e.download_bytes for e in curated() if e.source == source.strip().strip("/")), None)


def _hub_folder(source: str) -> tuple[HubId, str] | None:
    """(the repository, the folder) of an SAE on the hub; None for a bundled one or a folder here."""
    if source in BUNDLED or (allowed_roots() is None and os.path.isdir(source)):
        return None
    if source.count("/") < 2 or source.startswith(("/", ".", "~")):
        return None
    return _hub_source(source)


def _resolve(source: str) -> tuple[Path, str]:
    """(the SAE's folder, its name for labels)."""
    if source in BUNDLED:
        return asset(source), source
    on_hub = _hub_folder(source)
    if on_hub is not None:
        hub, folder = on_hub
        return download(hub, files=_sae_files(folder)) / folder, f"{hub}/{folder}"
    if allowed_roots() is None and os.path.isdir(source):
        return Path(source).resolve(), source
    return model_directory(source, ()), source


# --- the two formats ---
def _saelens_fields(config: dict, name: str) -> dict:
    metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}

    def setting(key, default=None):
        return metadata.get(key, config.get(key, default))

    architecture = config.get("architecture", "standard")
    if config.get("activation_fn") == "topk" or config.get("activation_fn_str") == "topk":
        architecture = "topk"
    architecture = LEGACY_ARCHITECTURES.get(architecture, architecture)
    if architecture not in ARCHITECTURES:
        raise GlassboxError(f"{name}: Glassbox reads {', '.join(ARCHITECTURES)} SAEs, not {config.get('architecture')!r}")
    normalize = config.get("normalize_activations") or "none"
    if normalize not in NORMALIZATIONS:
        raise GlassboxError(f"{name}: activations normalised by {normalize!r} need a dataset-wide factor Glassbox "
                            f"does not have; it reads {', '.join(NORMALIZATIONS)}")
    hook = setting("hook_name") or setting("hook_point")
    if not isinstance(hook, str):
        raise GlassboxError(f"{name}: its {SAELENS_CONFIG} names no hook (hook_name)")
    if setting("hook_head_index") is not None:
        raise GlassboxError(f"{name}: SAEs of one head's output (hook_head_index) are not read")
    k = config.get("k", (config.get("activation_fn_kwargs") or {}).get("k"))
    if architecture == "topk" and not (isinstance(k, int) and k > 0):
        raise GlassboxError(f"{name}: a TopK SAE needs k, a positive whole number")
    kwargs = setting("model_from_pretrained_kwargs") or {}
    return {
        "architecture": architecture,
        "reads": _glassbox_hook(hook, setting("hf_hook_name")),
        "writes": _glassbox_hook(setting("hook_name_out") or hook, setting("hf_hook_name_out") or setting("hf_hook_name")),
        "k": k if architecture == "topk" else None,
        "rescale_acts_by_decoder_norm": bool(config.get("rescale_acts_by_decoder_norm", False)),
        "apply_b_dec_to_input": bool(config.get("apply_b_dec_to_input", True)),
        "normalize_activations": normalize,
        "center_input": bool(kwargs.get("center_writing_weights", False)) or name in CENTERED_RELEASES,
    }


def _gemma_scope_fields(name: str, skip: bool) -> dict:
    layer = re.search(r"layer_(\d+)", name)
    kinds = {"resid_post": ("hook_resid_post",) * 2, "mlp_out": ("hook_mlp_out",) * 2,
             "attn_out": ("attn.hook_z",) * 2, "transcoder": ("ln2.hook_out", "hook_mlp_out")}
    kind = next((k for k in kinds if k in name), None)
    if layer is None or kind is None:
        raise GlassboxError(f"{name}: a Gemma Scope folder's name says its hook (resid_post/layer_12_…, mlp_out, "
                            "attn_out, transcoder); this one does not")
    reads, writes = (f"blocks.{layer[1]}.{hook}" for hook in kinds[kind])
    architecture = "jumprelu_skip_transcoder" if skip else "jumprelu_transcoder" if kind == "transcoder" else "jumprelu"
    return {"architecture": architecture, "reads": reads, "writes": writes, "apply_b_dec_to_input": False}


def _glassbox_hook(hook: str, hf_hook: str | None) -> str:
    """A TransformerLens hook name as Glassbox names the same tensor."""
    if hook.endswith("hook_mlp_in"):  # TransformerLens's copy of resid_mid, or (Gemma Scope) the normed MLP input
        normed = isinstance(hf_hook, str) and "pre_feedforward_layernorm" in hf_hook
        return hook.replace("hook_mlp_in", "ln2.hook_out" if normed else "hook_resid_mid")
    return hook


def _read(path: Path, names: set[str], dtype: torch.dtype, device, max_bytes: int | None) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, its sizes checked (in ``dtype``) before any is read."""
    regular_file(path)
    try:
        with safe_open(str(path), framework="pt") as stored:
            keys = [key for key in stored.keys() if key in names]
            numbers = sum(int(torch.tensor(stored.get_slice(key).get_shape()).prod()) for key in keys)
            size = numbers * torch.tensor([], dtype=dtype).element_size()
            if max_bytes is not None and size > max_bytes:
                raise GlassboxError(f"This sparse autoencoder takes {size / 2**30:.1f} GB; at most "
                                    f"{max_bytes / 2**30:.1f} GB may be opened here")
            check_fits(size, str(dtype).removeprefix("torch."), torch.device(device))
            return {key: stored.get_tensor(key).to(device=device, dtype=dtype) for key in keys}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise GlassboxError(f"{path} is not a readable safetensors file ({exc})") from None


def _check_shapes(sae: SparseAutoencoder, source: str) -> None:
    d_in, d_sae, d_out = sae.W_enc.shape[0], sae.W_enc.shape[-1], sae.W_dec.shape[-1]
    expected = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_out), "b_dec": (d_out,)}
    if sae.threshold is not None:
        expected["threshold"] = (d_sae,)
    if sae.W_skip is not None:
        expected["W_skip"] = (d_out, d_in)
    for key, shape in expected.items():
        if tuple(getattr(sae, key).shape) != shape:
            raise GlassboxError(f"{shortened(source)}: {key} has shape {list(getattr(sae, key).shape)}, "
                                f"the others need {list(shape)}")
    if "jumprelu" in sae.architecture and sae.threshold is None:
        raise GlassboxError(f"{shortened(source)}: a JumpReLU SAE needs its threshold")
    if not sae.transcoder and d_in != d_out:
        raise GlassboxError(f"{shortened(source)}: an SAE reconstructs what it reads, but it reads {d_in} numbers "
                            f"and writes {d_out}")
