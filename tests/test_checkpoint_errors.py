"""Bad checkpoints, odd characters and over-long prompts give clear errors, never tracebacks.

Each broken checkpoint is a copy of the ``gpt2_dir`` fixture (conftest.py) with one thing
broken. Loading it must raise ``GlassboxError`` with a message naming the problem, and
``python -m model trace --model DIR ...`` must exit with status 2, print one line
``error: ...`` on stderr, no traceback, and write no output file.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from glassbox.model.engine import GlassboxError, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import cli, edit_weights

# --- ways to break a checkpoint -------------------------------------------------------------


def remove_dir(d: Path):
    shutil.rmtree(d)


def remove(*names):
    def brk(d: Path):
        for name in names:
            (d / name).unlink()

    return brk


def write(name: str, content: bytes):
    def brk(d: Path):
        (d / name).write_bytes(content)

    return brk


def edit_config(**changes):
    """Set config.json entries; None removes one."""

    def brk(d: Path):
        config = json.loads((d / "config.json").read_text())
        config.update(changes)
        config = {k: v for k, v in config.items() if v is not None}
        (d / "config.json").write_text(json.dumps(config))

    return brk


def truncate_weights(keep_fraction: float):
    def brk(d: Path):
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[: int(len(data) * keep_fraction)])

    return brk


def drop(key):
    return edit_weights(lambda state: state.pop(key))


def reshape(key, shape):
    return edit_weights(lambda state: state.__setitem__(key, torch.zeros(shape)))


# name -> (how to break the copy, a phrase the error message must contain)
CASES = {
    "missing directory": (remove_dir, "No model"),
    "no config.json": (remove("config.json"), "config.json is missing"),
    "config.json not JSON": (write("config.json", b'{"model_type": "gpt2", n_embd: 64'), "not valid JSON"),
    "config.json binary": (write("config.json", b"\xff\xfe\x00\x01garbage"), "not valid JSON"),
    "config.json a JSON list": (write("config.json", b"[1, 2, 3]"), "not a JSON object"),
    "unknown model_type": (edit_config(model_type="xlnet"), "model_type 'xlnet'"),
    "config lacks n_embd": (edit_config(n_embd=None), "n_embd"),
    "n_embd not a multiple of n_head": (edit_config(n_head=5), "d_model (64) must be a multiple of n_heads (5)"),
    "unsupported activation": (edit_config(activation_function="swish"), "activation 'swish'"),
    "no model.safetensors": (remove("model.safetensors"), "model.safetensors is missing"),
    "truncated header": (truncate_weights(0.0001), "not a readable safetensors file"),
    "truncated data": (truncate_weights(0.9), "not a readable safetensors file"),
    "empty model.safetensors": (write("model.safetensors", b""), "not a readable safetensors file"),
    "garbage model.safetensors": (write("model.safetensors", b"\x00not safetensors\xff" * 64), "not a readable safetensors file"),
    "missing tensor": (drop("transformer.h.1.mlp.c_fc.bias"), "lacks the weight 'h.1.mlp.c_fc.bias'"),
    "missing embedding": (drop("transformer.wte.weight"), "lacks the weight 'wte.weight'"),
    "more layers in config than weights": (edit_config(n_layer=4), "lacks the weight 'h.3."),
    "wrong shape: wte": (reshape("transformer.wte.weight", (400, 32)), "embed.W_E"),
    "wrong shape: c_attn.weight": (
        reshape("transformer.h.0.attn.c_attn.weight", (64, 128)),
        "h.0.attn.c_attn.weight has shape [64, 128], expected [64, 192]",
    ),
    "wrong shape: c_attn.bias": (
        reshape("transformer.h.2.attn.c_attn.bias", (200,)),
        "h.2.attn.c_attn.bias has shape [200], expected [192]",
    ),
    "wrong shape: attn.c_proj.weight, same size": (
        reshape("transformer.h.1.attn.c_proj.weight", (32, 128)),
        "h.1.attn.c_proj.weight has shape [32, 128], expected [64, 64]",
    ),
    "wrong shape: mlp.c_fc.weight transposed": (reshape("transformer.h.1.mlp.c_fc.weight", (256, 64)), "blocks.1.mlp.W_in"),
    "config vocab_size disagrees with weights": (edit_config(vocab_size=300), "embed.W_E"),
    "no tokenizer files": (remove("vocab.json", "merges.txt"), "No tokenizer"),
    "no merges.txt": (remove("merges.txt"), "No tokenizer"),
    "corrupt vocab.json": (write("vocab.json", b"{oops"), "Cannot read the tokenizer"),
}


# The CLI is run on one case of each kind (each run costs ~2 s of importing torch); every
# case is loaded in-process, and the CLI turns any GlassboxError into the same clean exit.
CLI_CASES = [
    "missing directory",
    "no config.json",
    "config.json not JSON",
    "unknown model_type",
    "no model.safetensors",
    "truncated data",
    "missing tensor",
    "wrong shape: c_attn.bias",
    "no tokenizer files",
]


@pytest.fixture(scope="module")
def broken(gpt2_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("broken")
    dirs = {}
    for i, (name, (brk, _)) in enumerate(CASES.items()):
        d = root / f"case{i}"
        shutil.copytree(gpt2_dir, d)
        brk(d)
        dirs[name] = d
    return dirs


@pytest.fixture(scope="module")
def cli_runs(broken, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """`glassbox trace` on every broken checkpoint (in this process: tests/helpers.py's cli)."""
    out = tmp_path_factory.mktemp("npz")
    runs = {}
    for name in CLI_CASES:
        npz = out / f"{broken[name].name}.npz"
        runs[name] = cli("trace", "--model", str(broken[name]), "--prompt", "hi", "--npz", str(npz)), npz
    return runs


def assert_clean_cli_error(run: subprocess.CompletedProcess, phrase: str):
    assert run.returncode == 2, f"exit status {run.returncode}, stderr: {run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert phrase in lines[0], f"{phrase!r} not in {lines[0]!r}"


@pytest.mark.subprocess
def test_the_unbroken_checkpoint_loads_and_traces(gpt2_dir, tmp_path):
    # The baseline the broken copies start from.
    loaded = load(str(gpt2_dir), device="cpu")  # no dtype: a GPT-2 checkpoint loads as float32
    assert loaded.model.embed.W_E.dtype == torch.float32
    assert loaded.cfg.n_ctx == 64 and loaded.tokenizer.vocab_size == loaded.cfg.vocab_size
    npz = tmp_path / "ok.npz"
    run = cli("trace", "--model", str(gpt2_dir), "--prompt", "hi 🤖 日本", "--backward", "--npz", str(npz))
    assert run.returncode == 0, run.stderr
    assert npz.exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("case", list(CASES))
def test_broken_checkpoint_is_a_clean_error(case, broken, cli_runs):
    phrase = CASES[case][1]
    with pytest.raises(GlassboxError) as info:
        load(str(broken[case]), dtype="float32", device="cpu")
    assert phrase in str(info.value), f"{phrase!r} not in {str(info.value)!r}"
    assert "\n" not in str(info.value)
    if case in cli_runs:
        run, npz = cli_runs[case]
        assert_clean_cli_error(run, phrase)
        assert not npz.exists()


# --- characters the tokenizer never saw -----------------------------------------------------


@pytest.fixture(scope="module")
def loaded(gpt2_dir):
    return load(str(gpt2_dir), dtype="float32", device="cpu")


@pytest.mark.parametrize("text", ["🤖", "語", "\x07", "\x00", "\u200b", "\U0010ffff"])
def test_unseen_character_falls_back_to_its_utf8_bytes(loaded, text):
    # The training corpus is plain English: each of these becomes one token per UTF-8 byte.
    ids = loaded.tokenizer.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    assert loaded.tokenizer.decode(ids) == text


@pytest.mark.parametrize(
    "text",
    [
        "emoji 🤖🧠👩‍👩‍👧 and flags 🇯🇵",
        "中文字符，日本語のかな、한국어",
        "control\x01chars\x1b[31m and\x7f DEL\tTab\r\nCRLF",
        "mixed: naïve café 💡 Ωmega ∑ x² ≠ y³",
    ],
)
def test_unseen_characters_round_trip_and_trace(loaded, text):
    ids = loaded.tokenizer.encode(text)
    assert all(0 <= i < loaded.cfg.vocab_size for i in ids)
    assert loaded.tokenizer.decode(ids) == text
    ids = ids[: loaded.cfg.n_ctx]
    trace = run_trace(loaded.model, ids)
    assert torch.isfinite(trace["hook_logits"]).all()


# --- prompts longer than the context ------------------------------------------------------------

LONG_PROMPT = "The cat sat on the mat and looked at the dog. " * 8


@pytest.mark.subprocess
def test_prompt_longer_than_the_context_is_an_error(loaded, tmp_path):
    ids = loaded.encode(LONG_PROMPT)
    n_ctx = loaded.cfg.n_ctx
    assert len(ids) > n_ctx == 64
    run_trace(loaded.model, ids[:n_ctx], backward=True)  # exactly the context is fine
    for too_long in (ids[: n_ctx + 1], ids):
        with pytest.raises(GlassboxError, match=rf"{len(too_long)} tokens; this model's context is 64 tokens"):
            run_trace(loaded.model, too_long)
        with pytest.raises(GlassboxError, match="context"):
            run_trace(loaded.model, too_long, backward=True)

    npz = tmp_path / "long.npz"
    run = cli("trace", "--model", str(loaded.path), "--prompt", LONG_PROMPT, "--npz", str(npz))
    assert_clean_cli_error(run, "context is 64 tokens")
    assert not npz.exists()


# --- side files: training.json, published.json ---------------------------------------------------
# A model folder is anyone's. Its side files are read by model/io/guard.py's read_file: a FIFO is
# refused without waiting for a writer, a symlink to /dev/zero is refused before a byte is read,
# a file over its limit is refused. Where a hang is the failure, the work runs in a daemon thread
# that the test waits on with a generous bound (a hung read would otherwise hang the suite).

HANG = 240  # seconds: far beyond any refusal on a loaded machine; only a hang reaches it


def finishes(work):
    """``work()``'s result, run in a daemon thread; fails the test where it never returns."""
    import threading

    result = {}

    def run():
        try:
            result["value"] = work()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), "it hung (a FIFO or a device read without the file checks)"
    if "error" in result:
        raise result["error"]
    return result["value"]


