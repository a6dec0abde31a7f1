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

Before any weight is read the config's fields (their JSON types and values) and the weights'
dtypes and shapes in the safetensors header (against one another and the config: engine/sae.py's
check_weights) are checked, and their sizes against the server's memory limit (guard.py); once
read, every number must be finite. Each refusal is one GlassboxError naming the field or weight.
Nothing is unpickled.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from glassbox.model.engine import GlassboxError
from glassbox.model.engine.sae import ARCHITECTURES, NORMALIZATIONS, SparseAutoencoder, check_weights, whole
from glassbox.model.io.assets import asset
from glassbox.model.io.guard import allowed_roots, check_fits, model_directory, read_json, regular_file, shortened
from glassbox.model.io.hub import HubFiles, HubId, cached, download, parse_hub_id

SAELENS_CONFIG, SAELENS_WEIGHTS = "cfg.json", "sae_weights.safetensors"
GEMMA_SCOPE_WEIGHTS = "params.safetensors"
WEIGHT_NAMES = {"W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip"}
SCALING_FACTOR = "scaling_factor"  # older SAELens files: all ones, which its reader drops
GEMMA_SCOPE_NAMES = {
    "w_enc": "W_enc",
    "w_dec": "W_dec",
    "b_enc": "b_enc",
    "b_dec": "b_dec",
    "threshold": "threshold",
    "affine_skip_connection": "W_skip",
}
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
    CuratedSAE(
        "default",
        "default-sae",
        "blocks.2.hook_resid_pre",
        128,
        1024,
        "trained here on the default model's stories (glassbox train-sae): TopK, k = 16",
    ),
    *[
        CuratedSAE(
            "openai-community/gpt2",
            f"jbloom/GPT2-Small-SAEs-Reformatted/blocks.{layer}.hook_resid_pre",
            f"blocks.{layer}.hook_resid_pre",
            768,
            24576,
            "Joseph Bloom's residual-stream SAEs for GPT-2 small (gpt2-small-res-jb), the ones Neuronpedia shows",
            center_input=True,
        )
        for layer in (0, 4, 8, 11)
    ],
    *[
        CuratedSAE(
            "google/gemma-3-270m",
            f"google/gemma-scope-2-270m-pt/resid_post/layer_{layer}_width_16k_l0_medium",
            f"blocks.{layer}.hook_resid_post",
            640,
            16384,
            "Gemma Scope 2's JumpReLU residual SAEs for Gemma 3 270M (16k features, medium L0)",
        )
        for layer in (5, 9, 12, 15)
    ],
]
# What SAELens applies to these releases when it loads them (its pretrained_saes.yaml's config_overrides).
CENTERED_RELEASES = {entry.source for entry in CURATED if entry.center_input}


def curated(model: str | None = None) -> list[CuratedSAE]:
    """The curated SAEs, or those of one model (its hub id)."""
    return [entry for entry in CURATED if model is None or entry.model == model]


def load_sae(
    source: str, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", max_bytes: int | None = None
) -> SparseAutoencoder:
    """The SAE in folder ``source``, or at ``owner/repo/folder`` on the hub (fetched on first use),
    checked as the module's docstring says."""
    folder, name = _resolve(source)
    label = shortened(name)
    fields: dict | Callable[[dict], dict]  # Gemma Scope's depend on the weights' shapes
    if (folder / SAELENS_WEIGHTS).exists() or (folder / SAELENS_CONFIG).exists():
        fields, stated = _saelens_fields(read_json(folder / SAELENS_CONFIG), name)
        path, names = folder / SAELENS_WEIGHTS, {key: key for key in (*WEIGHT_NAMES, SCALING_FACTOR)}
    elif (folder / GEMMA_SCOPE_WEIGHTS).exists():
        fields, stated = lambda shapes: _gemma_scope_fields(name, "W_skip" in shapes), {}
        path, names = folder / GEMMA_SCOPE_WEIGHTS, GEMMA_SCOPE_NAMES
    else:
        raise GlassboxError(
            f"No sparse autoencoder in {shortened(str(source))}: it needs SAELens's {SAELENS_CONFIG} "
            f"and {SAELENS_WEIGHTS}, or Gemma Scope's {GEMMA_SCOPE_WEIGHTS}"
        )
    settings, tensors = _read(path, names, fields, stated, label, dtype, device, max_bytes)
    return SparseAutoencoder(**(settings | tensors), name=name)


TRANSCODERS = {"default-transcoders": "default"}  # shipped transcoder sets → their model (glassbox train-transcoder)


