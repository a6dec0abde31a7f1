"""Loading models: by name from the shipped ``assets``, from a local directory, or by hub id
(``org/name[@revision]``, fetched into the hub cache by hub.py).

Two directory formats, both safetensors only (nothing is ever unpickled):
- Glassbox's own: ``config.json`` with a ``"glassbox"`` entry (a ModelConfig), the weights
  under the engine's parameter names, and ``tokenizer.json``.
- a Hugging Face layout whose ``model_type`` has a converter in ``convert/`` (GPT-2, GPT-NeoX,
  GPT-Neo, Llama, Mistral, Qwen2, Qwen3, Gemma 1-3, and the mixtures of experts Mixtral,
  Qwen2-MoE, Qwen3-MoE, OLMoE, the encoder BERT and the encoder-decoders T5 and BART): ``config.json``, ``model.safetensors``
  (or shards named by ``model.safetensors.index.json``), and ``tokenizer.json`` or
  ``vocab.json`` + ``merges.txt``. The weights are converted on load.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from glassbox.model.engine import DTYPES, EncoderDecoder, GlassboxError, ModelConfig, Transformer, build_model, default_device
from glassbox.model.engine.placement import device_map_for, dispatch
from glassbox.model.io.assets import asset, lab_checkpoint
from glassbox.model.io.convert import CONVERTERS, FAMILY_NAMES
from glassbox.model.io.guard import CONFIG_BYTES, check_fits, model_directory, read_json, shard_files, some
from glassbox.model.io.hub import Progress, download, parse_hub_id
from glassbox.model.io.tokenizer import Tokenizer

# shipped in assets/: the default model, the article's, and the micro-models (model/micro/)
NAMED_MODELS = (
    "default",
    "worked-example",
    "micro-bigram",
    "micro-attention-only",
    "micro-induction",
    "micro-moe",
    "micro-moe-unbalanced",
    "micro-seq2seq",
)
MAX_LAYERS = 1024  # the deepest hub models have ~130 blocks; a bound keeps the meta models below cheap


@dataclass
class LoadedModel:
    name: str
    """What it was loaded as: a bundled name, a folder, a hub id."""
    model: Transformer | EncoderDecoder
    """The torch module (a Transformer; an EncoderDecoder where ``cfg.kind`` is "encoder-decoder")."""
    tokenizer: Tokenizer
    """Its tokenizer (glassbox.model.io.tokenizer)."""
    path: Path
    """The folder its weights were read from."""
    about: dict = field(default_factory=dict)
    """Provenance notes (where the weights came from, a model card), shown by the CLI and the app."""

    @property
    def cfg(self) -> ModelConfig:
        """Its configuration: sizes, norms, attention, positions (glassbox.model.engine.ModelConfig)."""
        return self.model.cfg

    def encode(self, prompt: str) -> list[int]:
        """The prompt's token ids. The tokenizer rejects an empty prompt; run_trace the length."""
        return self.tokenizer.encode(prompt)

    @property
    def weight_bytes(self) -> int:
        """The memory its weights and buffers take."""
        return sum(t.nbytes for t in itertools.chain(self.model.parameters(), self.model.buffers()))

    @property
    def nbytes(self) -> int:
        """The memory it takes, what the model cache counts: its weights and buffers, and its
        tokenizer (a word-level vocabulary of millions of words takes gigabytes)."""
        return self.weight_bytes + self.tokenizer.nbytes

    @property
    def pieces(self) -> list[str]:
        """Every token id's text."""
        return self.tokenizer.pieces


def resolve(name_or_path: str, progress: Progress | None = None) -> Path:
    """A bundled model's folder, a hub id's cached snapshot (fetched if need be: see hub.py), or
    the directory a path names (resolved, and refused outside GLASSBOX_MODEL_DIRS when that is
    set: see guard.py)."""
    if name_or_path in NAMED_MODELS:
        return asset(name_or_path)
    lab = lab_checkpoint(name_or_path)
    if lab is not None:  # a lab run's checkpoint (model/lab/): shipped, or trained by the app
        if not (lab / "config.json").is_file():
            raise GlassboxError(f"No lab checkpoint {name_or_path!r}: that run has no checkpoint at that step")
        return lab
    hub = parse_hub_id(name_or_path)
    if hub is not None:
        return download(hub, progress)
    return model_directory(name_or_path, NAMED_MODELS)


