"""Loading models: by name from the shipped ``assets``, or from a local directory.

Two directory formats, both safetensors only (nothing is ever unpickled):
- Glassbox's own: ``config.json`` with a ``"glassbox"`` entry (a ModelConfig), the weights
  under the engine's parameter names, and ``tokenizer.json``.
- a Hugging Face hub layout whose ``model_type`` has a converter in ``convert/`` (GPT-2):
  ``config.json``, ``model.safetensors``, and ``vocab.json`` + ``merges.txt`` or
  ``tokenizer.json``. The weights are converted on load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from model.engine import GlassboxError, ModelConfig, Transformer, default_device
from model.io.assets import asset
from model.io.convert import CONVERTERS
from model.io.tokenizer import Tokenizer

NAMED_MODELS = ("default", "worked-example")  # shipped in assets/
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class LoadedModel:
    name: str
    model: Transformer
    tokenizer: Tokenizer
    path: Path
    about: dict = field(default_factory=dict)  # provenance notes shown by the CLI and UI

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    def encode(self, prompt: str) -> list[int]:
        """The prompt's token ids. The tokenizer rejects an empty prompt; run_trace the length."""
        return self.tokenizer.encode(prompt)

    @property
    def pieces(self) -> list[str]:
        """Every token id's text."""
        return self.tokenizer.pieces


def resolve(name_or_path: str) -> Path:
    if name_or_path in NAMED_MODELS:
        return asset(name_or_path)
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        names = ", ".join(NAMED_MODELS)
        raise GlassboxError(f"No model {name_or_path!r}: give a model name ({names}) or a model directory")
    return path


def load(name_or_path: str, dtype: str | None = None, device: str | torch.device | None = None) -> LoadedModel:
    """Load a model and its tokenizer, ready for inference (eval mode, on ``device``).

    ``dtype`` is "float32" or "float64"; by default the model's own (float32 unless its
    config says otherwise, as the worked example's does)."""
    path = resolve(name_or_path)
    config = _read_json(path / "config.json")
    if "glassbox" in config:
        cfg = ModelConfig.from_dict(config["glassbox"])
        state = _read_weights(path / "model.safetensors")
        about = config.get("about", {})
        dtype = dtype or config.get("dtype", "float32")
    elif config.get("model_type") in CONVERTERS:
        convert = CONVERTERS[config["model_type"]]
        cfg = convert.config(config)
        state = convert.state_dict(cfg, _read_weights(path / "model.safetensors"))
        about = {"source": f"{config['model_type']} checkpoint converted from {path}"}
        dtype = dtype or "float32"
    else:
        raise GlassboxError(
            f"{path / 'config.json'} is neither a Glassbox config nor a GPT-2 one "
            f"(model_type {config.get('model_type')!r})"
        )
    if dtype not in DTYPES:
        raise GlassboxError(f"dtype must be one of {list(DTYPES)}, not {dtype!r}")
    model = Transformer(cfg).to(DTYPES[dtype])
    _load_state(model, state, path)  # casts the stored weights to the model's dtype
    model = model.to(device or default_device()).eval()
    tokenizer = Tokenizer.from_dir(path)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise GlassboxError(f"The tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size}")
    return LoadedModel(str(name_or_path), model, tokenizer, path, about)


def save(path: Path, model: Transformer, tokenizer: Tokenizer, dtype: str, about: dict) -> None:
    """Write a model in Glassbox's own format."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {"glassbox": model.cfg.to_dict(), "dtype": dtype, "about": about}
    (path / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    state = {k: v.detach().to(DTYPES[dtype]).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))
    tokenizer.save(path)


def _read_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise GlassboxError(f"{path} is missing: is {path.parent} a model directory?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GlassboxError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise GlassboxError(f"{path} is not a JSON object")
    return config


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise GlassboxError(f"{path} is missing (only safetensors checkpoints are read)")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise GlassboxError(f"{path} is not a readable safetensors file ({exc})") from None


def _load_state(model: Transformer, state: dict[str, torch.Tensor], path: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise GlassboxError(f"Weights in {path} do not fit the config: missing {missing}, unexpected {unexpected}")
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise GlassboxError(
                f"Weight {name} in {path} has shape {list(tensor.shape)}, the config needs {list(expected[name].shape)}"
            )
    model.load_state_dict(state)