def load_transcoders(
    source: str, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", max_bytes: int | None = None
) -> list[SparseAutoencoder]:
    """A transcoder per block, in block order: a shipped set by name (``default-transcoders``) or a
    folder holding ``blocks.0/``, ``blocks.1/``, … each in SAELens's format (train-transcoder's)."""
    folder = asset(source) if source in TRANSCODERS else Path(source)
    blocks = sorted(
        (p for p in folder.glob("blocks.*") if p.name.split(".")[-1].isdigit()), key=lambda p: int(p.name.split(".")[-1])
    )
    if not blocks:
        raise GlassboxError(f"No transcoders in {shortened(source)}: it needs a folder per block, blocks.0/, blocks.1/, …")
    return [load_sae(str(block), dtype, device, max_bytes) for block in blocks]


# --- where the files are ---
def _hub_source(source: str) -> tuple[HubId, str]:
    parts = source.strip().strip("/").split("/")
    hub = parse_hub_id("/".join(parts[:2])) if len(parts) > 2 else None
    if hub is None or hub.revision or not all(re.fullmatch(r"[\w.=+-]+", part) and part not in {".", ".."} for part in parts[2:]):
        raise GlassboxError(
            f"No sparse autoencoder {shortened(source)!r}: give a folder, or owner/repo/folder on the Hugging Face hub"
        )
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
def _saelens_fields(config: dict, name: str) -> tuple[dict, dict[str, int | None]]:
    """(the SparseAutoencoder's fields, the sizes d_in, d_sae, d_out the config states) from
    SAELens's cfg.json; a field of the wrong JSON type or an unknown value is refused, naming it."""
    label = shortened(name)
    metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}

    def setting(key, default=None):
        return metadata.get(key, config.get(key, default))

    def refuse(key: str, value, wanted: str):
        raise GlassboxError(f"{label}: {SAELENS_CONFIG}'s {key} must be {wanted}, not {_json(value)}")

    def typed(key: str, value, kind: type, wanted: str):
        if value is not None and (isinstance(value, bool) != (kind is bool) or not isinstance(value, kind)):
            refuse(key, value, wanted)
        return value

    def flag(key: str, value, default: bool) -> bool:
        return default if value is None else typed(key, value, bool, "true or false")

    def count(key: str, value) -> int | None:
        if value is not None and not (whole(value) and value > 0):
            refuse(key, value, "a whole number above 0")
        return value

    architecture = typed("architecture", config.get("architecture", "standard"), str, "a string")
    if config.get("activation_fn") == "topk" or config.get("activation_fn_str") == "topk":
        architecture = "topk"
    architecture = LEGACY_ARCHITECTURES.get(architecture, architecture)
    if architecture not in ARCHITECTURES:
        refuse("architecture", config.get("architecture"), f"one of {', '.join(ARCHITECTURES)}")
    normalize = typed("normalize_activations", config.get("normalize_activations") or "none", str, "a string")
    if normalize not in NORMALIZATIONS:
        raise GlassboxError(
            f"{label}: {SAELENS_CONFIG}'s normalize_activations is {normalize!r}, which needs a "
            f"dataset-wide factor Glassbox does not have; it reads {', '.join(NORMALIZATIONS)}"
        )
    hooks = {
        key: typed(key, setting(key), str, "the name of a tensor (a string)")
        for key in ("hook_name", "hook_point", "hook_name_out", "hf_hook_name", "hf_hook_name_out")
    }
    hook = hooks["hook_name"] or hooks["hook_point"]
    if not hook:
        raise GlassboxError(f"{label}: its {SAELENS_CONFIG} names no hook (hook_name)")
    if setting("hook_head_index") is not None:
        raise GlassboxError(f"{label}: SAEs of one head's output (hook_head_index) are not read")
    k = None
    if architecture == "topk":  # k beside activation_fn_kwargs in older configs; its range is check_weights's
        legacy = typed("activation_fn_kwargs", config.get("activation_fn_kwargs"), dict, "an object") or {}
        k = count("k", config["k"] if config.get("k") is not None else legacy.get("k"))
        if k is None:
            raise GlassboxError(f"{label}: a TopK SAE needs k in its {SAELENS_CONFIG}")
    stated = {key: count(key, config.get(key)) for key in ("d_in", "d_sae", "d_out")}
    kwargs = typed("model_from_pretrained_kwargs", setting("model_from_pretrained_kwargs"), dict, "an object") or {}
    return {
        "architecture": architecture,
        "reads": _glassbox_hook(hook, hooks["hf_hook_name"]),
        "writes": _glassbox_hook(hooks["hook_name_out"] or hook, hooks["hf_hook_name_out"] or hooks["hf_hook_name"]),
        "k": k,
        "rescale_acts_by_decoder_norm": flag("rescale_acts_by_decoder_norm", config.get("rescale_acts_by_decoder_norm"), False),
        "apply_b_dec_to_input": flag("apply_b_dec_to_input", config.get("apply_b_dec_to_input"), True),
        "normalize_activations": normalize,
        "center_input": flag("center_writing_weights", kwargs.get("center_writing_weights"), False) or name in CENTERED_RELEASES,
    }, stated


