"""BART, opened by Glassbox (model/io/convert/bart.py: post-norm blocks in both stacks, the
decoder's cross-attention normed after its sum too), against transformers' own
BartForConditionalGeneration.

Reference: a tiny random BartForConditionalGeneration (2 + 2 blocks, d_model 16, 4 heads, eager
attention, every switch BART has: √d_model embedding scale, learned positions with their offset
of 2, the embedding LayerNorms, biases everywhere; norms, biases and ``final_logits_bias``
perturbed), saved with ``save_pretrained`` beside a ``tokenizer.json`` (tests/test_families.py's
``saved_family``) and opened from that folder. Tolerances: float32 on both sides, differently
ordered arithmetic: logits, hidden states, attention patterns, the loss and every parameter's
gradient <= 1e-5; float64 on both sides: logits and the encoder's output <= 1e-10 (float64's
rounding over a few blocks, ~1e-15, with room).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import assert_registered_seq2seq_trace, require

transformers = require("transformers")

import glassbox as gb  # noqa: E402
from glassbox.model.engine import GRAD, KVCache, run_seq2seq_trace  # noqa: E402
from glassbox.model.io.checkpoint import load  # noqa: E402
from glassbox.model.io.convert import CONVERTERS  # noqa: E402
from tests.test_families import PROMPT, SIZES, saved_family  # noqa: E402

TOL32 = 1e-5
TOL64 = 1e-10
TARGET = "The cat sat on the mat."
BART = {
    "vocab_size": SIZES["vocab_size"],
    "d_model": 16,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 24,
    "decoder_ffn_dim": 24,
    "max_position_embeddings": 64,
    "scale_embedding": True,
    "activation_function": "gelu",
    "dropout": 0.0,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "forced_eos_token_id": None,
}


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    """(transformers' model, its folder, Glassbox's model of it in float32)."""
    path = tmp_path_factory.mktemp("bart")
    hf, _, _ = saved_family(transformers.BartConfig(**BART), False, path, transformers.AutoModelForSeq2SeqLM)
    with torch.no_grad():  # a buffer, so saved_family left it at zero: a head bias that shows
        hf.final_logits_bias.normal_(generator=torch.Generator().manual_seed(2))
    hf.save_pretrained(str(path))
    return hf, path, load(str(path), dtype="float32", device="cpu")


def test_bart_forward_and_backward_match_transformers(bart):
    """Float32: the loss, the logits, the encoder's output, each stack's hidden states (entering
    each block), self- and cross-attention patterns, and the gradient w.r.t. every parameter
    (transformers' mapped through the converter; the head bias's, a buffer there, is the logits'
    gradient summed over positions)."""
    hf, _, loaded = bart
    cfg = loaded.cfg
    assert cfg.kind == "encoder-decoder" and loaded.about["family"] == "BART" and cfg.norm_position == "post"
    source, target = loaded.encode(PROMPT), loaded.encode(TARGET)
    hf.zero_grad()
    out = hf(input_ids=torch.tensor([source]), labels=torch.tensor([target]), output_hidden_states=True, output_attentions=True)
    out.logits.retain_grad()
    out.loss.backward()

    trace = run_seq2seq_trace(loaded.model, source, target, backward=True)
    assert trace.tokens == [cfg.decoder_start_token_id] + target[:-1]
    assert trace.loss == pytest.approx(out.loss.item(), abs=TOL32)
    assert torch.allclose(trace["hook_logits"], out.logits[0], atol=TOL32)
    assert torch.allclose(trace["encoder.hook_out"], out.encoder_last_hidden_state[0], atol=TOL32)
    for stack, hidden, attentions in (
        ("encoder", out.encoder_hidden_states, out.encoder_attentions),
        ("decoder", out.decoder_hidden_states, out.decoder_attentions),
    ):
        for i in range(2):
            assert torch.allclose(trace[f"{stack}.blocks.{i}.hook_resid_pre"], hidden[i][0], atol=TOL32), (stack, i)
            assert torch.allclose(trace[f"{stack}.blocks.{i}.attn.hook_pattern"], attentions[i][0], atol=TOL32)
    for i in range(2):
        assert torch.allclose(trace[f"decoder.blocks.{i}.cross_attn.hook_pattern"], out.cross_attentions[i][0], atol=TOL32), i
    assert trace["decoder.blocks.1.attn.hook_pattern"].triu(1).abs().max() == 0  # the decoder is causal
    grads = {n: p.grad for n, p in hf.named_parameters()} | {"final_logits_bias": out.logits.grad.sum(dim=1)}
    reference = CONVERTERS["bart"].state_dict(cfg, grads)
    assert set(reference) == {n for n, _ in loaded.model.named_parameters()}
    for name, grad in reference.items():
        assert torch.allclose(trace[GRAD + name], grad, atol=TOL32), name


def test_bart_in_float64_matches_transformers_to_1e10(bart):
    _, path, _ = bart
    hf64 = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(path), dtype=torch.float64, attn_implementation="eager").eval()
    loaded = load(str(path), dtype="float64", device="cpu")
    source, target = loaded.encode(PROMPT), loaded.encode(TARGET)
    with torch.no_grad():
        out = hf64(input_ids=torch.tensor([source]), labels=torch.tensor([target]))
    trace = run_seq2seq_trace(loaded.model, source, target)
    assert trace["hook_logits"].dtype == torch.float64
    assert (trace["hook_logits"] - out.logits[0]).abs().max() < TOL64
    assert (trace["encoder.hook_out"] - out.encoder_last_hidden_state[0]).abs().max() < TOL64
    assert out.logits.abs().max() > 0.1  # not a comparison of zeros


def test_glassbox_verify_on_bart(bart):
    """verify on an encoder-decoder (the prompt its source and its target): in float64 the logits,
    both stacks' residual streams, the loss and their gradients within float64's rounding (1e-12;
    BART's transformers code computes nothing in float32 on the way, unlike RoPE models'); the
    command too (in-process: its exit status and JSON). Reference: BartForConditionalGeneration."""
    import json

    from tests.helpers import cli

    _, path, _ = bart
    model = gb.load(str(path), dtype="float64", device="cpu")
    result = model.verify(PROMPT, gradients=True)
    assert result.reference.startswith("transformers BartForConditionalGeneration") and result.dtype == "float64"
    assert result.logits < 1e-12 and result.residual < 1e-12 and result.loss < 1e-12 and result.gradient < 1e-12
    assert result.logits_scale > 0.1 and result.gradient_scale > 1e-4
    with torch.no_grad():
        model.module.decoder.blocks[1].cross_attn.W_V[0, 0, 0] += 0.5  # this copy only: the folder is unchanged
    assert model.verify(PROMPT).logits > 1e-4
    run = cli("verify", "--model", str(path), "--dtype", "float64", "--prompt", PROMPT, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["residual"] < 1e-12


def test_bart_trace_holds_exactly_the_registered_names_in_order_and_shape(bart):
    """Reference: the registry (names.py): post-norm blocks with cross-attention (hook_cross_attn_sum,
    ln_cross after it), learned positions and an embedding norm in each stack, no final norm."""
    _, _, loaded = bart
    trace = assert_registered_seq2seq_trace(loaded.model, [5, 9, 11, 4, 7, 30], [8, 3, 21])
    assert "decoder.blocks.0.hook_cross_attn_sum" in trace.activations


def test_bart_cached_decoding_and_greedy_generation(bart):
    """References: the decoder's pass over the whole prefix (each cached step's logits <= 1e-5),
    and transformers' ``generate`` (greedy, 8 new tokens, its start token dropped): the ids exactly."""
    from glassbox.model.engine.sampling import Sampling, generate

    hf, _, loaded = bart
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
    assert torch.allclose(torch.stack(steps), full, atol=TOL32)
    ids = torch.tensor([loaded.encode(PROMPT)])
    expected = hf.generate(
        ids,
        max_new_tokens=8,
        min_new_tokens=8,
        do_sample=False,
        num_beams=1,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        no_repeat_ngram_size=0,
    )[0, 1:].tolist()
    assert [t.token_id for t in generate(loaded, PROMPT, 8, Sampling(temperature=0))] == expected


