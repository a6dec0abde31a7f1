"""Encoders (BERT) and encoder-decoders (T5) Glassbox opens, against transformers' own model class
for each.

Reference: as in tests/test_families.py (whose tokenizer and ``saved_family`` these reuse), a tiny
model built with transformers' config and model classes (eager attention, float32, every switch
the family has turned on, norms and biases perturbed), saved with ``save_pretrained`` beside a
``tokenizer.json`` and opened by Glassbox from that directory. Tolerances (float32 on both sides,
differently ordered arithmetic): logits and hidden states <= 1e-4; attention patterns (self and
cross) <= 1e-5; the loss and its gradient with respect to every parameter <= 1e-5.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import assert_registered_seq2seq_trace, require

transformers = require("transformers")

from glassbox.model.engine import GRAD, Target, run_trace  # noqa: E402
from glassbox.model.io.convert import CONVERTERS  # noqa: E402
from tests.test_families import (  # noqa: E402
    GRAD_TOL,
    LOGITS_TOL,
    LOSS_TOL,
    PATTERN_TOL,
    PROMPT,
    RESID_TOL,
    SIZES,
    saved_family,
)

MASKED = (3, 7, 12)  # the positions BERT's masked-LM loss is taken at
MASK_ID = 3  # what replaces their tokens (the tokenizer has no [MASK]: any id does for the arithmetic)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A 3-block BERT with every switch on: token types, post-norm blocks, erf-GELU, the MLM head
    with its own bias, a tied decoder."""
    config = transformers.BertConfig(
        **{k: v for k, v in SIZES.items() if k not in ("bos_token_id", "eos_token_id")},
        num_attention_heads=4,
        intermediate_size=48,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
    )
    return saved_family(config, True, tmp_path_factory.mktemp("bert"), transformers.AutoModelForMaskedLM)


def test_bert_forward_and_backward_match_transformers(bert):
    """Reference: transformers' BertForMaskedLM on the same tokens, some of them masked: logits at
    every position and the hidden states entering each block (and leaving the last) <= 1e-4;
    attention patterns <= 1e-5 (not lower-triangular: it attends both ways); the masked-LM loss
    (labels -100 but at the masked positions) and its gradient w.r.t. every parameter <= 1e-5."""
    hf, tokenizer, loaded = bert
    cfg = loaded.cfg
    assert cfg.kind == "encoder" and loaded.about["family"] == "BERT"
    original = loaded.encode(PROMPT)
    tokens = [MASK_ID if i in MASKED else t for i, t in enumerate(original)]
    labels = torch.full((1, len(tokens)), -100)
    labels[0, list(MASKED)] = torch.tensor([original[i] for i in MASKED])
    out = hf(torch.tensor([tokens]), labels=labels, output_hidden_states=True, output_attentions=True)
    out.loss.backward()

    trace = run_trace(loaded.model, tokens, backward=True, target=[Target(original[i], i) for i in MASKED])
    assert trace.loss == pytest.approx(out.loss.item(), abs=LOSS_TOL)
    assert torch.allclose(trace["hook_logits"], out.logits[0], atol=LOGITS_TOL)
    for i in range(cfg.n_layers):
        assert torch.allclose(trace[f"blocks.{i}.hook_resid_pre"], out.hidden_states[i][0], atol=RESID_TOL), i
        pattern = trace[f"blocks.{i}.attn.hook_pattern"]
        assert torch.allclose(pattern, out.attentions[i][0], atol=PATTERN_TOL), i
        assert pattern.triu(1).sum() > 1.0  # the keys after each query are seen too
    assert torch.allclose(trace[f"blocks.{cfg.n_layers - 1}.hook_resid_post"], out.hidden_states[-1][0], atol=RESID_TOL)
    reference = CONVERTERS["bert"].state_dict(cfg, {n: p.grad for n, p in hf.named_parameters()})
    assert set(reference) == {n for n, _ in loaded.model.named_parameters()}
    for name, grad in reference.items():
        assert torch.allclose(trace[GRAD + name], grad, atol=GRAD_TOL), name


