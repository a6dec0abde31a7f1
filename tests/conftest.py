"""Shared fixtures (helpers that are not fixtures are in helpers.py).

``random_model``: builds a float64 model of a config with random weights, norms and biases
away from 1 and 0 so that a mistake in any of them shows.
``gpt2_dir``: a small GPT-2 checkpoint in the Hugging Face hub's layout (config.json,
model.safetensors, vocab.json, merges.txt), written by transformers itself from a
byte-level BPE trained on the spot. LayerNorm weights and every bias are pushed away
from their 1/0 initialisation so that a mistake in any of them shows in the outputs."""

import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
import torch

CHECKOUT = {"glassbox": "model/api", "glassbox.model": "model", "glassbox.app": "app", "glassbox.assets": "assets"}


class Checkout:
    """Imports glassbox from this checkout where it is not installed (a machine that copies the
    tree and runs pytest, such as the GPU one): the names pyproject.toml's package-dir gives."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname not in CHECKOUT:
            return None
        folder = Path(__file__).parents[1] / CHECKOUT[fullname]
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


if importlib.util.find_spec("glassbox") is None:
    sys.meta_path.append(Checkout)

# One intra-op thread, here and in the processes the tests start (the app, the command line),
# unless OMP_NUM_THREADS says otherwise: the models here are small, and torch's threads wait
# spinning for a core that another process holds. On this 2-core machine with one core busy,
# a course test took 34 s with two threads and 5.5 s with one (idle: 5.3 s and 4.6 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

from tests.helpers import build_random_model  # noqa: E402  (glassbox importable first)


@pytest.fixture(scope="session")
def random_model():
    return build_random_model


@pytest.fixture(scope="session", autouse=True)
def app_lane_at_this_priority():
    """The app's long computations (training, a head catalog, path patching) run on its lane at
    nice 19, so that a server's page draws come first (model/serving/lane.py; the priority itself
    is tested on a Lane of its own, tests/test_compute_bounds.py). In a test process that runs
    pages in AppTest, nice 19 makes a page's training wait for anything else the machine runs
    (the other test worker): a 60-step MoE run on Train it live took minutes of waiting for
    seconds of work. So the app's lane in this process (``resources.long_lane``) keeps the
    process's priority; the app servers the browser tests start keep nice 19."""
    try:
        from glassbox.app import resources
    except ImportError:  # no app extra (a GPU machine may lack it): no app pages in this run
        yield
        return
    from glassbox.model.serving import lane

    def lane_at_this_priority(*args, **kwargs):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lane, "lowest_priority", lambda: None)  # the pool's thread initializer
            return lane.Lane(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resources, "Lane", lane_at_this_priority)
        yield


CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "She sells sea shells by the sea shore, and the shells she sells are surely seashells.",
    "In 1969, two astronauts walked on the Moon while a third orbited above them.",
    "How much wood would a woodchuck chuck if a woodchuck could chuck wood?",
    "The cat sat on the mat; the dog sat on the log.",
    "Rain fell softly over the quiet village as the lamps were lit one by one.",
    "Transformers read text as tokens, and every token becomes a vector.",
    "Attention lets each position look back at the positions before it.",
    "Never trust an atom: they make up everything!",
    "The library opens at nine o'clock and closes at half past five.",
    "Bread, cheese, apples and a flask of tea were packed for the long walk.",
    "Why do birds suddenly appear every time you are near?",
    "Mathematics is the language in which the universe was written.",
    'He said, "Don\'t forget the keys," but I forgot them anyway.',
    "Seven swans swam silently south across the still, grey lake.",
    "Gradients flow backwards through the network, layer after layer.",
    "Please send the report by Friday; the meeting moved to Monday morning.",
    "The old lighthouse keeper wrote letters that nobody ever read.",
    "Numbers like 3.14159 and 2.71828 appear again and again in nature.",
]


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp_path_factory.mktemp("gpt2")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 3, vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"])
    bpe.save_model(str(path))  # vocab.json + merges.txt

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=bpe.get_vocab_size(),
        n_positions=64,
        n_embd=64,
        n_layer=3,
        n_head=4,
        initializer_range=0.1,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    hf = GPT2LMHeadModel(config)
    assert hf.config._attn_implementation == "eager"
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                if name.endswith("weight"):
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):  # attention and MLP biases
                p.copy_(0.1 * torch.randn_like(p))
    hf.save_pretrained(str(path))  # config.json + model.safetensors
    assert (path / "model.safetensors").exists()
    return path


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium driven by Playwright, one for the whole run (one Playwright per process)."""
    from playwright.sync_api import sync_playwright

    from glassbox.app.bench.views import CHROMIUM_ARGS  # the flags Debian's chromium needs in a container
    from tests.helpers import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run tests/install.sh (it installs Debian's chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(chromium):
    """One tall page of the run's Chromium, shared by a browser test module's tests; its app runs
    counted for tests/browser.py's ``settled``."""
    from tests.browser import watch

    page = watch(chromium.new_page(viewport={"width": 1400, "height": 1600}))
    yield page
    page.close()


@pytest.fixture(scope="session")
def app_url():
    """One app server (started as `streamlit run app/main.py`) for every browser test of this
    process: its address. The README's own command is tested once (tests/test_browser.py)."""
    import sys

    from tests.helpers import APP, serving

    with serving([sys.executable, "-m", "streamlit", "run", APP]) as server:
        yield server.url


def pytest_collection_modifyitems(items):
    """The tests marked ``long`` first: a worker that drew one of them near the end would run on
    alone while the other waits (worksteal spreads the rest around them)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
