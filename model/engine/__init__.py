"""The engine: a decoder-only transformer (or an encoder, or an encoder-decoder) whose forward pass names every tensor, per-call
capture and per-call edits (patching, ablation), traces with gradients, the registry of names, the KV cache and exact sampling.

It imports nothing from the rest of Glassbox (io, lesson, analysis, serving, tools, app);
a test checks the direction.
"""

from glassbox.model.engine.components.moe import load_balancing_loss
from glassbox.model.engine.config import ModelConfig, check_context, check_prompt, check_token_id
from glassbox.model.engine.device import DTYPES, default_device, to_numpy
from glassbox.model.engine.edits import Edit, editing, replaced
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.names import GRAD, block_label, head_label
from glassbox.model.engine.seq2seq import EncoderDecoder, build_model
from glassbox.model.engine.trace import Target, Trace, loss_targets, next_token_targets, run_seq2seq_trace, run_trace
from glassbox.model.engine.transformer import Output, Transformer, variant
from glassbox.model.engine.work import Cancelled, Work, working

__all__ = [
    "DTYPES",
    "Cancelled",
    "Edit",
    "EncoderDecoder",
    "GRAD",
    "GlassboxError",
    "KVCache",
    "ModelConfig",
    "Output",
    "Target",
    "Trace",
    "Transformer",
    "block_label",
    "build_model",
    "check_context",
    "check_prompt",
    "check_token_id",
    "default_device",
    "editing",
    "head_label",
    "load_balancing_loss",
    "loss_targets",
    "next_token_targets",
    "replaced",
    "run_seq2seq_trace",
    "run_trace",
    "to_numpy",
    "variant",
    "Work",
    "working",
]
