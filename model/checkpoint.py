"""Loading models: by name from ``assets/``, or from a local directory.

Two directory formats, both safetensors only (nothing is ever unpickled):
- Glassbox's own: ``config.json`` with a ``"glassbox"`` entry (a ModelConfig), the weights
  under the engine's parameter names, and ``tokenizer.json``.
- the Hugging Face hub's GPT-2 layout: ``config.json`` (``model_type: gpt2``),
  ``model.safetensors``, and ``vocab.json`` + ``merges.txt`` or ``tokenizer.json``. The
  weights are converted: GPT-2's Conv1D matrices are already (in, out); ``c_attn`` is split
  into Q, K, V and every attention matrix into heads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .errors import GlassboxError
from .tokenizer import Tokenizer
from .transformer import ModelConfig, Transformer

ASSETS = Path(__file__).resolve().parent.parent / "assets"
NAMED_MODELS = {"default": ASSETS / "default", "worked-example": ASSETS / "worked-example"}
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


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve(name_or_path: str) -> Path:
    if name_or_path in NAMED_MODELS:
        return NAMED_MODELS[name_or_path]
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
    elif config.get("model_type") == "gpt2":
        cfg = gpt2_config(config)
        state = gpt2_state_dict(cfg, _read_weights(path / "model.safetensors"))
        about = {"source": f"GPT-2 checkpoint converted from {path}"}
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


# --- GPT-2 -----------------------------------------------------------------------------

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2_config(hf: dict) -> ModelConfig:
    try:
        activation = GPT2_ACTIVATIONS[hf.get("activation_function", "gelu_new")]
    except KeyError:
        raise GlassboxError(f"Unsupported GPT-2 activation {hf['activation_function']!r}") from None
    if hf.get("scale_attn_by_inverse_layer_idx") or not hf.get("scale_attn_weights", True):
        raise GlassboxError("Unsupported GPT-2 attention scaling (scale_attn_by_inverse_layer_idx / scale_attn_weights)")
    try:
        d_model = hf["n_embd"]
        if d_model % hf["n_head"]:
            raise GlassboxError(f"GPT-2 n_embd ({d_model}) is not a multiple of n_head ({hf['n_head']})")
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["n_positions"],
            d_model=d_model,
            n_layers=hf["n_layer"],
            n_heads=hf["n_head"],
            d_ff=hf.get("n_inner") or 4 * d_model,
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            activation=activation,
        )
    except KeyError as exc:
        raise GlassboxError(f"GPT-2 config.json lacks {exc}") from None
    except (TypeError, ValueError) as exc:
        raise GlassboxError(f"GPT-2 config.json has a value of the wrong type ({exc})") from None


def gpt2_state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename and reshape a GPT2LMHeadModel / GPT2Model state dict into the engine's."""
    hf = {k.removeprefix("transformer."): v for k, v in hf.items()}
    H, D, dh = cfg.n_heads, cfg.d_model, cfg.d_head

    def take(key: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        if key not in hf:
            raise GlassboxError(f"The GPT-2 checkpoint lacks the weight {key!r}")
        if shape is not None and tuple(hf[key].shape) != shape:  # checked before it is split or reshaped
            raise GlassboxError(f"{key} has shape {list(hf[key].shape)}, expected {list(shape)}")
        return hf[key]

    def heads_in(w: torch.Tensor) -> torch.Tensor:  # (D, H*dh) -> (H, D, dh)
        return w.reshape(D, H, dh).permute(1, 0, 2)

    state = {"embed.W_E": take("wte.weight"), "pos_embed.W_pos": take("wpe.weight")}
    for i in range(cfg.n_layers):
        src, dst = f"h.{i}.", f"blocks.{i}."
        w_qkv = take(src + "attn.c_attn.weight", (D, 3 * D))
        b_qkv = take(src + "attn.c_attn.bias", (3 * D,))
        for j, name in enumerate("QKV"):
            state[f"{dst}attn.W_{name}"] = heads_in(w_qkv[:, j * D : (j + 1) * D])
            state[f"{dst}attn.b_{name}"] = b_qkv[j * D : (j + 1) * D].reshape(H, dh)
        state[dst + "attn.W_O"] = take(src + "attn.c_proj.weight", (D, D)).reshape(H, dh, D)
        state[dst + "attn.b_O"] = take(src + "attn.c_proj.bias")
        for ln_src, ln_dst in (("ln_1", "ln1"), ("ln_2", "ln2")):
            state[f"{dst}{ln_dst}.w"] = take(f"{src}{ln_src}.weight")
            state[f"{dst}{ln_dst}.b"] = take(f"{src}{ln_src}.bias")
        state[dst + "mlp.W_in"] = take(src + "mlp.c_fc.weight")
        state[dst + "mlp.b_in"] = take(src + "mlp.c_fc.bias")
        state[dst + "mlp.W_out"] = take(src + "mlp.c_proj.weight")
        state[dst + "mlp.b_out"] = take(src + "mlp.c_proj.bias")
    state["ln_final.w"] = take("ln_f.weight")
    state["ln_final.b"] = take("ln_f.bias")
    return state
