"""Tokens as drawn: byte fragments written as their bytes, spaces and newlines visible, labels
unique. Reference: Python's own UTF-8 encoding of the text the tokens came from."""

import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from glassbox.app.components.labels import token_labels
from glassbox.model.engine import GlassboxError
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.plot.labels import token_text
from glassbox.model.tools.family_bench import build_tokenizer
from tests.helpers import cli

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


def test_a_word_level_vocabulary_with_a_gap_in_its_ids_labels_the_missing_id():
    """A tokenizer.json may skip an id ({"a": 0, "b": 2}); the library's id_to_token gives None for
    it, which once became a piece and broke every len() of the pieces. Reference: the vocabulary
    as written, and cover()'s label for an id the tokenizer does not know."""
    tok = HFTokenizer(models.WordLevel({"a": 0, "b": 2, "<unk>": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = Tokenizer(tok)
    assert tok.id_to_token(1) is None and tokenizer.vocab_size == 3
    assert tokenizer.pieces == ["a", "<id 1>", "b"]
    assert tokenizer.nbytes > 0 and tokenizer.encode("b a") == [2, 0]


def test_spaces_and_newlines_are_visible_and_labels_unique():
    assert token_text(" went") == "␣went"
    assert token_text("\n\n") == "↵↵" and token_text("\t") == "⇥" and token_text("\x00") == "\\x00"
    assert token_text("") == "∅"
    assert token_labels([" a", "a", " a"], [3, 4, 5]) == ["␣a #3", "a", "␣a #5"]


# --- a huge word-level vocabulary: what it lists, what it costs -----------------------------------

N_WORDS = 200_000


@pytest.fixture(scope="module")
def huge_vocab(tmp_path_factory) -> Path:
    """A Glassbox model whose word-level tokenizer holds N_WORDS words (each a word of Markdown:
    the help text must show them as text too)."""
    from glassbox.model.engine import ModelConfig
    from glassbox.model.io.checkpoint import save
    from tests.helpers import build_random_model

    words = ["<unk>", "the", "cat"] + [f"w{i}*" for i in range(N_WORDS - 3)]
    cfg = ModelConfig(vocab_size=N_WORDS, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_ff=16)
    path = tmp_path_factory.mktemp("huge") / "model"
    save(path, build_random_model(cfg), Tokenizer.from_words(words), "float32", {"source": "test"})
    return path


def test_messages_list_the_first_words_of_a_huge_vocabulary(huge_vocab):
    """Reference: the vocabulary itself (its first 50 words in id order, and how many others);
    a message is one short line, not the whole vocabulary."""
    tokenizer = Tokenizer.from_dir(huge_vocab)
    first = repr(tokenizer.pieces[:50])
    more = f"… and {N_WORDS - 50:,} more"
    for attempt in (lambda: tokenizer.encode("the dog"), lambda: tokenizer.token_id("dog")):
        with pytest.raises(GlassboxError) as info:
            attempt()
        message = str(info.value)
        assert first in message and message.endswith(more) and len(message) < 1_000, message[:300]
    with pytest.raises(GlassboxError, match="The token is empty"):
        tokenizer.token_id("")


@pytest.mark.subprocess
def test_the_cli_error_for_an_unknown_word_is_one_short_line(huge_vocab, tmp_path):
    """Reference: the vocabulary's size; the error names the unknown word and how many more
    words there are, in one line (old code: the whole vocabulary, 2.4 MB here)."""
    run = cli("trace", "--model", str(huge_vocab), "--prompt", "the dog", "--npz", str(tmp_path / "x.npz"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("error: Unknown word(s) ['dog']") and f"… and {N_WORDS - 50:,} more" in line
    assert len(line) < 1_000


def test_the_prompt_help_lists_the_first_words_as_text(huge_vocab, monkeypatch):
    """The explorer's prompt help for a word-level model: the first 50 words, written as text
    (``tests.helpers.shown`` undoes ``plain``: the reference is the words themselves), and how
    many more; not the whole vocabulary."""
    from tests.helpers import shown, start

    monkeypatch.delenv("GLASSBOX_MODEL_DIRS", raising=False)
    at = start("screens/explore.py", model=str(huge_vocab), prompt="the cat", view="Overview")
    help_text = at.text_area(key="explore_prompt").help
    assert shown(help_text).startswith("Words this model knows: ['<unk>', 'the', 'cat', 'w0*', 'w1*'")
    assert shown(help_text).endswith(f"'w46*'] … and {N_WORDS - 50:,} more") and len(help_text) < 2_000
    assert "\\*" in help_text  # the words' Markdown is escaped: w0* is not the start of emphasis


RSS_PROBE = """
import sys
from glassbox.model.io.tokenizer import Tokenizer

def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS"))

before = rss()
tokenizer = Tokenizer.from_dir(sys.argv[1])
print(rss() - before, tokenizer.nbytes)
"""


@pytest.mark.subprocess
def test_the_tokenizers_memory_is_counted_in_the_model_cache(huge_vocab):
    """Reference: the growth of a fresh process's resident memory while it loads the tokenizer
    (the library's maps and Glassbox's lists): the estimate is within a factor of 2 of it, and
    the model cache counts it beside the weights."""
    import subprocess
    import sys

    from glassbox.model.serving import ModelCache
    from tests.helpers import ROOT

    run = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(huge_vocab)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    grown, estimate = map(int, run.stdout.split())
    assert grown / 2 < estimate < grown * 2, (grown, estimate)
    cache = ModelCache()
    loaded = cache.model(str(huge_vocab), device="cpu")
    assert loaded.nbytes == loaded.weight_bytes + loaded.tokenizer.nbytes == cache.nbytes()
    assert loaded.tokenizer.nbytes > 10 * loaded.weight_bytes  # here the tokenizer is most of it


PLOTLY_TAGS = {"a", "b", "i", "em", "span", "sub", "sup", "s", "u", "br"}  # plotly.js svg_text_utils' TAG_STYLES


@pytest.mark.parametrize(
    "piece", ["<a href='http://127.0.0.1:9/x'>click</a>", "<b>bold</b>", "&lt;a&gt;", "<br>", "<span style='color:red'>x</span>"]
)
def test_a_token_drawn_in_a_chart_is_no_plotly_markup(piece):
    r"""Reference: plotly.js's own patterns (svg_text_utils.js, as bundled with Streamlit): a tag
    is a piece matching ``<(\/?)([^ >]*)(\s+(.*))?>`` with a name in its TAG_STYLES, an entity
    ``&(#\d+|#x[\da-fA-F]+|[a-z]+);``. The drawn token holds neither, and reads as the token
    once the invisible word joiners are removed."""
    drawn = token_text(piece)
    assert drawn.replace("\u2060", "") == piece.replace(" ", "␣")
    names = [m.group(2).lower() for m in re.finditer(r"<(/?)([^ >]*)(\s+(.*))?>", drawn)]
    assert not PLOTLY_TAGS & set(names), names
    assert not re.search(r"&(#\d+|#x[\da-fA-F]+|[a-z]+);", drawn)
    # drawn twice (a view's drawn vocabulary, then a chart's token_labels), it is drawn once:
    # no escaped joiner ("<\u20600xFA>" on the Overview's chart before)
    assert token_text(drawn) == drawn and token_labels([drawn], [0]) == [drawn]
