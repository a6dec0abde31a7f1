"""Every model family Glassbox opens, against transformers' own model class for it.

Reference: for each family, a tiny model built with transformers' own config and model classes
(eager attention, float32, every switch the family uses turned on: partial rotary, a window
shorter than the prompt, soft-caps that bite, biases and norm weights pushed away from their
initial values), saved with ``save_pretrained`` beside a ``tokenizer.json``, then opened by
Glassbox from that directory like any downloaded model. Tolerances (float32 on both sides,
differently ordered arithmetic):
- token ids: identical to transformers' tokenizer (special tokens such as BOS included);
- logits and every residual: <= 1e-4 absolute; attention patterns: <= 1e-5;
- the loss (mean next-token cross-entropy) and the gradients of it with respect to every
  residual and every parameter: <= 1e-5;
- generation: each step with the KV cache equals recomputing the whole prefix (<= 1e-4), and
  greedy generation gives exactly transformers' ``generate`` tokens.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

from glassbox.model.engine import GRAD, run_trace  # noqa: E402
from glassbox.model.engine.kv_cache import KVCache  # noqa: E402
from glassbox.model.engine.names import is_norm_parameter  # noqa: E402
from glassbox.model.engine.sampling import Sampling, generate  # noqa: E402
from glassbox.model.io.checkpoint import load  # noqa: E402
from glassbox.model.io.convert import CONVERTERS  # noqa: E402
from tests.conftest import CORPUS  # noqa: E402

LOGITS_TOL = RESID_TOL = CACHE_TOL = 1e-4
PATTERN_TOL = LOSS_TOL = GRAD_TOL = 1e-5
V, D, L, CTX = 320, 32, 3, 64  # the tokenizer has fewer pieces than the embedding has rows
PROMPT = "The cat sat on the mat; attention lets each position look back."  # ~20 tokens, longer than every window

SIZES = dict(
    vocab_size=V,
    hidden_size=D,
    num_hidden_layers=L,
    max_position_embeddings=CTX,
    initializer_range=0.2,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
LLAMA = dict(SIZES, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2)

# family -> (config, whether its tokenizer puts a BOS token first)
NEOX = dict(SIZES, intermediate_size=48, num_attention_heads=4, tie_word_embeddings=False)
FAMILIES = {
    "gpt_neo (unscaled scores, local attention on alternate layers)": (
        lambda: transformers.GPTNeoConfig(
            **{k: v for k, v in SIZES.items() if k != "num_hidden_layers"},
            num_layers=4,
            num_heads=4,
            window_size=4,
            attention_types=[[["global", "local"], 2]],
        ),
        False,
    ),
    "gpt_neox (parallel block, rotary on 50% of each head)": (
        lambda: transformers.GPTNeoXConfig(**NEOX, rotary_pct=0.5, rotary_emb_base=500, use_parallel_residual=True),
        False,
    ),
    "gpt_neox-sequential (rotary on 25%)": (lambda: transformers.GPTNeoXConfig(**NEOX, use_parallel_residual=False), False),
    "llama (llama3 RoPE scaling, head_dim != d_model/heads, biases)": (
        lambda: transformers.LlamaConfig(
            **LLAMA,
            head_dim=12,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
        True,
    ),
    "mistral (sliding window)": (
        lambda: transformers.MistralConfig(**LLAMA, sliding_window=5, head_dim=8, rope_theta=1000.0),
        True,
    ),
    "qwen2 (q/k/v biases, window on the upper layers)": (
        lambda: transformers.Qwen2Config(
            **LLAMA, use_sliding_window=True, sliding_window=4, max_window_layers=1, tie_word_embeddings=True
        ),
        False,
    ),
    "gemma (1 + w norms, scaled embeddings, GeGLU, head_dim 16)": (lambda: transformers.GemmaConfig(**LLAMA, head_dim=16), True),
    "gemma2 (post norms, soft-caps that bite, query_pre_attn_scalar, windows)": (
        lambda: transformers.Gemma2Config(
            **LLAMA,
            head_dim=8,
            query_pre_attn_scalar=20,
            attn_logit_softcapping=1.5,
            final_logit_softcapping=2.0,
            sliding_window=4,
        ),
        True,
    ),
    "gemma3 (QK-norm, local RoPE base, linear scaling on global layers)": (
        lambda: transformers.Gemma3TextConfig(
            **LLAMA,
            head_dim=8,
            query_pre_attn_scalar=12,
            sliding_window=4,
            sliding_window_pattern=2,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5000.0},
            },
        ),
        True,
    ),
    "qwen3 (QK-norm, head_dim 12)": (lambda: transformers.Qwen3Config(**LLAMA, head_dim=12, tie_word_embeddings=True), False),
}


def _tokenizer(bos: bool):
    """A byte-level BPE trained on the spot, as transformers' fast tokenizer (with a BOS
    template for the families whose tokenizers add one)."""
    from tokenizers import ByteLevelBPETokenizer, processors

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 3, vocab_size=300, min_frequency=2, special_tokens=["<pad>", "<s>", "</s>"])
    tok = bpe._tokenizer
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    make_config, bos = FAMILIES[request.param]
    return saved_family(make_config(), bos, tmp_path_factory.mktemp(request.param.split()[0]))


def saved_family(config, bos: bool, path, auto=None):
    """(transformers model, its tokenizer, Glassbox's model loaded from their saved directory):
    a model of ``config`` (built by the ``auto`` class, default AutoModelForCausalLM) with perturbed
    norms and biases, saved with a tokenizer into ``path`` (also the fixture of
    tests/test_moe_families.py and tests/test_encoder_families.py)."""
    torch.manual_seed(0)
    auto = auto or transformers.AutoModelForCausalLM
    hf = auto.from_config(config, attn_implementation="eager").float().eval()
    with torch.no_grad():  # norms and biases away from their initial values, so that a mistake shows
        for name, p in hf.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    hf.save_pretrained(str(path))
    tokenizer = _tokenizer(bos)
    tokenizer.save_pretrained(str(path))
    return hf, transformers.AutoTokenizer.from_pretrained(str(path)), load(str(path), dtype="float32", device="cpu")


def test_token_ids_are_transformers(family):
    hf, tokenizer, loaded = family
    for text in [PROMPT] + CORPUS[:5] + ["  spaces\tand\nnewlines ", "naïve café 🤖"]:
        assert loaded.encode(text) == tokenizer(text)["input_ids"], text
    # what goes before any text (the Circuits view's head scores start with it): transformers' BOS, or nothing
    assert loaded.tokenizer.prefix() == tokenizer("")["input_ids"]


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", DEVICES)
def test_forward_and_backward_match_transformers(family, device):
    """Reference: transformers' forward and backward pass of the same model: logits and residuals
    <= 1e-4, attention patterns, the loss and the gradients w.r.t. every residual and parameter
    <= 1e-5. On each device both models run on (CUDA where there is one: the same tolerances,
    TF32 off as PyTorch's default leaves it)."""
    hf, tokenizer, loaded = family
    if device != "cpu":
        hf = copy.deepcopy(hf).to(device)
        loaded = dataclasses.replace(loaded, model=copy.deepcopy(loaded.model).to(device))
    cfg = loaded.cfg
    tokens = loaded.encode(PROMPT)
    ids = torch.tensor([tokens], device=device)
    out = hf(ids, output_hidden_states=True, output_attentions=True)
    for h in out.hidden_states:
        h.retain_grad()
    loss = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:])
    loss.backward()
    trace = run_trace(loaded.model, tokens, backward=True)
    assert trace["hook_logits"].device.type == device
    # every switch the family uses is on, and bites
    assert cfg.window is None or len(tokens) > 2 * cfg.window
    if cfg.attn_softcap is not None:
        assert trace["blocks.0.attn.hook_scores_uncapped"].abs().max() > 2 * cfg.attn_softcap
    if cfg.final_softcap is not None:
        assert trace["hook_logits_uncapped"].abs().max() > 2 * cfg.final_softcap

    assert trace.loss == pytest.approx(loss.item(), abs=LOSS_TOL)
    assert torch.allclose(trace["hook_logits"], out.logits[0], atol=LOGITS_TOL)
    for i in range(cfg.n_layers):
        assert torch.allclose(trace[f"blocks.{i}.hook_resid_pre"], out.hidden_states[i][0], atol=RESID_TOL), i
        assert torch.allclose(trace[f"blocks.{i}.attn.hook_pattern"], out.attentions[i][0], atol=PATTERN_TOL), i
        assert torch.allclose(trace[GRAD + f"blocks.{i}.hook_resid_pre"], out.hidden_states[i].grad[0], atol=GRAD_TOL), i
    converter = CONVERTERS[hf.config.model_type]
    reference = converter.state_dict(cfg, {n: p.grad for n, p in hf.named_parameters()})
    offset = getattr(converter, "NORM_OFFSET", 0.0)  # Gemma stores γ − 1: a constant shift, the same gradient
    assert set(reference) == {n for n, _ in loaded.model.named_parameters()}
    for name, grad in reference.items():
        expected = (grad - offset if is_norm_parameter(name) else grad).to(trace[GRAD + name].dtype)
        assert torch.allclose(trace[GRAD + name], expected, atol=GRAD_TOL), name


def test_kv_cache_steps_equal_recomputing_the_prefix(family):
    """Reference: the same model's pass over the whole prefix; each cached step's logits <= 1e-4."""
    hf, tokenizer, loaded = family
    tokens = loaded.encode(PROMPT)
    model = loaded.model
    with torch.no_grad():
        full = model(torch.tensor([tokens])).logits[0]
        cache = KVCache(loaded.cfg.n_layers)
        steps = [model(torch.tensor([tokens[:3]]), cache=cache).logits[0, -1]]
        steps += [model(torch.tensor([[t]]), cache=cache).logits[0, -1] for t in tokens[3:]]
    assert torch.allclose(torch.stack(steps), full[2:], atol=CACHE_TOL)


def test_greedy_generation_is_transformers_generate(family):
    """Reference: transformers' ``generate`` (greedy, 12 new tokens); the tokens exactly."""
    hf, tokenizer, loaded = family
    ids = torch.tensor([loaded.encode(PROMPT)])
    expected = hf.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)[0, ids.shape[1] :].tolist()
    ours = [t.token_id for t in generate(loaded, PROMPT, 12, Sampling(temperature=0))]
    assert ours == expected