def _json(value) -> str:
    """A config's value as its JSON reads, for a message."""
    return shortened(json.dumps(value), 40)


def _gemma_scope_fields(name: str, skip: bool) -> dict:
    layer = re.search(r"layer_(\d+)", name)
    kinds = {
        "resid_post": ("hook_resid_post",) * 2,
        "mlp_out": ("hook_mlp_out",) * 2,
        "attn_out": ("attn.hook_z",) * 2,
        "transcoder": ("ln2.hook_out", "hook_mlp_out"),
    }
    kind = next((k for k in kinds if k in name), None)
    if layer is None or kind is None:
        raise GlassboxError(
            f"{shortened(name)}: a Gemma Scope folder's name says its hook (resid_post/layer_12_…, "
            "mlp_out, attn_out, transcoder); this one does not"
        )
    reads, writes = (f"blocks.{layer[1]}.{hook}" for hook in kinds[kind])
    architecture = "jumprelu_skip_transcoder" if skip else "jumprelu_transcoder" if kind == "transcoder" else "jumprelu"
    return {"architecture": architecture, "reads": reads, "writes": writes, "apply_b_dec_to_input": False}


def _glassbox_hook(hook: str, hf_hook: str | None) -> str:
    """A TransformerLens hook name as Glassbox names the same tensor."""
    if hook.endswith("hook_mlp_in"):  # TransformerLens's copy of resid_mid, or (Gemma Scope) the normed MLP input
        normed = isinstance(hf_hook, str) and "pre_feedforward_layernorm" in hf_hook
        return hook.replace("hook_mlp_in", "ln2.hook_out" if normed else "hook_resid_mid")
    return hook


def _read(
    path: Path,
    names: dict[str, str],
    fields: dict | Callable[[dict], dict],
    stated: dict[str, int | None],
    label: str,
    dtype: torch.dtype,
    device,
    max_bytes: int | None,
) -> tuple[dict, dict[str, torch.Tensor]]:
    """(the SAE's fields, its weights by Glassbox's names) from the safetensors file ``path``
    (its keys → Glassbox's in ``names``): the header's dtypes and shapes checked against one
    another and the config's ``stated`` sizes, and the whole size (in ``dtype``) against the
    limits, before any tensor is read; each one finite once read. ``fields`` a function: they
    depend on the header's shapes (Gemma Scope's: a skip connection's weight makes a skip transcoder)."""
    regular_file(path)
    try:
        with safe_open(str(path), framework="pt") as stored:
            keys = [key for key in stored.keys() if key in names]
            header = {names[key]: stored.get_slice(key) for key in keys}
            for key, part in header.items():
                if not part.get_dtype().startswith(("F", "BF")):
                    raise GlassboxError(
                        f"{label}: {key} is stored as {part.get_dtype()}; an SAE's weights are floating-point numbers"
                    )
            shapes = {key: tuple(part.get_shape()) for key, part in header.items()}
            if callable(fields):
                fields = fields(shapes)
            check_weights(
                fields["architecture"], {k: v for k, v in shapes.items() if k != SCALING_FACTOR}, fields.get("k"), stated, label
            )
            size = sum(math.prod(shape) for shape in shapes.values()) * torch.tensor([], dtype=dtype).element_size()
            if max_bytes is not None and size > max_bytes:
                raise GlassboxError(
                    f"This sparse autoencoder takes {size / 2**30:.1f} GB; at most {max_bytes / 2**30:.1f} GB may be opened here"
                )
            check_fits(size, str(dtype).removeprefix("torch."), torch.device(device))
            tensors = {names[key]: _finite(stored.get_tensor(key), names[key], dtype, device, label) for key in keys}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise GlassboxError(f"{path} is not a readable safetensors file ({exc})") from None
    factor = tensors.pop(SCALING_FACTOR, None)
    if factor is not None and not torch.allclose(factor, torch.ones_like(factor)):  # SAELens's reader drops a 1
        raise GlassboxError(
            f"{label}: its weights hold a {SCALING_FACTOR} other than 1 (an old SAELens fine-tuning "
            "scale), which Glassbox does not apply"
        )
    return fields, tensors


def _finite(stored: torch.Tensor, key: str, dtype: torch.dtype, device, label: str) -> torch.Tensor:
    """A weight as read, in ``dtype`` on ``device``, every number in it finite (in the file, and in ``dtype``)."""
    if not torch.isfinite(stored).all():
        raise GlassboxError(f"{label}: {key} holds NaN or infinite numbers")
    tensor = stored.to(device=device, dtype=dtype)
    if not torch.isfinite(tensor).all():
        raise GlassboxError(f"{label}: {key} holds numbers too large for {str(dtype).removeprefix('torch.')}")
    return tensor
