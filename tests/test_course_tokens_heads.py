"""Lessons 1 (tokens) and 4 (many heads), each figure against a computation written here.

References and tolerances:
- tokens: the byte-level tokens against Python's own UTF-8 encoder (exact); the course model's
  BPE against GPT-2's published encoding algorithm written out here (byte → unicode alphabet,
  GPT-2's pre-tokenizing regex, merges by rank) on the stored tokenizer.json (exact ids); the
  text's embedding against the rows of W_E read from model.safetensors (exact); the trainer
  against a hand-worked example (Sennrich et al.'s low/lower/newest/widest, counts by hand) and
  against the `tokenizers` library's BpeTrainer on the same words (identical merges); audio
  frames and image patches counted and cut by loops (exact), price tokens binned by a loop over
  the edges (exact), the embeddings against torch's F.linear and a one-hot product (1e-12);
- many heads: the reshape, the concatenation and W_O against a torch computation by hand from
  the stored weights (LayerNorm written out, the heads' matrices concatenated with torch.cat):
  1e-5 for q (float32 pass against float64 by hand), 1e-6 for the output and for concat · W_O
  against the sum of the heads' slices; the ablations against transformers' GPT2LMHeadModel
  holding the same weights (model.io.verify.as_gpt2), a head's slice of c_proj's input zeroed
  by a forward pre-hook (1e-5 on probabilities); the exercises' parameter counts against
  torch.nn.MultiheadAttention's own parameters (exact).
"""

import json

import numpy as np
import pytest
import regex
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file

from glassbox.model.course import multi_head, tokens
from glassbox.model.io.assets import asset
from glassbox.model.io.checkpoint import load
from glassbox.model.io.verify import as_gpt2
from tests.helpers import charts, start

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def loaded():
    return load("default")


def typed(exercise):
    return exercise.answer if exercise.kind == "choice" else f"{exercise.answer:,}"


def wrong(exercise):
    if exercise.kind == "choice":
        return next(c for c in exercise.choices if c != exercise.answer)
    return str(exercise.answer + 1)


# --- tokens ---------------------------------------------------------------------------------


def gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's encoder.py: printable bytes as themselves, the rest from U+0100 on."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars)))


