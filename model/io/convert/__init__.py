"""One module per source format: each turns a foreign ``config.json`` into a ModelConfig and
its state dict into the engine's parameter names and shapes. ``CONVERTERS`` maps a
transformers ``model_type`` to its module."""

from model.io.convert import gpt2

CONVERTERS = {"gpt2": gpt2}
