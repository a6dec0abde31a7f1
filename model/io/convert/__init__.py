"""One module per model family: each turns its ``config.json`` into a ModelConfig and its
state dict into the engine's parameter names and shapes, and names its ``FAMILY``.
``CONVERTERS`` maps a transformers ``model_type`` to its module."""

from glassbox.model.io.convert import (
    bart,
    bert,
    gemma,
    gpt2,
    gpt_neo,
    gpt_neox,
    llama,
    mixtral,
    olmoe,
    qwen_moe,
    t5,
)

CONVERTERS = {
    "gpt2": gpt2,
    "gpt_neo": gpt_neo,
    "gpt_neox": gpt_neox,
    "llama": llama,
    "mistral": llama,
    "qwen2": llama,
    "qwen3": llama,
    "gemma": gemma,
    "gemma2": gemma,
    "gemma3_text": gemma,
    "mixtral": mixtral,
    "qwen2_moe": qwen_moe,
    "qwen3_moe": qwen_moe,
    "olmoe": olmoe,
    "bert": bert,
    "t5": t5,
    "bart": bart,
}

# what each model_type is called on screen
FAMILY_NAMES = {
    "gpt2": "GPT-2",
    "gpt_neox": "GPT-NeoX",
    "gpt_neo": "GPT-Neo",
    "llama": "Llama",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "gemma": "Gemma",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3",
    "mixtral": "Mixtral",
    "qwen2_moe": "Qwen2-MoE",
    "qwen3_moe": "Qwen3-MoE",
    "olmoe": "OLMoE",
    "bert": "BERT",
    "t5": "T5",
    "bart": "BART",
}
