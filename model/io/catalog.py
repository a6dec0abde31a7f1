"""The curated hub models: the ones people come to look inside, one or two per family.

Each entry carries the model's hub ``config.json`` (the keys Glassbox reads, copied from the
hub repository), so that its family, parameter count and download size are computed here,
offline, by the same converter and meta-device count the loader uses; and so that a benchmark
can build a model of exactly its shape with random weights (``python -m model bench --families``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert import CONVERTERS, FAMILY_NAMES
from glassbox.model.io.hub import HubId, cached

BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
}  # engine/device.py's DTYPES' sizes, without importing torch (a test keeps them equal)


@dataclass(frozen=True)
class Curated:
    hub_id: str
    why: str
    config: dict  # the hub's config.json, the keys Glassbox reads

    @property
    def family(self) -> str:
        return FAMILY_NAMES[self.config["model_type"]]

    @cached_property
    def model_config(self) -> ModelConfig:
        return CONVERTERS[self.config["model_type"]].config(self.config)

    @cached_property
    def parameters(self) -> int:
        """Counted on the meta device, as the loader counts a model's bytes."""
        from glassbox.model.io.checkpoint import count_numbers

        return count_numbers(self.model_config)

    @property
    def download_bytes(self) -> int:
        """The safetensors at the dtype the hub stores them in (torch_dtype); the tokenizer files
        add a few MB."""
        return self.parameters * BYTES[self.config.get("torch_dtype", "float32")]

    @property
    def cached(self) -> bool:
        # HubId, not parse_hub_id: that reads a folder of the same name in the working directory as the folder
        return cached(HubId(self.hub_id)) is not None


GPT2 = {
    "model_type": "gpt2",
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_head": 12,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-05,
    "torch_dtype": "float32",
}
PYTHIA = {
    "model_type": "gpt_neox",
    "vocab_size": 50304,
    "max_position_embeddings": 2048,
    "rotary_pct": 0.25,
    "rotary_emb_base": 10000,
    "use_parallel_residual": True,
    "layer_norm_eps": 1e-05,
    "hidden_act": "gelu",
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}

# The config.json files of the hub repositories (the keys the converters read; revision main).
CURATED: list[Curated] = [
    Curated("openai-community/gpt2", "the classic: most interpretability work starts here", dict(GPT2, n_layer=12)),
    Curated("distilbert/distilgpt2", "GPT-2 distilled to 6 blocks", dict(GPT2, n_layer=6)),
    Curated(
        "EleutherAI/pythia-70m",
        "training checkpoints as revisions (@step1000 … @step143000): watch it learn",
        dict(PYTHIA, hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048),
    ),
    Curated(
        "EleutherAI/pythia-160m",
        "Pythia at GPT-2-small width",
        dict(PYTHIA, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    ),
    Curated(
        "roneneldan/TinyStories-33M",
        "fluent children's stories from 4 blocks",
        {
            "model_type": "gpt_neo",
            "vocab_size": 50257,
            "max_position_embeddings": 2048,
            "hidden_size": 768,
            "num_layers": 4,
            "num_heads": 16,
            "intermediate_size": None,
            "window_size": 256,
            "attention_types": [[["global", "local"], 2]],
            "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-05,
            "tie_word_embeddings": True,
            "torch_dtype": "float32",
        },
    ),
    Curated(
        "HuggingFaceTB/SmolLM2-135M",
        "a modern Llama: RMSNorm, SwiGLU, RoPE, GQA",
        {
            "model_type": "llama",
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "rms_norm_eps": 1e-05,
            "rope_theta": 100000,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
        },
    ),
    Curated(
        "Qwen/Qwen2.5-0.5B",
        "q/k/v biases, 14 query heads on 2 key/value heads",
        {
            "model_type": "qwen2",
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "use_sliding_window": False,
            "sliding_window": 32768,
            "max_window_layers": 24,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
        },
    ),
    Curated(
        "Qwen/Qwen3-0.6B",
        "QK-norm, heads of 128 wider than d_model/heads",
        {
            "model_type": "qwen3",
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000,
            "attention_bias": False,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": 28,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
        },
    ),
    Curated(
        "google/gemma-3-270m",
        "Gemma 3: post norms, QK-norm, local and global layers, 262k vocabulary",
        {
            "model_type": "gemma3_text",
            "vocab_size": 262144,
            "max_position_embeddings": 32768,
            "hidden_size": 640,
            "intermediate_size": 2048,
            "num_hidden_layers": 18,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": None,
            "sliding_window": 512,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "hidden_activation": "gelu_pytorch_tanh",
            "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)],
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
        },
    ),
    Curated(
        "allenai/OLMoE-1B-7B-0924",
        "a mixture of experts: 64 per block, 8 per token (6.9B in all, 1.3B used per token)",
        {
            "model_type": "olmoe",
            "vocab_size": 50304,
            "max_position_embeddings": 4096,
            "hidden_size": 2048,
            "intermediate_size": 1024,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_experts": 64,
            "num_experts_per_tok": 8,
            "norm_topk_prob": False,
            "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0,
            "rope_scaling": None,
            "attention_bias": False,
            "clip_qkv": None,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
    ),
    # The two files below name no torch_dtype (float32, the default here) and BERT's no tie_word_embeddings (tied).
    # The hub's model.safetensors is 440 MB: BertForPreTraining's weights, with the pooler and the next-sentence
    # head (0.6M) that the masked-LM model Glassbox builds does not read; the count here is the masked-LM's.
    Curated(
        "google-bert/bert-base-uncased",
        "an encoder: attention both ways, post-norm blocks, a masked-LM head",
        {
            "model_type": "bert",
            "vocab_size": 30522,
            "max_position_embeddings": 512,
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "type_vocab_size": 2,
            "hidden_act": "gelu",
            "layer_norm_eps": 1e-12,
            "position_embedding_type": "absolute",
            "pad_token_id": 0,
        },
    ),
    # t5-small's file predates feed_forward_proj (ReLU), tie_word_embeddings (tied, the head scaled by
    # d_model^-0.5) and relative_attention_max_distance (128): the converter's defaults are those.
    Curated(
        "google-t5/t5-small",
        "an encoder-decoder: a source read both ways, cross-attention, relative positions",
        {
            "model_type": "t5",
            "vocab_size": 32128,
            "d_model": 512,
            "d_kv": 64,
            "d_ff": 2048,
            "num_layers": 6,
            "num_heads": 8,
            "n_positions": 512,
            "relative_attention_num_buckets": 32,
            "layer_norm_epsilon": 1e-06,
            "decoder_start_token_id": 0,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "is_encoder_decoder": True,
        },
    ),
]


# Models past one GPU, for `glassbox plan` (their hub config.json's keys; not offered for download).
PLAN_SHAPES: dict[str, dict] = {
    "meta-llama/Meta-Llama-3-70B": {
        "model_type": "llama",
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "mistralai/Mixtral-8x7B-v0.1": {
        "model_type": "mixtral",
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}


def curated() -> list[Curated]:
    return CURATED


def entry(hub_id: str) -> Curated:
    from glassbox.model.engine import GlassboxError

    for model in CURATED:
        if model.hub_id == hub_id:
            return model
    raise GlassboxError(f"{hub_id!r} is not a curated model: `glassbox models` lists them")
