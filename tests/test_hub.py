"""Hub ids: parsing, the hub cache laid out by the test itself (offline, as huggingface_hub lays
it out: models--owner--name/refs/<branch> holding a commit, snapshots/<commit>/<files>), the
server switch, the refusal of pickled weights, and ids past the tokenizer.

References: the files written into the cache are the ones loaded (same logits as loading the
directory itself, exactly: one code path after resolution); huggingface_hub's own
snapshot_download finds the snapshot (nothing here re-implements its lookup); messages are
checked by their words."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from model.engine import GlassboxError  # noqa: E402
from model.engine.sampling import Sampling, generate  # noqa: E402
from model.io import hub  # noqa: E402
from model.io.catalog import curated  # noqa: E402
from model.io.checkpoint import load, model_key  # noqa: E402
from tests.helpers import cli  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def neox_dir(tmp_path_factory):
    """A tiny GPT-NeoX with a 320-row embedding and a smaller tokenizer (as Pythia's)."""
    from tests.test_families import _tokenizer

    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=48, max_position_embeddings=64)
    path = tmp_path_factory.mktemp("neox")
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(str(path))
    _tokenizer(bos=False).save_pretrained(str(path))
    (path / "pytorch_model.bin").write_bytes(b"a pickle that must never be read")
    return path