def fifo(path: Path):
    import os

    os.mkfifo(path)


def dev_zero(path: Path):
    path.symlink_to("/dev/zero")


def oversized(path: Path):
    from glassbox.model.io.guard import SIDE_FILE_BYTES

    path.write_text("{}" + " " * SIDE_FILE_BYTES)  # valid JSON, one object, over the limit


def not_a_curve(path: Path):
    path.write_text(json.dumps({"step": "many", "train_loss": [1.0]}))


TRAINING_CASES = {  # how training.json is replaced -> the words the playground's note must hold
    "a FIFO": (fifo, "is not a regular file"),
    "a symlink to /dev/zero": (dev_zero, "is not a regular file"),
    "over the limit": (oversized, "a training.json is at most 16,777,216"),
    "not a loss curve": (not_a_curve, "is not a loss curve"),
}


@pytest.fixture(scope="module")
def carded_model(tmp_path_factory) -> Path:
    """A copy of the bundled default model (its config.json has a model card, its folder a
    training.json), to break."""
    from glassbox.model.io.assets import asset

    path = tmp_path_factory.mktemp("carded") / "model"
    shutil.copytree(asset("default"), path)
    return path


@pytest.mark.parametrize("case", list(TRAINING_CASES))
def test_a_training_json_that_is_not_a_curve_file_is_a_note_on_the_card(case, carded_model, tmp_path, monkeypatch):
    """Reference: the unbroken copy's page shows the card with its loss curve; each broken
    training.json shows the same card with a note naming the problem, by its words, and no
    exception, and the page finishes (old code: a FIFO hung it, /dev/zero grew to gigabytes)."""
    from tests.helpers import shown, start

    monkeypatch.delenv("GLASSBOX_MODEL_DIRS", raising=False)
    at = start("screens/playground.py", model=str(carded_model))
    # the loss curve (the next-token distribution is drawn in the page: a components-v2 element)
    assert [e.label for e in at.expander][0].startswith("Model card") and len(at.get("plotly_chart")) == 1
    assert at.get("bidi_component")
    assert not at.warning  # the unbroken curve: drawn, no note

    model = tmp_path / "model"  # a folder of its own: the page caches each folder's curve
    shutil.copytree(carded_model, model)
    (model / "training.json").unlink()
    breaks, words = TRAINING_CASES[case]
    breaks(model / "training.json")
    at = finishes(lambda: start("screens/playground.py", model=str(model)))
    assert not at.exception
    notes = [shown(w.value) for w in at.warning]
    assert len(notes) == 1 and notes[0].startswith("No loss curve:") and words in notes[0], notes
    assert [e.label for e in at.expander][0].startswith("Model card")  # the rest of the card is still there


@pytest.mark.parametrize("breaks", [fifo, dev_zero, oversized], ids=["FIFO", "/dev/zero", "oversized"])
def test_published_json_is_read_through_the_file_checks(breaks, tmp_path, monkeypatch):
    """Reference: guard.read_file's refusal, by its words; the read returns (old code: a FIFO
    here hung the worked example's first page)."""
    from glassbox.model.worked_example import article

    path = tmp_path / "published.json"
    breaks(path)
    monkeypatch.setattr(article, "PUBLISHED", path)
    article.published.cache_clear()
    try:
        with pytest.raises(GlassboxError, match="is not a regular file|is at most 16,777,216"):
            finishes(article.published)
    finally:
        article.published.cache_clear()
