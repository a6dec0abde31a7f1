"""The playground on an encoder-decoder (T5: the prompt is the source, the target is written token by
token) and on an encoder (BERT: the prompt's mask is filled in), engine and page.

References:
- generation: every step's distributions equal those of the decoder's logits recomputed on the whole
  prefix without caches (run_seq2seq_trace, teacher forcing: float32, <= 1e-5 on the logits, <= 1e-6
  on the probabilities), and every drawn token is the draw a generator seeded alike makes from
  them; the KV cache's measured bytes equal kv_cache_bytes's formula, exactly;
- greedy generation on micro-seq2seq reverses held-out sources (what it was trained for);
- transformers: T5ForConditionalGeneration's first-step logits and BertForMaskedLM's logits at the
  mask, on the same weights (float32 both sides: <= 1e-4, as tests/test_families.py);
- the page: its charts, tokens and cache sizes are the engine's, computed here.
"""

from __future__ import annotations

import base64
import json
import shutil
from urllib.parse import urlencode

import numpy as np
import pytest
import torch

from glassbox.model.engine import run_seq2seq_trace
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.sampling import (
    Sampling,
    distributions,
    fill_mask,
    first_target_logits,
    generate,
    kv_cache_bytes,
    masked_token_logits,
)
from glassbox.model.io.checkpoint import load
from glassbox.model.micro.seq2seq import held_out
from tests.helpers import charts, press, require, start

transformers = require("transformers")

SAMPLING = Sampling(temperature=1.3, top_k=20, top_p=0.9, seed=5)
LOGITS_TOL, HF_TOL = 1e-5, 1e-4


@pytest.fixture(scope="module")
def seq2seq():
    return load("micro-seq2seq")


def text(loaded, ids: list[int]) -> str:
    return " ".join(loaded.pieces[i] for i in ids)


def test_sampled_target_is_drawn_from_the_uncached_decoders_distributions(seq2seq):
    source = held_out(1, seq2seq.cfg.vocab_size)[0]
    steps = list(generate(seq2seq, text(seq2seq, source), 8, SAMPLING))
    target = [s.token_id for s in steps]
    logits = run_seq2seq_trace(seq2seq.model, source, target, names=["hook_logits"])["hook_logits"]
    generator = torch.Generator().manual_seed(SAMPLING.seed)
    for i, step in enumerate(steps):  # decoder position i read the start token and target[:i]
        before, after = distributions(logits[i], SAMPLING)
        assert torch.allclose(step.before, before, atol=1e-6) and torch.allclose(step.after, after, atol=1e-6), i
        assert step.token_id == int(torch.multinomial(after, 1, generator=generator)), i
        # the cache that predicted it: the start token and i tokens, and the whole source in each block
        assert step.position == i + 1
        assert step.cache_bytes == kv_cache_bytes(seq2seq, step.position, len(source))
    assert len(set(target)) > 1  # a sample, not a constant
    cfg = seq2seq.cfg
    assert kv_cache_bytes(seq2seq, 1, 6) == 2 * cfg.n_decoder_layers * 7 * cfg.n_kv_heads * cfg.d_head * 4
    assert torch.allclose(first_target_logits(seq2seq, text(seq2seq, source)).float(), logits[0], atol=LOGITS_TOL)


def test_greedy_generation_reverses_held_out_sources(seq2seq):
    for source in held_out(4, seq2seq.cfg.vocab_size):
        steps = generate(seq2seq, text(seq2seq, source), len(source), Sampling(temperature=0))
        assert [s.token_id for s in steps] == source[::-1], text(seq2seq, source)


def test_first_target_logits_are_t5s(tmp_path):
    """Reference: T5ForConditionalGeneration on the source with decoder_input_ids = [start] (<= 1e-4)."""
    from tests.test_encoder_families import T5_SIZES
    from tests.test_families import PROMPT, saved_family

    hf, _, loaded = saved_family(
        transformers.T5Config(**T5_SIZES, feed_forward_proj="relu"), False, tmp_path, transformers.AutoModelForSeq2SeqLM
    )
    with torch.no_grad():
        expected = hf(
            input_ids=torch.tensor([loaded.encode(PROMPT)]), decoder_input_ids=torch.tensor([[loaded.cfg.decoder_start_token_id]])
        ).logits[0, 0]
    assert torch.allclose(first_target_logits(loaded, PROMPT).float(), expected, atol=HF_TOL)