@pytest.fixture
def hub_cache(tmp_path, neox_dir, monkeypatch):
    """HF_HOME with test-org/tiny-neox cached at COMMIT, main pointing at it; offline."""
    repo = tmp_path / "hf" / "hub" / "models--test-org--tiny-neox"
    shutil.copytree(neox_dir, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


def test_hub_ids_are_told_from_names_and_paths(tmp_path, monkeypatch):
    assert hub.parse_hub_id("EleutherAI/pythia-70m") == hub.HubId("EleutherAI/pythia-70m")
    assert hub.parse_hub_id("EleutherAI/pythia-70m@step3000") == hub.HubId("EleutherAI/pythia-70m", "step3000")
    assert str(hub.parse_hub_id("Qwen/Qwen2.5-0.5B@refs/pr/1")) == "Qwen/Qwen2.5-0.5B@refs/pr/1"
    for not_an_id in ("default", "gpt2", "/abs/path", "./rel/path", "a/b/c", "../x/y", "a/..", "a b/c", "", "a/b@"):
        assert hub.parse_hub_id(not_an_id) is None, not_an_id
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert hub.parse_hub_id("org/name") is None  # an existing directory of that shape is a directory
    assert model_key("EleutherAI/pythia-70m@step3000") == "EleutherAI/pythia-70m@step3000"  # no network, no cache


def test_a_cached_model_loads_by_id_offline(hub_cache, neox_dir):
    by_id = load("test-org/tiny-neox", dtype="float32", device="cpu")
    by_commit = load(f"test-org/tiny-neox@{COMMIT}", dtype="float32", device="cpu")
    by_dir = load(str(neox_dir), dtype="float32", device="cpu")
    assert by_id.path == hub_cache / "snapshots" / COMMIT and by_id.name == "test-org/tiny-neox"
    assert "hub: test-org/tiny-neox" in by_id.about["source"] and by_id.about["family"] == "GPT-NeoX"
    ids = torch.tensor([by_dir.encode("The cat sat on the mat.")])
    for loaded in (by_id, by_commit):
        assert torch.equal(loaded.model(ids).logits, by_dir.model(ids).logits)


def test_offline_and_switched_off_hub_are_clear_errors(hub_cache, monkeypatch):
    with pytest.raises(GlassboxError, match="not in the hub cache .* HF_HUB_OFFLINE"):
        load("test-org/not-cached")
    with pytest.raises(GlassboxError, match="not in the hub cache"):
        load("test-org/tiny-neox@step3000")  # a revision that is not cached
    monkeypatch.setenv("GLASSBOX_HUB", "0")
    with pytest.raises(GlassboxError, match="does not open models from the Hugging Face hub"):
        load("test-org/tiny-neox")


@pytest.fixture
def fake_hub(neox_dir, tmp_path, monkeypatch):
    """The hub's endpoints that huggingface_hub calls, served from folders on 127.0.0.1
    (HF_ENDPOINT): the model listing /api/models/<repo>/revision/<rev> and the files
    /<repo>/resolve/<commit>/<file>, with the headers it reads (X-Repo-Commit, ETag, length).
    Yields the list of paths requested."""
    import hashlib
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    pickles = tmp_path / "pickles"
    pickles.mkdir()
    (pickles / "config.json").write_text('{"model_type": "gpt2"}')
    (pickles / "pytorch_model.bin").write_bytes(b"a pickle")
    repos = {"test-org/tiny-neox": neox_dir, "old-org/pickles-only": pickles}
    requested = []

    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.reply(body=False)

        def do_GET(self):
            self.reply(body=True)

        def reply(self, body: bool):
            path = self.path.split("?")[0]
            requested.append(f"{self.command} {path}")
            parts = path.strip("/").split("/")
            if path.startswith("/api/models/") and "/".join(parts[2:4]) in repos:
                folder = repos["/".join(parts[2:4])]
                data = json.dumps({"id": "/".join(parts[2:4]), "sha": COMMIT, "siblings": [
                    {"rfilename": f.name, "size": f.stat().st_size} for f in sorted(folder.iterdir())]}).encode()
            elif len(parts) == 5 and parts[2] == "resolve" and "/".join(parts[:2]) in repos \
                    and (repos["/".join(parts[:2])] / parts[4]).is_file():
                data = (repos["/".join(parts[:2])] / parts[4]).read_bytes()
            else:
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound" if path.startswith("/api/") else "EntryNotFound")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.end_headers()
            if body:
                self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield requested
    server.shutdown()


def test_a_download_fetches_only_what_glassbox_reads_with_progress_then_loads_offline(fake_hub, neox_dir, monkeypatch):
    """huggingface_hub's real download path against the local endpoints: config, tokenizer and
    safetensors fetched into the cache (never the pickle beside them, nor anything else), the
    progress reaching the listed total, and the model then loading by id with HF_HUB_OFFLINE=1."""
    reports = []
    folder = hub.download(hub.HubId("test-org/tiny-neox"), lambda done, total: reports.append((done, total)))
    fetched = sorted(p.split("/")[-1] for p in fake_hub if p.startswith("GET /test-org/tiny-neox/resolve/"))
    assert fetched == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(f.name for f in folder.iterdir()) == fetched
    total = sum((neox_dir / f).stat().st_size for f in fetched)
    assert reports[-1] == (total, total) and all(d <= t == total for d, t in reports)
    assert [d for d, _ in reports] == sorted(d for d, _ in reports)  # never backwards
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    by_id, by_dir = load("test-org/tiny-neox", device="cpu"), load(str(neox_dir), device="cpu")
    ids = torch.tensor([by_dir.encode("The cat sat.")])
    assert torch.equal(by_id.model(ids).logits, by_dir.model(ids).logits)


def test_pickled_weights_and_unknown_repositories_are_refused_before_any_file_is_fetched(fake_hub):
    with pytest.raises(GlassboxError, match="no safetensors weights .*pytorch_model.bin.*never loads pickled"):
        hub.download(hub.HubId("old-org/pickles-only"))
    with pytest.raises(GlassboxError, match="No model 'nobody/nothing' on the Hugging Face hub"):
        hub.download(hub.HubId("nobody/nothing"))
    assert not [p for p in fake_hub if "/resolve/" in p]


def test_ids_past_the_tokenizer_are_labelled_and_can_be_generated(neox_dir):
    loaded = copy.deepcopy(load(str(neox_dir), dtype="float32", device="cpu"))
    n_pieces = loaded.tokenizer.vocab_size
    assert n_pieces < 320 and len(loaded.pieces) == 320 and loaded.pieces[319] == "<id 319>"
    with torch.no_grad():  # the final norm's output becomes all ones, and id 319 (a padding row) the certain next token
        loaded.model.ln_final.b.fill_(1.0)
        loaded.model.ln_final.w.zero_()
        loaded.model.unembed.W_U[:, 319] = 50.0
    tokens = [t.token for t in generate(loaded, "The cat", 3, Sampling(temperature=0))]
    assert tokens == ["<id 319>"] * 3
    assert loaded.tokenizer.decode(loaded.encode("The cat") + [319]) == "The cat<id 319>"


def test_cli_models_and_download(hub_cache):
    result = cli("models")
    assert result.returncode == 0, result.stderr
    assert "EleutherAI/pythia-70m" in result.stdout and "GPT-NeoX" in result.stdout
    result = cli("download", "test-org/tiny-neox")
    assert result.returncode == 0 and str(hub_cache / "snapshots" / COMMIT) in result.stdout
    result = cli("download", "not a hub id")
    assert result.returncode == 2 and result.stderr.startswith("error:") and len(result.stderr.splitlines()) == 1
    result = cli("generate", "--model", "test-org/tiny-neox", "--prompt", "The cat", "--max-new-tokens", "3")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("hub_id", [m.hub_id for m in curated()])
def test_each_curated_config_is_the_shape_transformers_builds(hub_id):
    """Reference: transformers' own config and model classes for the same config.json, built on
    the meta device (no memory): the same parameter count, windowed layers and head sizes."""
    from model.io.catalog import entry

    model = entry(hub_id)
    hf_config = transformers.AutoConfig.for_model(**model.config)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_config)
    assert model.parameters == sum(p.numel() for p in hf.parameters())
    cfg = model.model_config
    types = getattr(hf_config, "layer_types", None)
    windowed = [i for i in range(cfg.n_layers) if cfg.is_local(i)]
    if getattr(hf_config, "sliding_window", None) and types:
        assert windowed == [i for i, t in enumerate(types) if t == "sliding_attention"]
        assert cfg.window == hf_config.sliding_window
    elif hf_config.model_type == "gpt_neo":
        assert windowed == [i for i, t in enumerate(hf_config.attention_layers) if t == "local"]
    else:
        assert windowed == []
    assert cfg.d_head == (getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads)