def test_a_bartmodel_checkpoint_without_prefix_or_head_bias_is_read(bart, tmp_path):
    """The hub's bart-base layout (BartModel: weights without "model.", no final_logits_bias).
    Reference: transformers' logits less its final_logits_bias (what it adds), <= 1e-5."""
    import shutil

    from safetensors.torch import load_file, save_file

    hf, path, _ = bart
    for item in path.iterdir():
        shutil.copy(item, tmp_path / item.name)
    weights = load_file(str(path / "model.safetensors"))
    save_file(
        {k.removeprefix("model."): v for k, v in weights.items() if k != "final_logits_bias"},
        str(tmp_path / "model.safetensors"),
        metadata={"format": "pt"},
    )
    loaded = load(str(tmp_path), dtype="float32", device="cpu")
    source, target = loaded.encode(PROMPT), loaded.encode(TARGET)
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([source]), labels=torch.tensor([target]))
    assert not loaded.model.unembed.b_U.any()
    expected = out.logits[0] - hf.final_logits_bias
    assert torch.allclose(run_seq2seq_trace(loaded.model, source, target)["hook_logits"], expected, atol=TOL32)


def test_a_bart_folder_traces_through_the_api_and_opens_in_the_explorer(bart):
    """gb.load(folder).trace, as for T5; and each of the explorer's encoder-decoder views draws."""
    from glassbox.app.explore.seq2seq import VIEWS
    from tests.helpers import charts, start

    _, path, loaded = bart
    traced = gb.load(str(path)).trace(TARGET, source=PROMPT)
    expected = run_seq2seq_trace(loaded.model, loaded.encode(PROMPT), loaded.encode(TARGET))
    assert torch.equal(traced["hook_logits"], expected["hook_logits"])
    for view in VIEWS:
        at = start("screens/explore.py", model=str(path), prompt=PROMPT, view=view)
        assert not at.exception and not at.error, view
        assert charts(at) and all(chart["data"] for chart in charts(at)), view