# --- an encoder: fill in the mask ---------------------------------------------------------------

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the a cat dog sat ran on under mat rug and bird sang ##s .".split()
MASKED = "The cat [MASK] on the mat."


def bert_tokenizer(special: list[str]):
    """BERT's kind of tokenizer.json (WordPiece, lower-cased, [CLS] … [SEP]) over a few words."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(special)
    return tok


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """(BertForMaskedLM, its folder): 2 blocks, random weights, norms and biases perturbed."""
    path = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(SPECIAL + WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
        initializer_range=0.2,
    )
    hf = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    hf.save_pretrained(str(path))
    bert_tokenizer(SPECIAL).save(str(path / "tokenizer.json"))
    return hf, path


def test_masked_token_logits_are_berts_and_fill_draws_from_them(bert):
    """Reference: BertForMaskedLM's logits at the mask position (<= 1e-4)."""
    hf, path = bert
    loaded = load(str(path), dtype="float32", device="cpu")
    assert loaded.cfg.kind == "encoder" and loaded.tokenizer.mask_token == "[MASK]"
    tokens = loaded.encode(MASKED)
    with torch.no_grad():
        expected = hf(torch.tensor([tokens])).logits[0, tokens.index(4)]
    logits = masked_token_logits(loaded, MASKED)
    assert torch.allclose(logits.float(), expected, atol=HF_TOL)
    greedy = fill_mask(loaded, MASKED, Sampling(temperature=0))
    assert greedy.token_id == int(expected.argmax()) and greedy.text == MASKED.replace("[MASK]", greedy.token)
    sampling = Sampling(temperature=1.5, top_k=8, seed=3)
    _, after = distributions(logits, sampling)
    drawn = fill_mask(loaded, MASKED, sampling)
    assert drawn.token_id == int(torch.multinomial(after, 1, generator=torch.Generator().manual_seed(3)))
    assert drawn.p == pytest.approx(float(after[drawn.token_id]))
    with pytest.raises(GlassboxError, match=r"Put \[MASK\] where a word should be filled in"):
        masked_token_logits(loaded, "The cat sat on the mat.")


def test_a_tokenizer_without_a_mask_token_says_so(bert, tmp_path):
    shutil.copytree(bert[1], tmp_path / "bert", dirs_exist_ok=True)
    bert_tokenizer(SPECIAL[:4]).save(str(tmp_path / "bert" / "tokenizer.json"))
    loaded = load(str(tmp_path / "bert"), dtype="float32", device="cpu")
    with pytest.raises(GlassboxError, match="tokenizer has no mask token"):
        masked_token_logits(loaded, "The cat sat.")


# --- the page ---------------------------------------------------------------------------------


def sent_logits(at, title: str) -> tuple[np.ndarray, list[int], dict]:
    """What the page's distribution is computed from (app/components/sampling_controls.py): the
    logits most likely first, the ids of the tokens drawn, and the settings."""
    sent = json.loads(at.get("bidi_component")[0].proto.json)
    assert sent["title"] == title
    return np.frombuffer(base64.b64decode(sent["logits"]), dtype="<f8"), sent["ids"], sent["settings"]


def same_logits(at, title: str, logits: torch.Tensor) -> None:
    """The page was sent exactly the engine's logits (bit for bit), in the sampler's order."""
    values, ids, _ = sent_logits(at, title)
    order = torch.argsort(logits, descending=True, stable=True)
    assert np.array_equal(values, logits[order].numpy()) and ids == order[:15].tolist()