def test_an_encoders_default_loss_is_each_positions_own_token(bert):
    """Reference: transformers' masked-LM loss with every position labelled with its own token
    (<= 1e-5): what Glassbox's encoder computes when no target is given."""
    hf, tokenizer, loaded = bert
    tokens = loaded.encode(PROMPT)
    ids = torch.tensor([tokens])
    trace = run_trace(loaded.model, tokens, names=["hook_loss"])
    assert trace.loss == pytest.approx(hf(ids, labels=ids).loss.item(), abs=LOSS_TOL)
    assert "own token" in trace.loss_description


# T5: 2 + 2 blocks; 8 relative buckets up to distance 12, so that a ~20-token source has distances
# in the exact buckets, the logarithmic ones and past the last
T5_SIZES = dict(
    vocab_size=SIZES["vocab_size"],
    d_model=32,
    d_kv=8,
    d_ff=48,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=12,
    dropout_rate=0.0,
    pad_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=0,
)
T5_FAMILIES = {
    "t5 (ReLU MLP, tied head scaled by d_model^-0.5)": dict(feed_forward_proj="relu"),
    "t5 v1.1 (gated-GELU MLP, its own lm_head, unscaled)": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}
TARGET = "The cat sat on the mat."


def _untie(path) -> None:
    """The hub's v1.1 layout: ``tie_word_embeddings: false`` and an lm_head.weight of its own."""
    import json

    from safetensors.torch import load_file, save_file

    weights = load_file(str(path / "model.safetensors"))
    weights["lm_head.weight"] = torch.randn(weights["shared.weight"].shape, generator=torch.Generator().manual_seed(1))
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["tie_word_embeddings"] = False
    config.pop("scale_decoder_outputs", None)
    (path / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module", params=list(T5_FAMILIES))
def t5(request, tmp_path_factory):
    from glassbox.model.io.checkpoint import load

    settings = T5_FAMILIES[request.param]
    path = tmp_path_factory.mktemp(request.param.split()[1])
    hf, tokenizer, loaded = saved_family(
        transformers.T5Config(**T5_SIZES, **settings), False, path, transformers.AutoModelForSeq2SeqLM
    )
    if settings.get("tie_word_embeddings") is False:  # transformers 5 always ties T5's head: write the hub's layout
        _untie(path)
        hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(path), attn_implementation="eager").float().eval()
        loaded = load(str(path), dtype="float32", device="cpu")
    return hf, tokenizer, loaded


