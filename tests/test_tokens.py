"""Tokens as drawn: byte fragments written as their bytes, spaces and newlines visible, labels
unique. Reference: Python's own UTF-8 encoding of the text the tokens came from."""

import re

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from app.components.labels import token_labels, token_text
from model.io.tokenizer import Tokenizer
from model.tools.family_bench import build_tokenizer

TEXT = "naïve 中文 🤖 ok"
BYTES = re.compile(r"(<0x[0-9A-F]{2}>)+")


def spelled_bytes(tokenizer: Tokenizer, ids: list[int]) -> bytes:
    """The bytes the tokens stand for, read back from their labels: a fragment's <0x..> bytes, any
    other token's text in UTF-8."""
    out = b""
    for i in ids:
        shown = tokenizer.readable(i)
        if "\ufffd" in tokenizer.pieces[i]:
            assert BYTES.fullmatch(shown), shown
            out += bytes(int(h, 16) for h in re.findall(r"<0x([0-9A-F]{2})>", shown))
        else:
            assert shown == tokenizer.pieces[i]
            out += shown.encode()
    return out


def test_byte_level_fragments_are_written_as_the_bytes_they_hold(tmp_path):
    build_tokenizer(tmp_path)  # GPT-2-style byte-level BPE: é, 中 and 🤖 split into byte tokens
    tokenizer = Tokenizer.from_dir(tmp_path)
    ids = tokenizer.encode(TEXT)
    assert sum("\ufffd" in tokenizer.pieces[i] for i in ids) >= 9  # 2 + 3 + 3 + 4 bytes, some merged at most
    assert spelled_bytes(tokenizer, ids) == TEXT.encode("utf-8")
    fragments = [tokenizer.readable(i) for i in range(tokenizer.vocab_size) if "\ufffd" in tokenizer.pieces[i]]
    assert len(set(fragments)) == len(fragments)  # no two fragments share a label


def test_byte_fallback_tokens_keep_their_byte_names():
    """SentencePiece-style vocabularies (Llama 2, Gemma) name their byte tokens <0xE4> already."""
    vocab = {f"<0x{b:02X}>": b for b in range(256)} | {"o": 256, "k": 257}
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "isolated")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tokenizer = Tokenizer(tok)
    ids = tokenizer.encode("ok中")
    assert [tokenizer.readable(i) for i in ids] == ["o", "k", "<0xE4>", "<0xB8>", "<0xAD>"]


def test_spaces_and_newlines_are_visible_and_labels_unique():
    assert token_text(" went") == "␣went"
    assert token_text("\n\n") == "↵↵" and token_text("\t") == "⇥" and token_text("\x00") == "\\x00"
    assert token_text("") == "∅"
    assert token_labels([" a", "a", " a"], [3, 4, 5]) == ["␣a #3", "a", "␣a #5"]