def test_playground_writes_micro_seq2seqs_target_as_the_engine_does(seq2seq):
    source = "ba ko mi to ze li"
    at = start(
        "screens/playground.py",
        model="micro-seq2seq",
        prompt=source,
        temperature="1.3",
        top_k="20",
        top_p="0.9",
        seed="5",
        max_new="8",
    )
    assert not at.exception and not at.error
    assert at.text_area(key="prompt").label == "Source"
    same_logits(at, "First target token, given the source", first_target_logits(seq2seq, source))
    assert sent_logits(at, "First target token, given the source")[2] == {
        "temperature": 1.3,
        "top_k": 20,
        "top_p": 0.9,
        "greedy": False,
    }

    press(at)
    assert not at.exception and not at.error
    expected = list(generate(seq2seq, source, 8, SAMPLING))
    tokens = at.session_state["generation"]["tokens"]
    assert [t["token_id"] for t in tokens] == [t.token_id for t in expected]
    assert "".join(t["token"] for t in tokens) == "".join(t.token for t in expected)
    # the KV cache of step 3, as sent to the page (app/components/generation_player.js): the formula's
    # figure, and the one measured, are the engine's cache's
    (player,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "steps" in json.loads(c.proto.json)]
    kv = player["steps"][2]["kv"]
    measured = expected[2].cache_bytes
    assert measured == kv_cache_bytes(seq2seq, 3, 6)
    assert "(3 + 6)" in kv["latex"][1] and f"= {measured:,}".replace(",", "{,}") in kv["latex"][1]  # KaTeX: one number
    assert f"measured on the engine's own cache during generation: {measured:,} bytes" in kv["measured"].lower()
    # its explorer link opens the trace whose target ends with step 3's token
    assert player["steps"][2]["href"] == "explore?" + urlencode(
        {"model": "micro-seq2seq", "prompt": source, "target": " ".join(t.token for t in expected[:3])}
    )


def test_playground_fills_berts_mask(bert, monkeypatch):
    monkeypatch.delenv("GLASSBOX_MODEL_DIRS", raising=False)  # any local folder opens
    hf, path = bert
    loaded = load(str(path), dtype="float32", device="cpu")
    at = start("screens/playground.py", model=str(path), prompt=MASKED, seed="3")
    assert not at.exception and not at.error
    assert json.loads(at.get("bidi_component")[0].proto.json)["action"] == "Fill"
    same_logits(at, "The masked token", masked_token_logits(loaded, MASKED))
    press(at, "Fill")
    assert not at.exception and not at.error
    filled = fill_mask(loaded, MASKED, Sampling(seed=3))
    assert at.session_state["filled"]["text"] == filled.text
    assert json.loads(at.get("bidi_component")[0].proto.json)["drawn"] == filled.token_id  # in bold in the page
    assert any(filled.text in h.proto.body for h in at.get("html"))

    at.text_area(key="prompt").set_value("The cat sat on the mat.").run()
    assert not at.exception
    assert [e.value for e in at.error] and "where a word should be filled in" in at.error[0].value.replace("\\", "")


@pytest.mark.parametrize(
    "page,model_key,prompt_key",
    [("screens/playground.py", "model", "prompt"), ("screens/explore.py", "explore_model", "explore_prompt")],
)
def test_a_model_that_cannot_read_the_prompt_opens_on_its_sample_prompt(page, model_key, prompt_key):
    """Opening micro-seq2seq (word-level syllables) after a story prompt: its config's sample
    prompt replaces the prompt, the page says so, and nothing fails; a prompt typed while it is
    open stays as typed (here one it cannot read: the error names the word)."""
    at = start(page, prompt="Lily had a")
    at.selectbox(key=model_key + "_bundled").set_value("micro-seq2seq").run()
    assert not at.exception and not at.error
    sample = load("micro-seq2seq").about["sample_prompt"]
    assert at.session_state[prompt_key] == sample
    assert any("cannot read the prompt" in i.value for i in at.info)
    assert charts(at) or at.get("bidi_component")  # the page goes on with the sample prompt
    at.session_state[prompt_key] = "ba zz"
    at.run()
    assert at.session_state[prompt_key] == "ba zz" and at.error
