"""Exactness, checked on the spot: a model Glassbox converted from a transformers checkpoint
beside transformers' own class loaded from the same folder, on one prompt.

Compared: the logits, the residual stream entering each block (transformers' hidden states; an
encoder-decoder's, both stacks'), and on request the loss's gradient with respect to each of
those residual streams (torch autograd in both). Each number is the largest absolute difference, with the size of what was
compared beside it. transformers is optional: without it the check says how to get it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glassbox.model.engine import GRAD, GlassboxError, run_seq2seq_trace, run_trace
from glassbox.model.io.guard import read_json

CONFIG_BYTES = 1 << 20


@dataclass
class Verification:
    reference: str  # transformers' class and version
    dtype: str
    n_tokens: int
    logits: float  # largest |Glassbox − transformers|
    logits_scale: float  # largest |logit|, for scale
    residual: float  # largest over the blocks (of both stacks, in an encoder-decoder) and positions
    residual_scale: float
    loss: float | None = None  # |difference| of the mean next-token (an encoder-decoder's: target) cross-entropy
    gradient: float | None = None  # largest over dL/d(residual entering each block)
    gradient_scale: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _transformers():
    try:
        import transformers
    except ImportError:
        raise GlassboxError(
            "transformers is not installed: `pip install 'transformers>=4.56'` (or "
            "`pip install -e '.[dev]'` in a checkout) to compare with its classes"
        ) from None
    return transformers


# A Glassbox checkpoint (the bundled models) has no transformers folder, but one of GPT-2's
# architecture is a GPT2LMHeadModel: its weights are put there (the inverse of convert/gpt2.py's
# renaming, missing biases as zeros) and transformers' own code computes the pass.
GPT2_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
GPT2_SAME = {
    "norm": "layernorm",
    "positional": "table",
    "tie_embeddings": True,
    "final_norm": True,
    "causal": True,
    "parallel_block": False,
    "gated_mlp": False,
    "attn_scale": None,
    "n_experts": None,
    "qk_norm": False,
    "attn_softcap": None,
    "final_softcap": None,
    "post_norms": False,
    "norm_position": "pre",
    "embed_scale": None,
    "window": None,
    "attn_only": False,
    "unembed_bias": False,
}


def gpt2_differences(cfg) -> list[str]:
    """What keeps a config from being GPT-2's architecture (empty: it is)."""
    out = [f"{field} {getattr(cfg, field)!r}" for field, value in GPT2_SAME.items() if getattr(cfg, field) != value]
    if cfg.activation not in GPT2_ACTIVATIONS:
        out.append(f"activation {cfg.activation!r}")
    if cfg.n_kv_heads != cfg.n_heads or cfg.n_heads * cfg.d_head != cfg.d_model:
        out.append("grouped or resized heads")
    return out


def as_gpt2(model, dtype: torch.dtype, device: torch.device):
    """A GPT2LMHeadModel holding ``model``'s weights (a Glassbox Transformer of GPT-2's architecture)."""
    transformers = _transformers()
    cfg = model.cfg
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=cfg.vocab_size,
            n_positions=cfg.n_ctx,
            n_embd=cfg.d_model,
            n_layer=cfg.n_layers,
            n_head=cfg.n_heads,
            n_inner=cfg.d_ff,
            activation_function=GPT2_ACTIVATIONS[cfg.activation],
            layer_norm_epsilon=cfg.norm_eps,
            bos_token_id=None,
            eos_token_id=None,
            attn_implementation="eager",
        )
    ).to(dtype=dtype)  # before the weights go in: a float64 model's are not rounded through float32
    ours = model.state_dict()
    D = cfg.d_model

    def bias(name: str, size: int) -> torch.Tensor:
        return ours[name].reshape(size) if name in ours else torch.zeros(size, dtype=ours["embed.W_E"].dtype)

    theirs = {
        "transformer.wte.weight": ours["embed.W_E"],
        "transformer.wpe.weight": ours["pos_embed.W_pos"],
        "transformer.ln_f.weight": ours["ln_final.w"],
        "transformer.ln_f.bias": ours["ln_final.b"],
    }
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}.", f"transformer.h.{i}."
        theirs[h + "attn.c_attn.weight"] = torch.cat(
            [ours[f"{a}attn.W_{x}"].permute(1, 0, 2).reshape(D, D) for x in "QKV"], dim=1
        )
        theirs[h + "attn.c_attn.bias"] = torch.cat([bias(f"{a}attn.b_{x}", D) for x in "QKV"])
        theirs[h + "attn.c_proj.weight"] = ours[a + "attn.W_O"].reshape(D, D)
        theirs[h + "attn.c_proj.bias"] = bias(a + "attn.b_O", D)
        for ln_ours, ln_theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            theirs[f"{h}{ln_theirs}.weight"], theirs[f"{h}{ln_theirs}.bias"] = ours[f"{a}{ln_ours}.w"], ours[f"{a}{ln_ours}.b"]
        theirs[h + "mlp.c_fc.weight"], theirs[h + "mlp.c_proj.weight"] = ours[a + "mlp.W_in"], ours[a + "mlp.W_out"]
        theirs[h + "mlp.c_fc.bias"] = bias(a + "mlp.b_in", cfg.d_ff)
        theirs[h + "mlp.c_proj.bias"] = bias(a + "mlp.b_out", D)
    hf.load_state_dict({k: v.detach().clone() for k, v in theirs.items()}, strict=False)  # lm_head: tied to wte
    return (
        hf.to(device).eval(),
        f"transformers {type(hf).__name__} {transformers.__version__}, holding this Glassbox checkpoint's weights",
    )


