"""The committed default model (assets/default) and `python -m model generate`."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from glassbox.model.data.stories import corpus
from glassbox.model.engine.sampling import Sampling, generate
from glassbox.model.io.checkpoint import load
from tests.helpers import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def default():
    return load("default")


def continuation(loaded, prompt, n, sampling=Sampling(temperature=0)) -> str:
    return loaded.tokenizer.decode([t.token_id for t in generate(loaded, prompt, n, sampling)])


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+", text)


def test_greedy_continues_the_worked_example_with_mat(default):
    assert continuation(default, "the cat sat on the", 1) == " mat"


def test_samples_at_temperature_1_use_the_corpus_words_in_the_corpus_order(default):
    """Reference: an independent draw of the grammar (seed 123). A sample reads as the
    corpus's simple English if nearly all its words and word pairs occur there."""
    reference = " ".join(corpus(3000, seed=123))
    vocabulary = set(words(reference))
    ref_words = words(reference)
    pairs = set(zip(ref_words, ref_words[1:]))
    sample_words, sample_pairs = [], []
    for seed in range(5):
        text = continuation(default, "Once upon a time,", 60, Sampling(temperature=1.0, seed=seed))
        w = words(text.split("<|endoftext|>")[0])
        sample_words += w
        sample_pairs += list(zip(w, w[1:]))
    assert len(sample_words) > 100
    assert sum(w in vocabulary for w in sample_words) / len(sample_words) >= 0.97
    assert sum(p in pairs for p in sample_pairs) / len(sample_pairs) >= 0.9


@pytest.mark.parametrize(
    "prompt,expected",
    [
        ('Zoe met Ben at the park. "Hello, Ben!" said Zoe. "Hello,', " Zoe"),  # a name from earlier, copied
        ('Max met Emma at the lake. "Hello, Emma!" said Max. "Hello,', " Max"),
        ('Leo had a red kite. Leo gave the kite to Anna. Anna said, "Thank you,', " Leo"),
        ("Mia had two cats. The cats", " were"),  # agreement with the number
        ("Mia had a cat. The cat", " was"),
    ],
)
def test_it_copies_names_and_agrees_in_number(default, prompt, expected):
    assert continuation(default, prompt, 1) == expected


@pytest.mark.subprocess
def test_cli_generate_json_contract():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "glassbox",
            "generate",
            "--model",
            "default",
            "--prompt",
            "Tom had a",
            "--max-new-tokens",
            "6",
            "--temperature",
            "0.8",
            "--top-k",
            "20",
            "--top-p",
            "0.9",
            "--seed",
            "5",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["prompt"] == "Tom had a" and len(out["steps"]) == 6
    assert out["completion"] == "".join(s["token"] for s in out["steps"])
    for step in out["steps"]:
        ps = [t["p"] for t in step["top"]]
        assert ps == sorted(ps, reverse=True) and 0 < step["p"] <= 1
        assert step["token"] in [t["token"] for t in step["top"]] or step["p"] <= ps[-1]
        assert len(step["top"]) <= 20  # after top-k
    again = cli(*run.args[3:])  # the same command again, in this process
    assert json.loads(again.stdout) == out  # the seed reproduces it


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--temperature", "-1"], "Temperature"),
        (["--top-p", "0"], "top-p"),
        (["--top-k", "0"], "top-k"),
        (["--prompt", ""], "empty"),
        (["--max-new-tokens", "500"], "context"),
    ],
)
def test_cli_generate_bad_values_exit_2_with_one_line(flags, message):
    """In this process (``cli``): a process of its own adds nothing to what is checked here; one
    bad input's whole contract in its own process is tests/test_cli.py's."""
    args = ["--prompt", "Tom had a", *flags] if "--prompt" not in flags else flags
    run = cli("generate", *args)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def trained_twice(tmp_path_factory) -> list[tuple[Path, subprocess.CompletedProcess]]:
    """Two runs of the real command, the same arguments (2 steps on 300 stories), each into a
    temporary directory of its own: their folders and what they printed."""
    runs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp("train-default-" + name)
        runs.append(
            (
                out,
                subprocess.run(
                    [sys.executable, "-m", "glassbox", "train-default", "--out", str(out), "--steps", "2", "--stories", "300"],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    timeout=300,
                ),
            )
        )
    return runs


@pytest.mark.subprocess
def test_train_default_writes_a_loadable_model_with_its_card(trained_twice):
    """A short run of the real command into a temporary directory."""
    tmp_path, run = trained_twice[0]
    assert run.returncode == 0, run.stderr
    assert "step 2/2" in run.stderr  # the progress bar
    loaded = load(str(tmp_path))
    card = loaded.about["card"]
    assert card["corpus"]["stories"] == 300 and card["training"]["steps"] == 2
    assert card["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    assert len(json.loads((tmp_path / "training.json").read_text())["train_loss"]) == 2
    assert [s["prompt"] for s in loaded.about["samples"]][0] == "the cat sat on the"
    assert loaded.encode("Any text at all: ünïcödé, 42!")  # byte-level BPE: everything tokenizes


@pytest.mark.subprocess
def test_train_default_is_reproducible(trained_twice):
    """Two runs of the same command give the same tokenizer and bit-identical weights."""
    outputs = []
    for out, done in trained_twice:
        assert done.returncode == 0, done.stderr
        outputs.append(((out / "model.safetensors").read_bytes(), (out / "tokenizer.json").read_bytes()))
    assert outputs[0] == outputs[1]
