"""One module per model family: each turns its ``config.json`` into a ModelConfig and its
state dict into the engine's parameter names and shapes, and names its ``FAMILY``.
``CONVERTERS`` maps a transformers ``model_type`` to its module."""

from model.io.convert import gemma, gpt2, gpt_neo, gpt_neox, llama

CONVERTERS = {"gpt2": gpt2, "gpt_neo": gpt_neo, "gpt_neox": gpt_neox, "llama": llama, "mistral": llama, "qwen2": llama, "qwen3": llama,
              "gemma": gemma, "gemma2": gemma, "gemma3_text": gemma}