def model_key(name_or_path: str) -> str:
    """One name per model, whatever the spelling: a bundled model's name (also when given as
    its folder), else its resolved directory (``dir/``, ``./dir`` and ``dir`` are one model).
    What caches key on."""
    if name_or_path in NAMED_MODELS or lab_checkpoint(name_or_path) is not None:
        return name_or_path
    hub = parse_hub_id(name_or_path)
    if hub is not None:  # keyed without a look at the network or the cache
        return str(hub)
    path = resolve(name_or_path)
    return next((name for name in NAMED_MODELS if asset(name).resolve() == path), str(path))


def load(
    name_or_path: str,
    dtype: str | None = None,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
) -> LoadedModel:
    """Load a model and its tokenizer, ready for inference (eval mode, on ``device``).

    ``dtype`` is one of DTYPES; by default a Glassbox checkpoint's own (float32 unless its config
    says otherwise, as the worked example's does), and for a transformers checkpoint the
    server's GLASSBOX_DTYPE (default float32; bfloat16 or float16 halve a big model's memory). Everything that can be checked is
    checked before the model is allocated: the files are regular files of sane size, the
    config's sizes fit the machine, and the stored weights' names and shapes fit the config.

    ``device_map`` splits the model by blocks across devices with accelerate (placement.py):
    "auto" (fill the GPUs in order, then the CPU, then the disk, within ``max_memory``, accelerate's
    form: {0: "70GiB", "cpu": "100GiB"}; default: what each has free), "balanced" (the same, the
    blocks spread evenly over the GPUs), or a map {"blocks.3": "disk", …} naming every block and part.
    The weights are read on the CPU first."""
    path = resolve(name_or_path, progress)
    config = read_json(path / "config.json", CONFIG_BYTES)
    if "glassbox" in config:
        cfg = ModelConfig.from_dict(config["glassbox"])
        convert = _as_stored
        about = config.get("about", {})
        if not isinstance(about, dict):
            raise GlassboxError(f'{path / "config.json"}: "about" must be a JSON object')
        dtype = dtype or config.get("dtype", "float32")
    elif config.get("model_type") in CONVERTERS:
        converter = CONVERTERS[config["model_type"]]
        cfg, convert = converter.config(config), converter.state_dict
        hub = parse_hub_id(name_or_path)
        where = f"the Hugging Face hub: {hub}, commit {path.name[:10]}" if hub else str(path)
        about = {
            "source": f"{config['model_type']} checkpoint from {where}, converted on load",
            "family": FAMILY_NAMES[config["model_type"]],
        }
        dtype = dtype or os.environ.get("GLASSBOX_DTYPE") or "float32"
    else:
        raise GlassboxError(
            f"{path / 'config.json'} is neither a Glassbox config nor one of a family Glassbox opens "
            f"(model_type {config.get('model_type')!r}; it opens {', '.join(sorted(CONVERTERS))})"
        )
    if dtype not in DTYPES:
        raise GlassboxError(f"dtype must be one of {list(DTYPES)}, not {dtype!r}")
    device = torch.device(device or default_device())
    if max(cfg.n_layers, cfg.n_decoder_layers or 0) > MAX_LAYERS:
        blocks = max(cfg.n_layers, cfg.n_decoder_layers or 0)
        raise GlassboxError(f"The config asks for {blocks:,} blocks; at most {MAX_LAYERS:,} are supported")
    if device_map is None:  # a split model is checked by accelerate's plan, against every device's memory
        check_fits(model_bytes(cfg, DTYPES[dtype]), dtype, device)
    weights = shard_files(path)
    _check_state(convert(cfg, _stored_shapes(weights)), _meta_model(cfg).state_dict(), path)
    tokenizer = Tokenizer.from_dir(path)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise GlassboxError(f"The tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size}")
    tokenizer.cover(cfg.vocab_size)  # ids past the tokenizer's (padding rows) get labels too
    model = build_model(cfg).in_precision(DTYPES[dtype])  # the first allocation: everything above has passed
    model.load_state_dict(convert(cfg, _read_weights(weights)))  # casts the stored weights to the model's dtype
    if device_map is None:
        model = model.to(device).eval()
    else:  # across devices, the CPU and the disk (placement.py)
        model = dispatch(model.eval(), device_map_for(model, device_map, max_memory))
    return LoadedModel(model_key(name_or_path), model, tokenizer, path, about)