def reference_model(path, dtype: torch.dtype, device: torch.device, model=None):
    """transformers' class for the folder's config.json (causal-LM, or seq2seq-LM for an
    encoder-decoder), its weights read from there; for a Glassbox checkpoint of GPT-2's
    architecture (``model``), a GPT2LMHeadModel holding its weights."""
    config = read_json(path / "config.json", CONFIG_BYTES)
    if "glassbox" in config:
        differences = gpt2_differences(model.cfg) if model is not None else ["unknown"]
        if differences:
            raise GlassboxError(
                "This is a Glassbox checkpoint whose architecture is not GPT-2's "
                f"({', '.join(differences[:3])}): transformers has no class that reads it"
            )
        return as_gpt2(model, dtype, device)
    transformers = _transformers()
    seq2seq = model is not None and model.cfg.encoder_decoder
    auto, kind = (
        (transformers.AutoModelForSeq2SeqLM, "seq2seq-LM") if seq2seq else (transformers.AutoModelForCausalLM, "causal-LM")
    )
    try:
        # eager attention and eager experts (a loop over the experts, in any dtype): transformers 5's
        # default experts kernel (grouped_mm) refuses float64; older versions ignore the setting
        hf = auto.from_pretrained(str(path), dtype=dtype, attn_implementation="eager", experts_implementation="eager")
    except ValueError as exc:  # an encoder: no causal-LM class
        raise GlassboxError(f"transformers has no {kind} class for this model ({' '.join(str(exc).split())[:200]})") from None
    return hf.to(device).eval(), f"transformers {type(hf).__name__} {transformers.__version__}"


def verify(loaded, tokens: list[int], gradients: bool = False) -> Verification:
    """``loaded`` (a checkpoint.LoadedModel) beside transformers' class on ``tokens``. An
    encoder-decoder (T5, BART) reads ``tokens`` as its source and is taught them as its target
    (teacher forcing, transformers' ``labels``): the residual streams are both stacks' and the
    loss is the target's mean cross-entropy."""
    model, cfg = loaded.model, loaded.cfg
    dtype = next(model.parameters()).dtype
    hf, reference = reference_model(loaded.path, dtype, model.device, model)
    ids = torch.tensor([tokens], device=model.device)
    with torch.set_grad_enabled(gradients):
        if cfg.encoder_decoder:
            out = hf(input_ids=ids, labels=ids, output_hidden_states=True)
            points = [f"encoder.blocks.{i}.hook_resid_pre" for i in range(cfg.n_layers)]
            points += [f"decoder.blocks.{i}.hook_resid_pre" for i in range(cfg.n_decoder_layers)]
            hidden = [*out.encoder_hidden_states[: cfg.n_layers], *out.decoder_hidden_states[: cfg.n_decoder_layers]]
            loss = out.loss
        else:
            out = hf(ids, output_hidden_states=True)
            points = [f"blocks.{i}.hook_resid_pre" for i in range(cfg.n_layers)]
            hidden = list(out.hidden_states[: cfg.n_layers])
            loss = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:])  # run_trace's default loss
        if gradients:
            for h in hidden:
                h.retain_grad()
            loss.backward()
    if cfg.encoder_decoder:
        trace = run_seq2seq_trace(model, tokens, tokens, names=["hook_logits", *points], backward=gradients)
    else:
        trace = run_trace(model, tokens, names=["hook_logits", *points], backward=gradients)
    resid = [trace[name] for name in points]
    theirs = [h[0].detach() for h in hidden]
    result = Verification(
        reference,
        str(dtype).removeprefix("torch."),
        len(tokens),
        logits=float((trace["hook_logits"] - out.logits[0].detach()).abs().max()),
        logits_scale=float(out.logits.detach().abs().max()),
        residual=max(float((a - b).abs().max()) for a, b in zip(resid, theirs)),
        residual_scale=max(float(b.abs().max()) for b in theirs),
    )
    if gradients:
        grads = [trace[GRAD + name] for name in points]
        their_grads = [h.grad[0] for h in hidden]
        result.loss = abs(trace.loss - loss.item())
        result.gradient = max(float((a - b).abs().max()) for a, b in zip(grads, their_grads))
        result.gradient_scale = max(float(b.abs().max()) for b in their_grads)
    return result