def test_the_picker_opens_a_cached_hub_model_and_offers_a_download_for_the_others(hub_cache):
    """The app in AppTest, offline: a cached hub id loads (its Overview names the parallel block);
    a curated model not in the cache shows its size and a Download button, and nothing is fetched."""
    from tests.helpers import shown, start

    at = start("screens/explore.py", model="test-org/tiny-neox", prompt="The cat sat", view="Overview")
    assert not at.exception and not at.error
    assert at.selectbox(key="explore_model_source").value == "Any hub id"
    assert any("parallel block" in shown(m.value) for m in at.markdown)
    at = start("screens/playground.py", model="EleutherAI/pythia-70m")
    assert not at.exception and not at.error
    assert at.selectbox(key="model_source").value == "Curated hub models"
    assert any("not downloaded yet (0.14 GB)" in shown(i.value) for i in at.info)
    assert [b.label for b in at.button] == ["Download"]


def test_the_picker_downloads_with_a_progress_bar_then_opens_the_model(fake_hub):
    """The Download button in AppTest, against the local hub endpoints: the click fetches the
    model (nothing is fetched before it) and the page goes on to open it."""
    from tests.helpers import shown, start

    at = start("screens/explore.py", model="test-org/tiny-neox", prompt="The cat sat", view="Overview")
    assert any("not downloaded yet" in shown(i.value) for i in at.info) and fake_hub == []  # nothing before the click
    at.button(key="explore_model_download").click().run()
    assert not at.exception and not at.error
    assert [p.split("/")[-1] for p in fake_hub if p.startswith("GET /test-org")][-1] == "tokenizer_config.json"
    assert any("parallel block" in shown(m.value) for m in at.markdown)


def test_sharded_safetensors_load_like_one_file(neox_dir, tmp_path):
    """Reference: the same transformers model saved as one file and in shards with their index
    (save_pretrained's max_shard_size): identical logits."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(neox_dir))
    sharded = tmp_path / "sharded"
    model.save_pretrained(str(sharded), max_shard_size="100KB")
    shutil.copy(neox_dir / "tokenizer.json", sharded)
    assert (sharded / "model.safetensors.index.json").exists() and len(list(sharded.glob("model-*.safetensors"))) >= 2
    one, many = load(str(neox_dir), device="cpu"), load(str(sharded), device="cpu")
    ids = torch.tensor([one.encode("The cat sat on the mat.")])
    assert torch.equal(one.model(ids).logits, many.model(ids).logits)