def test_t5_forward_and_backward_match_transformers(t5):
    """Reference: transformers' T5ForConditionalGeneration with labels (teacher forcing): the
    encoder's hidden states and output, the decoder's hidden states and logits <= 1e-4; self-
    and cross-attention patterns <= 1e-5; the loss and its gradient w.r.t. every parameter <= 1e-5."""
    from glassbox.model.engine import run_seq2seq_trace

    hf, tokenizer, loaded = t5
    cfg = loaded.cfg
    assert cfg.kind == "encoder-decoder" and loaded.about["family"] == "T5"
    assert cfg.tie_embeddings == (cfg.head_scale is not None)  # the two variants differ where they should
    source, target = loaded.encode(PROMPT), loaded.encode(TARGET)
    assert len(source) > cfg.relative_max_distance  # distances past the last bucket
    out = hf(input_ids=torch.tensor([source]), labels=torch.tensor([target]), output_hidden_states=True, output_attentions=True)
    out.loss.backward()

    trace = run_seq2seq_trace(loaded.model, source, target, backward=True)
    assert trace.tokens == [cfg.decoder_start_token_id] + target[:-1]
    assert trace.loss == pytest.approx(out.loss.item(), abs=LOSS_TOL)
    assert torch.allclose(trace["hook_logits"], out.logits[0], atol=LOGITS_TOL)
    assert torch.allclose(trace["encoder.hook_out"], out.encoder_last_hidden_state[0], atol=RESID_TOL)
    for stack, hidden, attentions in (
        ("encoder", out.encoder_hidden_states, out.encoder_attentions),
        ("decoder", out.decoder_hidden_states, out.decoder_attentions),
    ):
        for i in range(2):
            assert torch.allclose(trace[f"{stack}.blocks.{i}.hook_resid_pre"], hidden[i][0], atol=RESID_TOL), (stack, i)
            assert torch.allclose(trace[f"{stack}.blocks.{i}.attn.hook_pattern"], attentions[i][0], atol=PATTERN_TOL), (stack, i)
    for i in range(2):
        cross = trace[f"decoder.blocks.{i}.cross_attn.hook_pattern"]
        assert cross.shape == (cfg.n_heads, len(target), len(source))
        assert torch.allclose(cross, out.cross_attentions[i][0], atol=PATTERN_TOL), i
    assert trace["encoder.blocks.1.attn.hook_pattern"].triu(1).sum() > 1.0  # the encoder attends both ways
    assert trace["decoder.blocks.1.attn.hook_pattern"].triu(1).abs().max() == 0  # the decoder does not
    reference = CONVERTERS["t5"].state_dict(cfg, {n: p.grad for n, p in hf.named_parameters()})
    assert set(reference) == {n for n, _ in loaded.model.named_parameters()}
    for name, grad in reference.items():
        assert torch.allclose(trace[GRAD + name], grad, atol=GRAD_TOL), name


def test_t5_trace_holds_exactly_the_registered_names_in_order_and_shape(t5):
    """Reference: the registry (names.py): an encoder-decoder's names, order and shapes (the
    encoder's positions and the cross-attention's keys on the source axis)."""
    _, _, loaded = t5
    assert_registered_seq2seq_trace(loaded.model, [5, 9, 11, 4, 7, 30], [8, 3, 21])


def test_t5_cached_decoding_equals_recomputing_the_prefix(t5):
    """Reference: the decoder's pass over the whole prefix (the encoder run once); each cached
    step's logits <= 1e-4 (the cross-attention's keys and values computed at the first step)."""
    from glassbox.model.engine import KVCache

    hf, tokenizer, loaded = t5
    model, cfg = loaded.model, loaded.cfg
    decoder_tokens = [cfg.decoder_start_token_id] + loaded.encode(TARGET)
    with torch.no_grad():
        encoded = model.encode(torch.tensor([loaded.encode(PROMPT)]))
        full = model(None, torch.tensor([decoder_tokens]), encoded=encoded).logits[0]
        cache, source_cache = KVCache(cfg.n_decoder_layers), KVCache(cfg.n_decoder_layers)
        steps = [
            model(None, torch.tensor([[t]]), encoded=encoded, cache=cache, source_cache=source_cache).logits[0, -1]
            for t in decoder_tokens
        ]
    assert torch.allclose(torch.stack(steps), full, atol=LOGITS_TOL)


def test_t5_greedy_generation_is_transformers_generate(t5):
    """Reference: transformers' ``generate`` (greedy, 10 new tokens, the decoder's start token
    dropped); the tokens exactly. Sampled generation runs on the same path (seeded, repeatable)."""
    from glassbox.model.engine.sampling import Sampling, generate

    hf, tokenizer, loaded = t5
    ids = torch.tensor([loaded.encode(PROMPT)])
    expected = hf.generate(ids, max_new_tokens=10, min_new_tokens=10, do_sample=False)[0, 1:].tolist()
    assert [t.token_id for t in generate(loaded, PROMPT, 10, Sampling(temperature=0))] == expected
    sampled = [[t.token_id for t in generate(loaded, PROMPT, 6, Sampling(temperature=1.5, top_k=20, seed=3))] for _ in range(2)]
    assert sampled[0] == sampled[1]