def model_bytes(cfg: ModelConfig, dtype: torch.dtype) -> int:
    """The bytes of a model's parameters and buffers (see ``count_numbers``)."""
    return count_numbers(cfg, buffers=True) * dtype.itemsize


def count_numbers(cfg: ModelConfig, buffers: bool = False) -> int:
    """How many numbers a model's parameters (and buffers) hold, from small models on the meta
    device (nothing allocated, nothing counted by hand): one block, two blocks, and the
    difference per block; in a mixture of experts with dense blocks among the sparse ones, that
    for each kind of block."""

    def numel(n_layers: int, experts: bool) -> int:
        # the window changes no size; experts do, so every block of these is of one kind
        moe_layers = cfg.moe_layers if cfg.n_experts is None else (None if experts else ())
        model = _meta_model(dataclasses.replace(cfg, n_layers=n_layers, local_layers=None, moe_layers=moe_layers))
        tensors = itertools.chain(model.parameters(), model.buffers() if buffers else ())
        return sum(t.numel() for t in tensors)

    kinds = {cfg.is_moe(i) for i in range(cfg.n_layers)} or {False}
    try:
        per_block = {experts: numel(2, experts) - numel(1, experts) for experts in kinds}
        kind = next(iter(kinds))
        outside = numel(1, kind) - per_block[kind]  # the embeddings, the final norm, the head
    except (RuntimeError, OverflowError, TypeError, ValueError):  # a size past what a tensor can index
        raise GlassboxError("The config's sizes are too large for any tensor") from None
    return outside + sum(per_block[cfg.is_moe(i)] for i in range(cfg.n_layers))


def _meta_model(cfg: ModelConfig) -> Transformer | EncoderDecoder:
    """The model's structure with shapes but no storage."""
    with torch.device("meta"):
        return build_model(cfg)


def _as_stored(cfg: ModelConfig, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Glassbox's own format: stored under the engine's names already."""
    return state


def save(path: Path, model: Transformer, tokenizer: Tokenizer, dtype: str, about: dict) -> None:
    """Write a model in Glassbox's own format."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {"glassbox": model.cfg.to_dict(), "dtype": dtype, "about": about}
    (path / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    state = {k: v.detach().to(DTYPES[dtype]).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))
    tokenizer.save(path)


def _stored_shapes(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors as meta tensors: names and shapes from the safetensors headers,
    no data read. A converter runs on them as on real weights, so its output's shapes can be
    checked before anything is allocated."""
    shapes: dict[str, torch.Tensor] = {}
    for path in paths:
        try:
            with safe_open(str(path), framework="pt") as stored:
                shapes |= {key: torch.empty(stored.get_slice(key).get_shape(), device="meta") for key in stored.keys()}
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise GlassboxError(f"{path} is not a readable safetensors file ({exc})") from None
    return shapes


def _read_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = {}
    for path in paths:
        try:
            weights |= load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise GlassboxError(f"{path} is not a readable safetensors file ({exc})") from None
    return weights


def _check_state(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], path: Path) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise GlassboxError(
            f"Weights in {path} do not fit the config: missing {some(missing, 6)}, unexpected {some(unexpected, 6)}"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise GlassboxError(
                f"Weight {name} in {path} has shape {list(tensor.shape)}, the config needs {list(expected[name].shape)}"
            )
