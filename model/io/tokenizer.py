"""Text <-> token ids, on top of the `tokenizers` library.

Two kinds, both stored as files a model directory carries:
- byte-level BPE (GPT-2's ``vocab.json`` + ``merges.txt``, or a ``tokenizer.json``): every
  string tokenizes, unknown characters fall back to their UTF-8 bytes;
- word-level (the worked example's 8 words, a ``tokenizer.json``): a word outside the
  vocabulary is an error that lists the vocabulary (its first words: ``guard.some``).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from glassbox.model.engine import GlassboxError
from glassbox.model.io.guard import TOKENIZER_BYTES, read_file, regular_file, shortened, some


def check_unicode(text: str) -> None:
    """Text that is not valid Unicode is refused, never replaced (a replaced character would be a
    token the visitor did not type): a lone surrogate (U+D800–U+DFFF), as a shell passes bytes
    that are not UTF-8 (``$'\\xff'``) or as a broken paste holds, has no UTF-8 form a tokenizer
    can read."""
    lone = _SURROGATE.search(text)
    if lone:
        raise GlassboxError(
            f"The text is not valid Unicode: character {lone.start() + 1} is a lone surrogate "
            f"(U+{ord(lone[0]):04X}), which no tokenizer reads (bytes that are not UTF-8?). "
            "Remove it, or give the text as UTF-8"
        )


_SURROGATE = re.compile("[\ud800-\udfff]")


class Tokenizer:
    def __init__(self, tok: HFTokenizer):
        self._tok = tok
        self.vocab = tok.get_vocab()
        self.word_level = isinstance(tok.model, models.WordLevel)
        # One display string per id: what the token adds to the text (" mat" for "Ġmat").
        self.pieces = [self._piece(i) for i in range(tok.get_vocab_size())]

    @classmethod
    def from_dir(cls, path: Path) -> Tokenizer:
        """tokenizer.json, or GPT-2's vocab.json + merges.txt; each a regular file of sane size."""
        path = Path(path)
        tokenizer_json, vocab, merges = path / "tokenizer.json", path / "vocab.json", path / "merges.txt"
        try:
            if os.path.lexists(tokenizer_json):
                return cls(HFTokenizer.from_str(read_file(tokenizer_json, TOKENIZER_BYTES).decode()))
            if os.path.lexists(vocab) and os.path.lexists(merges):
                tok = HFTokenizer(
                    models.BPE.from_file(str(regular_file(vocab, TOKENIZER_BYTES)), str(regular_file(merges, TOKENIZER_BYTES)))
                )
                tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
                tok.decoder = decoders.ByteLevel()
                return cls(tok)
        except GlassboxError:
            raise
        except UnicodeDecodeError as exc:
            raise GlassboxError(f"Cannot read the tokenizer in {path}: not UTF-8 text ({exc.reason})") from None
        except Exception as exc:  # noqa: BLE001 (the library raises bare Exceptions on malformed files)
            raise GlassboxError(f"Cannot read the tokenizer in {path}: {exc}") from None
        raise GlassboxError(f"No tokenizer in {path}: expected tokenizer.json, or vocab.json and merges.txt")

    @classmethod
    def from_words(cls, words: list[str]) -> Tokenizer:
        """A word-level tokenizer of ``words``, whose ids are their places in the list."""
        tok = HFTokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.decoder = decoders.WordPiece()  # joins words with spaces
        return cls(tok)

    def cover(self, n_ids: int) -> None:
        """Label the ids from the tokenizer's size up to ``n_ids`` (a model's embedding may have
        more rows than its tokenizer has pieces: Pythia's 50,304 for 50,277) as ``<id N>``."""
        self.pieces = self.pieces[: self.vocab_size] + [f"<id {i}>" for i in range(self.vocab_size, n_ids)]

    def save(self, path: Path) -> None:
        self._tok.save(str(Path(path) / "tokenizer.json"))

    @property
    def nbytes(self) -> int:
        """An estimate of the memory it takes: about 500 bytes per token (the library's two maps
        and this object's ``vocab`` and ``pieces``; measured: 440–590 on word-level vocabularies
        of 50,000 to 1,000,000 words) and 3 per character of their text."""
        return 500 * len(self.pieces) + 3 * sum(map(len, self.pieces))

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def _piece(self, token_id: int) -> str:
        if self.word_level:  # an id the vocabulary skips (ids 0, 2, 3 in tokenizer.json) gets its label
            piece = self._tok.id_to_token(token_id)
            return f"<id {token_id}>" if piece is None else piece
        return self._tok.decode([token_id], skip_special_tokens=False)

    def readable(self, token_id: int) -> str:
        """The token's text for a label: its piece, except that a token holding part of a UTF-8
        character (its piece alone decodes to �) is written as its bytes, ``<0xE4>``, so that
        distinct fragments never share a label."""
        piece = self.pieces[token_id]
        if "\ufffd" not in piece or token_id >= self.vocab_size:
            return piece
        raw = self._tok.id_to_token(token_id) or ""
        if _BYTE_TOKEN.fullmatch(raw):  # SentencePiece's byte fallback names its byte tokens so
            return raw
        alphabet = _byte_level_alphabet()
        if raw and all(c in alphabet for c in raw):  # byte-level BPE: one character per byte
            text = bytes(alphabet[c] for c in raw).decode("utf-8", errors="surrogateescape")
            return "".join(f"<0x{ord(c) - 0xDC00:02X}>" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
        return piece

    def encode(self, text: str) -> list[int]:
        if not text or (self.word_level and not text.strip()):
            raise GlassboxError("The prompt is empty: type some text.")
        check_unicode(text)
        if self.word_level:
            words = [w for w, _ in self._tok.pre_tokenizer.pre_tokenize_str(text)]
            unknown = [w for w in words if w not in self.vocab]
            if unknown:
                raise GlassboxError(f"Unknown word(s) {some(unknown)}: this model knows only {self.known_words()}")
        # with the tokenizer's own special tokens (the BOS Llama and Gemma put first), as transformers does
        return self._tok.encode(text, add_special_tokens=True).ids

    @property
    def mask_token(self) -> str | None:
        """The special token a masked-LM encoder fills in ([MASK] for BERT, <mask> for RoBERTa),
        as tokenizer.json declares it; None when the tokenizer has none."""
        for token in self._tok.get_added_tokens_decoder().values():
            if token.special and token.content.strip("[]<>").lower() == "mask":
                return token.content
        return None

    def known_words(self) -> str:
        """A word-level vocabulary for a message or a help text, in id order: its first words
        and how many more."""
        return some(self.pieces[: self.vocab_size])

    def prefix(self) -> list[int]:
        """The special tokens put before any text (the BOS of Llama and Gemma); [] for most."""
        return [] if self.word_level else self._tok.encode("", add_special_tokens=True).ids

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``; an id past the tokenizer reads as its label ``<id N>``."""
        known, text = [], ""
        for i in ids:
            if i < self.vocab_size:
                known.append(i)
            else:
                text += self._tok.decode(known, skip_special_tokens=False) + self.pieces[i]
                known = []
        return text + self._tok.decode(known, skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        """The id of one token, given as its text (" mat", "mat" or the raw vocabulary entry)."""
        if not token:
            raise GlassboxError("The token is empty: give one token of this model's vocabulary")
        if token in self.vocab:
            return self.vocab[token]
        if token in self.pieces:
            return self.pieces.index(token)
        if self.word_level:
            raise GlassboxError(f"{shortened(token)!r} is not in this model's vocabulary {self.known_words()}")
        ids = self._tok.encode(token, add_special_tokens=False).ids
        if len(ids) == 1:
            return ids[0]
        pieces = [self.pieces[i] for i in ids]
        raise GlassboxError(f"{shortened(token)!r} is not one token in this vocabulary (it splits into {some(pieces, 10)})")

    def describe(self) -> dict:
        return {"kind": "word-level" if self.word_level else "byte-level BPE", "vocab_size": self.vocab_size}


_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


@cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the
    others (space, control bytes, ...) for the characters from U+0100 on, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {chr(b): b for b in kept} | {chr(256 + i): b for i, b in enumerate(moved)}