GPT2_SPLIT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def gpt2_encode(text: str, vocab: dict[str, int], merges: list[list[str]]) -> list[int]:
    """GPT-2's BPE by hand: split, map bytes, then merge the lowest-ranked pair until none is left."""
    rank = {tuple(m): i for i, m in enumerate(merges)}
    alphabet = gpt2_bytes_to_unicode()
    ids = []
    for piece in GPT2_SPLIT.findall(text):
        word = [alphabet[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(rank.get((a, b), float("inf")), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
            best, _ = min(pairs)
            if best == float("inf"):
                break
            a, b = merges[best]
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        ids += [vocab[w] for w in word]
    return ids


def test_one_text_through_bytes_and_the_course_models_bpe(loaded):
    stored = json.loads((asset("default") / "tokenizer.json").read_text())["model"]
    for text in (tokens.TEXT, "the cat sat on the mat", "Zoë's 3 cafés: 日本!"):
        assert [t["id"] for t in tokens.byte_tokens(text)] == list(text.encode("utf-8"))
        bpe = tokens.bpe_tokens(loaded, text)
        assert [t["id"] for t in bpe] == gpt2_encode(text, stored["vocab"], stored["merges"]), text
        assert len(bpe) < len(text.encode("utf-8"))  # different counts, the point of the section
    w_e = load_file(str(asset("default") / "model.safetensors"))["embed.W_E"]
    ids = [t["id"] for t in tokens.bpe_tokens(loaded, tokens.TEXT)]
    np.testing.assert_array_equal(tokens.text_embedding(loaded, tokens.TEXT), w_e[ids].astype(np.float64))


def test_the_bpe_trainer_by_hand():
    """Word counts low 5, lower 2, newest 6, widest 3. Pairs: e+s 6 + 3 = 9 and s+t 9 tie (e entered
    the alphabet before s: e+s); then es+t 9; then l+o 7 and o+w 7 tie (l first: l+o); then lo+w 7."""
    corpus = ["low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3]
    merges = tokens.train_bpe(corpus, 4)
    assert [(m.left, m.right, m.count) for m in merges] == [("e", "s", 9), ("es", "t", 9), ("l", "o", 7), ("lo", "w", 7)]
    assert tokens.segment("lowest", merges) == ["low", "est"] and tokens.segment("newer", merges) == list("newer")
    assert tokens.vocabulary(corpus, merges)[-4:] == ["es", "est", "lo", "low"]
    assert tokens.alphabet(corpus) == sorted(set("lowernewestwidest"))


def test_the_bpe_trainer_learns_the_tokenizers_librarys_merges():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from glassbox.model.data.stories import corpus

    stories = [s for story in corpus(20, seed=3) for s in story.split(".")]
    for sentences, n in ((tokens.TRAIN_SENTENCES, tokens.MAX_MERGES), (stories, 150)):
        theirs = Tokenizer(models.BPE())
        theirs.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        theirs.train_from_iterator(
            list(sentences),
            trainers.BpeTrainer(vocab_size=len(tokens.alphabet(sentences)) + n, show_progress=False, special_tokens=[]),
        )
        expected = [tuple(m) for m in json.loads(theirs.to_str())["model"]["merges"]]
        ours = tokens.train_bpe(sentences, n)
        assert [(m.left, m.right) for m in ours] == expected
        # the tokens each sentence ends with: the library's tokenizer, word by word
        for sentence in list(sentences)[:5]:
            assert [p for w in tokens.tokenize(sentence, ours) for p in w] == theirs.encode(sentence).tokens


def test_audio_frames_image_patches_and_price_tokens_by_loops():
    clip = tokens.audio_clip(1.0)
    assert clip.shape == (16_000,)
    for window, hop in ((400, 160), (320, 80), (16_000, 1), (500, 500)):
        count, start = 0, 0
        while start + window <= len(clip):
            count, start = count + 1, start + hop
        cut = tokens.frames(clip, window, hop)
        assert tokens.frame_count(len(clip), window, hop) == count == len(cut)
        np.testing.assert_array_equal(cut[count - 1], clip[(count - 1) * hop : (count - 1) * hop + window])
    assert tokens.audio_domain().length == 1 + (16_000 - 400) // 160 == 98

    for h, w in ((224, 224), (64, 96), (40, 40)):
        image = tokens.picture(h, w)
        cut = tokens.patches(image, 16)
        assert len(cut) == tokens.patch_count(h, w, 16) == sum(1 for _ in range(0, h - 15, 16) for _ in range(0, w - 15, 16))
        i = 0
        for r in range(h // 16):
            for c in range(w // 16):
                np.testing.assert_array_equal(cut[i], image[16 * r : 16 * r + 16, 16 * c : 16 * c + 16].reshape(-1))
                i += 1
    assert tokens.image_domain().length == (224 // 16) * (224 // 16) == 196

    series = tokens.prices()
    edges = tokens.bin_edges()
    ids = tokens.return_tokens(series)
    for day, token in enumerate(ids):
        r = np.log(series[day + 1] / series[day])
        assert token == sum(r >= e for e in edges[1:-1])  # the bins below it
    assert len(ids) == tokens.PRICES["days"] - 1 and ids.min() >= 0 and ids.max() < tokens.PRICES["bins"]


def test_the_tiny_embeddings():
    for domain, rows in (
        (tokens.audio_domain(), tokens.frames(tokens.audio_clip(), 400, 160)),
        (tokens.image_domain(), tokens.patches(tokens.picture(), 16)),
    ):
        weights = torch.from_numpy(tokens.embedding_weights(rows.shape[1]))
        expected = F.linear(torch.from_numpy(np.array(rows)), weights.T).numpy()
        assert domain.embedded.shape == (domain.length, tokens.D_MODEL)
        np.testing.assert_allclose(domain.embedded, expected, atol=1e-12)
    ids = tokens.return_tokens(tokens.prices())
    one_hot = np.eye(tokens.PRICES["bins"])[ids]
    np.testing.assert_allclose(
        tokens.price_domain().embedded, one_hot @ tokens.embedding_weights(tokens.PRICES["bins"]), atol=1e-12
    )


def hand_bpe_count(text: str, merges: list[list[str]]) -> int:
    total = 0
    for word in text.split():
        pieces = list(word)
        for a, b in merges:
            i = 0
            while i < len(pieces) - 1:
                if pieces[i] == a and pieces[i + 1] == b:
                    pieces[i : i + 2] = [a + b]
                i += 1
        total += len(pieces)
    return total


def test_tokens_exercises_recomputed():
    questions = set()
    for seed in SEEDS:
        exercises = {x.key: x for x in tokens.exercises(seed)}
        d = exercises["patches"].data
        assert exercises["patches"].answer == len(range(0, d["height"], d["patch"])) * len(range(0, d["width"], d["patch"]))
        d = exercises["audio_frames"].data
        assert d["samples"] == round(d["seconds"] * d["rate"])
        assert exercises["audio_frames"].answer == len(range(0, d["samples"] - d["window"] + 1, d["hop"]))
        assert exercises["bytes"].answer == len(exercises["bytes"].data["text"].encode("utf-8"))
        d = exercises["bpe_count"].data
        assert exercises["bpe_count"].answer == hand_bpe_count(d["text"], d["merges"])
        for x in exercises.values():
            assert x.check(typed(x)).right and not x.check(wrong(x)).right, (seed, x.key)
            questions.add(x.question)
    assert len(questions) > 8


def test_the_tokens_page():
    at = start("course/tokens.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["byte-level tokens"] == f"{len(tokens.TEXT.encode('utf-8')):,}"
    assert metrics["characters"] == f"{len(tokens.TEXT):,}"
    at.slider(key="tokens_merges").set_value(2).run()
    assert not at.exception
    merges = tokens.train_bpe(tokens.TRAIN_SENTENCES)
    assert any(f"Merge 2: “{merges[1].left}” + “{merges[1].right}”" in m.value for m in at.markdown)
    at.select_slider(key="tokens_hop").set_value(20).run()
    assert not at.exception
    assert any(f"= {1 + (16_000 - 400) // 320}." in c.value for c in at.caption)


# --- many heads -----------------------------------------------------------------------------


def by_hand(loaded, tokens_: list[int], block: int) -> dict:
    """The block's attention from the stored weights: LayerNorm, one fused projection per Q/K/V,
    causal softmax, the heads concatenated and multiplied by the stacked W_O."""
    w = {k: torch.from_numpy(v).double() for k, v in load_file(str(asset("default") / "model.safetensors")).items()}
    cfg = loaded.cfg
    T, H, dh = len(tokens_), cfg.n_heads, cfg.d_head
    x = w["embed.W_E"][tokens_] + w["pos_embed.W_pos"][:T]
    for b in range(block + 1):
        a = f"blocks.{b}."
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        normed = (x - mean) / torch.sqrt(var + cfg.norm_eps) * w[a + "ln1.w"] + w[a + "ln1.b"]
        fused = {n: torch.cat([w[f"{a}attn.W_{n}"][h] for h in range(H)], dim=1) for n in "QKV"}
        bias = {n: w[f"{a}attn.b_{n}"].reshape(-1) for n in "QKV"}
        q, k, v = ((normed @ fused[n] + bias[n]).view(T, H, dh).transpose(0, 1) for n in "QKV")
        scores = (q @ k.transpose(-1, -2)) / dh**0.5
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        z = scores.softmax(-1) @ v
        out = torch.cat([z[h] for h in range(H)], dim=1) @ torch.cat([w[f"{a}attn.W_O"][h] for h in range(H)], dim=0)
        out = out + w[a + "attn.b_O"]
        if b == block:
            return {"q": q, "z": z, "out": out, "pattern": scores.softmax(-1)}
        mid = x + out
        mean, var = mid.mean(-1, keepdim=True), mid.var(-1, unbiased=False, keepdim=True)
        h2 = (mid - mean) / torch.sqrt(var + cfg.norm_eps) * w[a + "ln2.w"] + w[a + "ln2.b"]
        pre = h2 @ w[a + "mlp.W_in"] + w[a + "mlp.b_in"]
        x = mid + F.gelu(pre, approximate="tanh") @ w[a + "mlp.W_out"] + w[a + "mlp.b_out"]


def test_the_reshape_the_concatenation_and_w_o_by_hand(loaded):
    ids = loaded.encode(multi_head.PROMPT)
    for block in (0, 2):
        split = multi_head.split_heads(loaded, ids, block)
        hand = by_hand(loaded, ids, block)
        np.testing.assert_allclose(split.q_heads, hand["q"].numpy(), atol=1e-5)
        np.testing.assert_allclose(split.patterns, hand["pattern"].numpy(), atol=1e-5)
        np.testing.assert_allclose(split.out_concat, hand["out"].numpy(), atol=1e-5)
        assert split.reshape_difference <= 1e-5 and split.engine_difference <= 1e-5
        # the two readings of W_O, on the same z: to 1e-6 (float64; only the order of the sums differs)
        assert split.concat_difference <= 1e-6
        z = torch.from_numpy(split.z)
        w_o = torch.from_numpy(split.W_O)
        by_slices = sum(z[h] @ w_o[h * loaded.cfg.d_head : (h + 1) * loaded.cfg.d_head] for h in range(loaded.cfg.n_heads))
        b_o = loaded.model.state_dict()[f"blocks.{block}.attn.b_O"].double().numpy()
        np.testing.assert_allclose(split.out_sum, by_slices.numpy() + b_o, atol=1e-12)


def gpt2_probs(hf, ids: list[int], block: int, zeroed: list[int], d_head: int) -> np.ndarray:
    """transformers' pass with the zeroed heads' slice of c_proj's input (the concatenated z) set to 0."""

    def hook(module, args):
        (merged,) = args
        merged = merged.clone()
        for h in zeroed:
            merged[..., h * d_head : (h + 1) * d_head] = 0
        return (merged,)

    handle = hf.transformer.h[block].attn.c_proj.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            logits = hf(torch.tensor([ids])).logits[0, -1].double()
    finally:
        handle.remove()
    return logits.softmax(-1).numpy()


@pytest.fixture(scope="module")
def hf(loaded):
    return as_gpt2(loaded.model, torch.float32, torch.device("cpu"))[0]


def test_heads_alone_and_zeroed_against_transformers(loaded, hf):
    ids = loaded.encode(multi_head.PROMPT)
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    plain = loaded.model(torch.tensor([ids])).logits[0, -1].detach()
    block = 1
    rows = multi_head.head_effects(loaded, ids, block)
    dh, H = loaded.cfg.d_head, loaded.cfg.n_heads
    full = gpt2_probs(hf, ids, block, [], dh)
    assert rows[0]["top_id"] == int(full.argmax())
    assert len(rows) == 1 + 2 * H
    for row in rows:
        theirs = gpt2_probs(hf, ids, block, row["zeroed"], dh)
        assert row["p_top"] == pytest.approx(theirs[row["top_id"]], abs=1e-5), row["kind"]
        assert [t["id"] for t in row["top"][:2]] == list(np.argsort(-theirs)[:2])
    # the edits left nothing on the shared model
    assert all(torch.equal(before[k], v) for k, v in loaded.model.state_dict().items())
    assert torch.equal(loaded.model(torch.tensor([ids])).logits[0, -1].detach(), plain)


def test_multi_head_exercises_recomputed(loaded, hf):
    questions = set()
    for seed in SEEDS:
        exercises = {x.key: x for x in multi_head.exercises(seed, loaded)}
        d = exercises["d_head"].data
        assert exercises["d_head"].answer == d["d_model"] // d["heads"] and d["d_model"] % d["heads"] == 0
        d = exercises["reshape"].data
        q = torch.zeros(d["batch"], d["seq"], d["d_model"], device="meta")
        shape = q.view(d["batch"], d["seq"], d["heads"], -1).transpose(1, 2).shape
        assert exercises["reshape"].answer == str(list(shape))
        d = exercises["parameters"].data
        mha = torch.nn.MultiheadAttention(d["d_model"], 8, bias=d["bias"], device="meta")
        assert exercises["parameters"].answer == sum(p.numel() for p in mha.parameters())
        x = exercises["needed_head"]
        ids = loaded.encode(x.data["prompt"])
        full = gpt2_probs(hf, ids, x.data["block"], [], loaded.cfg.d_head)
        top = int(full.argmax())
        drops = [full[top] - gpt2_probs(hf, ids, x.data["block"], [h], loaded.cfg.d_head)[top] for h in range(loaded.cfg.n_heads)]
        assert x.answer == f"head {int(np.argmax(drops)) + 1}"
        assert x.data["drops"] == pytest.approx(drops, abs=1e-5)
        for x in exercises.values():
            assert x.check(typed(x)).right and not x.check(wrong(x)).right, (seed, x.key)
            questions.add(x.question)
    assert len(questions) > 8


def test_the_multi_head_page():
    at = start("course/multi_head.py")
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["largest |concat · W_O − Σ_h z_h · W_O[h]|"]) <= 1e-6
    assert any("Without head" in c.value or "No single head" in c.value for c in at.caption)
    at.radio(key="heads_block").set_value(3).run()
    assert not at.exception
    assert any("block 4 (blocks.3)" in m.value for m in at.markdown)
    at.select_slider(key="heads_position").set_value(2).run()
    assert not at.exception and any("q at 2:" in str(c) for c in charts(at))
    at.text_input(key="heads_prompt").input("the cat sat").run()  # shorter: the position comes back inside it
    assert not at.exception and at.select_slider(key="heads_position").value == 2
    at.text_input(key="heads_prompt").input("the cat").run()
    assert not at.exception and at.select_slider(key="heads_position").value == 1
