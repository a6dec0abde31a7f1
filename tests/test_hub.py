"""Hub ids: parsing, the hub cache laid out by the test itself (offline, as huggingface_hub lays
it out: models--owner--name/refs/<branch> holding a commit, snapshots/<commit>/<files>), the
server switch, the refusal of pickled weights, and ids past the tokenizer; downloads against a
fake hub on 127.0.0.1 (sizes checked before the first byte, timeouts, bounded retries, a page
that goes, partial files, garbled answers), and revisions checked against git's own rules.

References: the files written into the cache are the ones loaded (same logits as loading the
directory itself, exactly: one code path after resolution); huggingface_hub's own
snapshot_download finds the snapshot (nothing here re-implements its lookup); messages are
checked by their words."""

from __future__ import annotations

import copy
import json
import re
import shutil
import time
from collections import Counter

import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

from glassbox.model.engine import GlassboxError  # noqa: E402
from glassbox.model.engine.sampling import Sampling, generate  # noqa: E402
from glassbox.model.io import hub, hub_transfer  # noqa: E402
from glassbox.model.io.catalog import curated, entry  # noqa: E402
from glassbox.model.io.checkpoint import load, model_key  # noqa: E402
from tests.helpers import cli  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def neox_dir(tmp_path_factory):
    """A tiny GPT-NeoX with a 320-row embedding and a smaller tokenizer (as Pythia's)."""
    from tests.test_families import _tokenizer

    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=320,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
    )
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
    for not_an_id in ("default", "gpt2", "/abs/path", "./rel/path", "a/b/c", "../x/y", "a/..", "a b/c", ""):
        assert hub.parse_hub_id(not_an_id) is None, not_an_id
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert hub.parse_hub_id("org/name") is None  # an existing directory of that shape is a directory
    assert model_key("EleutherAI/pythia-70m@step3000") == "EleutherAI/pythia-70m@step3000"  # no network, no cache


def test_a_curated_model_is_cached_whatever_folders_the_working_directory_holds(hub_cache, tmp_path, monkeypatch):
    """A folder named like a curated hub id in the working directory makes that text a path to
    parse_hub_id (the test above); the catalog's entries stay hub ids (once an AttributeError on
    None). Reference: the same entries' answers from a directory without such a folder."""
    from glassbox.model.io.catalog import Curated

    monkeypatch.delenv("GLASSBOX_MODEL_DIRS", raising=False)
    present, absent = Curated("test-org/tiny-neox", "", {}), Curated("test-org/absent", "", {})
    assert present.cached and not absent.cached
    (tmp_path / "here" / "test-org" / "tiny-neox").mkdir(parents=True)
    (tmp_path / "here" / "test-org" / "absent").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert present.cached and not absent.cached


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


class FakeHub(list):
    """The requests the fake hub served ("GET /path"), and what a test changes of its answers:
    ``repos`` (name -> folder), ``answers`` (name -> the bytes its listing answers instead),
    ``sizes`` (name -> {file: size} the listing and the file's HEAD claim instead of the real
    one), ``misbehave`` ((name, file) -> "drop" (send ``part`` bytes of the file, then close
    the connection), "stall" (send ``part`` bytes, then wait), "trickle" (100 bytes every 50
    ms), "endless" (bytes without end, no Content-Length), "short" (half the file, its length
    said to be that half), "redirect" (a 302 to the same file under /cdn/), "resume" ("drop",
    then the rest for a Range request: 206), "gzip" (compressed though asked for identity) or
    "fail" (HTTP 503); (name,
    "listing") -> "hang" (the listing waits), "fail" (HTTP 500) or "endless"),
    ``cap`` (after that many GETs of a misbehaving file it is a 404: the old code, which retries
    for ever, ends too), and ``on_get`` (called with the path at each GET of a file)."""

    def __init__(self, repos):
        super().__init__()
        self.repos, self.answers, self.sizes, self.misbehave = repos, {}, {}, {}
        self.part, self.cap, self.on_get = 1000, 3, lambda path: None
        self.release = None  # set at the end: what waits stops waiting


@pytest.fixture
def fake_hub(neox_dir, tmp_path, monkeypatch):
    """The hub's endpoints that huggingface_hub calls, served from folders on 127.0.0.1
    (HF_ENDPOINT): the model listing /api/models/<repo>/revision/<rev> and the files
    /<repo>/resolve/<commit>/<file>, with the headers it reads (X-Repo-Commit, ETag, length).
    Yields a FakeHub: the list of paths requested, and the answers a test may change."""
    import hashlib
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    pickles = tmp_path / "pickles"
    pickles.mkdir()
    (pickles / "config.json").write_text('{"model_type": "gpt2"}')
    (pickles / "pytorch_model.bin").write_bytes(b"a pickle")
    hub_state = FakeHub({"test-org/tiny-neox": neox_dir, "old-org/pickles-only": pickles})
    hub_state.release = threading.Event()
    gets = Counter()

    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.reply(body=False)

        def do_GET(self):
            self.reply(body=True)

        def reply(self, body: bool):
            path = self.path.split("?")[0]
            hub_state.append(f"{self.command} {path}")
            if path.startswith("/cdn/"):  # where "redirect" sends a file: the hub's CDN
                return self.send(
                    hub_state.repos[path.split("/")[2].replace("--", "/")].joinpath(*path.split("/")[3:]).read_bytes(), body=body
                )
            parts = path.strip("/").split("/")
            listing = path.startswith("/api/models/")
            name = "/".join(parts[2:4] if listing else parts[:2])
            folder, claimed = hub_state.repos.get(name), hub_state.sizes.get(name, {})
            misbehaving = hub_state.misbehave.get((name, "listing" if listing else parts[-1]))
            if listing and (name in hub_state.answers or folder):
                if misbehaving == "hang":
                    hub_state.release.wait(15)
                    return  # the connection closes without an answer
                if misbehaving == "fail":
                    self.send_response(500)
                    self.end_headers()
                    return
                if misbehaving == "endless":  # a listing that never ends: '{"siblings": [{...}, {...}, …'
                    self.send_response(200)
                    self.end_headers()
                    self.close_connection = True
                    first = [b'{"id": "x", "siblings": [']
                    return self.write_until_released(lambda: first.pop() if first else b'{"rfilename": "a"},' * 1000, 0)
                return self.send(
                    hub_state.answers.get(name)
                    or json.dumps(
                        {
                            "id": name,
                            "sha": COMMIT,
                            "siblings": [
                                {"rfilename": f.relative_to(folder).as_posix(), "size": claimed.get(f.name, f.stat().st_size)}
                                for f in sorted(folder.rglob("*"))
                                if f.is_file()
                            ],
                        }
                    ).encode(),
                    body=body,
                )
            file = folder.joinpath(*parts[4:]) if len(parts) >= 5 and parts[2] == "resolve" and folder else None
            if file is None or not file.is_file():
                return self.not_found(listing)
            data = file.read_bytes()
            if not body:  # HEAD: the size the listing claims
                return self.send(data, length=claimed.get(file.name, len(data)), body=False)
            hub_state.on_get(path)
            gets[path] += 1
            if not misbehaving:
                return self.send(data, body=True)
            if gets[path] > hub_state.cap:
                return self.not_found(listing)
            self.close_connection = True
            if misbehaving == "fail":
                self.send_response(503)
                return self.end_headers()
            if misbehaving == "redirect":  # as the hub sends a weight file on to its CDN, with a body of its own
                self.send_response(302)
                self.send_header("Location", f"/cdn/{name.replace('/', '--')}/{'/'.join(parts[4:])}")
                self.send_header("Content-Length", "24")
                self.end_headers()
                return self.wfile.write(b"Found. Redirecting to it")
            if misbehaving == "resume" and gets[path] > 1:  # the resumed request gets the rest: 206
                start = int(re.match(r"bytes=(\d+)-", self.headers.get("Range", "bytes=0-"))[1])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                return self.wfile.write(data[start:])
            if misbehaving == "gzip":  # compressed though asked for identity
                import gzip

                packed = gzip.compress(data)
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(packed)))
                self.end_headers()
                return self.wfile.write(packed)
            if misbehaving == "short":  # a Content-Length of half the file, and that half: a whole answer, but short
                return self.send(data[: len(data) // 2], body=True)
            if misbehaving == "endless":  # no length: the body would end when the connection does
                self.send_response(200)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                return self.write_until_released(lambda: b"x" * 65536, 0)
            self.send(data, body=False)
            if misbehaving == "trickle":  # 100 bytes every 50 ms: 2 kB/s, each wait far within the timeout
                chunks = iter(data[i : i + 100] for i in range(0, len(data), 100))
                return self.write_until_released(lambda: next(chunks, b""), 0.05)
            self.wfile.write(data[: hub_state.part])
            self.wfile.flush()
            if misbehaving == "stall":
                hub_state.release.wait(15)

        def write_until_released(self, chunk, pause: float):
            """Write ``chunk()`` after ``chunk()`` until the client hangs up, the test ends, or 15 s."""
            ends = time.monotonic() + 15
            try:
                while not hub_state.release.is_set() and time.monotonic() < ends and (piece := chunk()):
                    self.wfile.write(piece)
                    self.wfile.flush()
                    hub_state.release.wait(pause)
            except OSError:  # the client closed the connection: what the test waits for
                pass

        def send(self, data: bytes, body: bool, length: int | None = None):
            self.send_response(200)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.end_headers()
            if body:
                self.wfile.write(data)

        def not_found(self, listing: bool):
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound" if listing else "EntryNotFound")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield hub_state
    hub_state.release.set()
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
    from huggingface_hub import constants  # plain HTTP, where the timeout, retry bound and stop apply: not hf_xet

    assert constants.HF_HUB_DISABLE_XET is True
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
    """In processes of their own: huggingface_hub reads its endpoint and cache folders when it
    is imported."""
    result = cli("models", process=True)
    assert result.returncode == 0, result.stderr
    assert "EleutherAI/pythia-70m" in result.stdout and "GPT-NeoX" in result.stdout
    result = cli("download", "test-org/tiny-neox", process=True)
    assert result.returncode == 0 and str(hub_cache / "snapshots" / COMMIT) in result.stdout
    result = cli("download", "not a hub id")
    assert result.returncode == 2 and result.stderr.startswith("error:") and len(result.stderr.splitlines()) == 1
    result = cli("generate", "--model", "test-org/tiny-neox", "--prompt", "The cat", "--max-new-tokens", "3", process=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("hub_id", [m.hub_id for m in curated()])
def test_each_curated_config_is_the_shape_transformers_builds(hub_id):
    """Reference: transformers' own config and model classes for the same config.json, built on
    the meta device (no memory): the same parameter count, windowed layers and head sizes. Each
    family's class is the family bench's (BertForMaskedLM, T5ForConditionalGeneration, else the
    causal LM)."""
    from glassbox.model.tools.family_bench import auto_class

    model = entry(hub_id)
    hf_config = transformers.AutoConfig.for_model(**model.config)
    with torch.device("meta"):
        hf = auto_class(hf_config.model_type).from_config(hf_config)
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
    assert cfg.d_head == (
        getattr(hf_config, "head_dim", None)
        or getattr(hf_config, "d_kv", None)
        or hf_config.hidden_size // hf_config.num_attention_heads
    )
    assert cfg.kind == {"bert": "encoder", "t5": "encoder-decoder"}.get(hf_config.model_type, "decoder")


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


# --- revisions: only names git allows (issue 32, item 2) ---------------------------------------

REVISIONS = [
    "main",
    "step3000",
    "refs/pr/1",
    "v1.0",
    "feature/x-y_z",
    COMMIT,
    "a@b",
    "-x",
    "@",
    "ü-branch",
    "",
    "/tmp/x/sub/dir",
    "/abs/path",
    "a//b",
    "a/",
    "a.",
    ".",
    "..",
    "../x",
    "a/../b",
    "a/./b",
    ".hidden",
    "a/.b",
    "x.lock",
    "a/b.lock/c",
    "a b",
    "a~1",
    "a^",
    "a:b",
    "a?",
    "a*",
    "a[",
    "a\\b",
    "a\tb",
    "a\nb",
    "a@{1}",
    "@{u}",
    "a\x7fb",
]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is the reference")
def test_a_revision_is_accepted_exactly_when_git_takes_it_as_a_branch_name():
    """Reference: git itself, `git check-ref-format refs/heads/<revision>`, for names git takes
    and names it refuses (a path, `..`, control characters, `.lock`, `@{`): parse_hub_id takes
    the first and refuses the second with a message, never None (which would make it a path)."""
    import subprocess

    for revision in REVISIONS:
        git_takes = subprocess.run(["git", "check-ref-format", f"refs/heads/{revision}"]).returncode == 0
        text = f"owner/name@{revision}"
        if git_takes:
            assert hub.parse_hub_id(text) == hub.HubId("owner/name", revision), revision
        else:
            with pytest.raises(GlassboxError, match="what follows the @ must be a branch, tag or commit name, and "):
                hub.parse_hub_id(text)
    assert not hub.parse_hub_id("owner/name@main").revision.startswith("/")


def test_a_revision_that_is_a_path_writes_and_reads_nothing(fake_hub, tmp_path):
    """Issue 32's repro, against the fake hub (which lists any revision): `owner/name@/abs/path`
    through load, model_key and the CLI's download is refused with one clear line, and the path
    is neither created nor read (reference: the file system, and the hub's request log)."""
    target = tmp_path / "x" / "sub" / "dir"
    fake_hub.repos["anyrev/tiny"] = fake_hub.repos["test-org/tiny-neox"]
    for attempt in (lambda: load(f"anyrev/tiny@{target}"), lambda: model_key(f"anyrev/tiny@{target}")):
        with pytest.raises(
            GlassboxError,
            match="^No model 'anyrev/tiny@/.*': what follows the @ must be a branch, "
            "tag or commit name, and it starts or ends with /",
        ):
            attempt()
    result = cli("download", f"anyrev/tiny@{target}", process=True)
    assert result.returncode == 2 and result.stderr.startswith("error: No model") and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x").exists() and fake_hub == []


def test_the_picker_says_why_a_revision_is_refused(fake_hub, tmp_path):
    """The app in AppTest with `?model=anyrev/tiny@/abs/path`: an error in the visitor's words
    (through plain), no Download button, nothing fetched or written (reference: the request log
    and the file system)."""
    from tests.helpers import shown, start

    target = tmp_path / "x" / "sub" / "dir"
    at = start("screens/explore.py", model=f"anyrev/tiny@{target}")
    assert not at.exception
    assert any("what follows the @ must be a branch, tag or commit name" in shown(e.value) for e in at.error)
    assert not [b for b in at.button if b.label == "Download"]
    assert not (tmp_path / "x").exists() and fake_hub == []


# --- the same answer whether or not a folder exists (issue 32, item 7) -------------------------


@pytest.mark.parametrize("hub_setting", ["0", "1"])
def test_on_a_restricted_server_owner_name_never_tells_which_folders_exist(tmp_path, monkeypatch, hub_setting):
    """Reference: the same text with and without a folder of that name in the working directory.
    With GLASSBOX_MODEL_DIRS set, `model/io` (a folder here) and `model/zzz` (none) are one kind
    of thing, a hub id, and get the same answer (the hub off, or offline and not cached)."""
    (tmp_path / "model" / "io").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GLASSBOX_MODEL_DIRS", "")
    monkeypatch.setenv("GLASSBOX_HUB", hub_setting)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.parse_hub_id("model/io") == hub.HubId("model/io")
    answers = set()
    for text in ("model/io", "model/zzz"):
        with pytest.raises(GlassboxError) as refused:
            load(text)
        answers.add(str(refused.value).replace(text, "<text>"))
    assert len(answers) == 1, answers


# --- downloads: sizes, timeouts, retries, cancelling, partial files (issue 32, items 5 and 7) --


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*\.\d+) GB", text)]


def test_weights_over_the_memory_limit_are_refused_before_the_first_byte(fake_hub, monkeypatch):
    """A repository whose listing claims a 60 GB model.safetensors (over huggingface_hub's 50 GB
    plain-download limit too), under GLASSBOX_MAX_MODEL_GB=2: refused naming the sizes
    (reference: the claimed bytes / 2**30, half of it the least it takes in memory, and the
    setting), and no file requested."""
    fake_hub.sizes["test-org/tiny-neox"] = {"model.safetensors": 60 * 2**30}
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "2")
    with pytest.raises(GlassboxError, match="GLASSBOX_MAX_MODEL_GB") as refused:
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert numbers(str(refused.value)) == pytest.approx([60.0, 30.0, 2.0], abs=0.05)
    assert not [p for p in fake_hub if "/resolve/" in p]


def test_a_download_bigger_than_the_free_disk_is_refused_before_the_first_byte(fake_hub, monkeypatch, tmp_path):
    """A listing claiming 1 PiB of weights, with the memory and download limits above it: refused
    naming the free disk of the hub cache and the 2 GB it keeps (reference: shutil.disk_usage of
    the folder it is made in)."""
    fake_hub.sizes["test-org/tiny-neox"] = {"model.safetensors": 2**50}
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", str(2**30))
    monkeypatch.setenv("GLASSBOX_MAX_DOWNLOAD_GB", str(2**30))
    with pytest.raises(
        GlassboxError, match="to download; the disk of this server's hub cache has .* free, and keeps 2.00 GB"
    ) as refused:
        hub.download(hub.HubId("test-org/tiny-neox"))
    wanted, free, kept = numbers(str(refused.value))
    assert wanted == pytest.approx(2**20, rel=1e-3)
    assert free == pytest.approx(shutil.disk_usage(tmp_path).free / 2**30, abs=1.0)
    assert not [p for p in fake_hub if "/resolve/" in p]


def test_a_file_over_huggingface_hubs_plain_download_limit_is_a_clean_message(fake_hub, monkeypatch):
    """A 51 GB weight file (the listing and its HEAD say so) on a server with the memory and the
    disk for it (disk_usage faked): huggingface_hub refuses plain downloads over 50 GB with a
    ValueError (MAX_HTTP_DOWNLOAD_SIZE); it comes out as a GlassboxError in words, not a crash."""
    import collections

    fake_hub.sizes["test-org/tiny-neox"] = {"model.safetensors": 51 * 10**9}
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "1000")
    monkeypatch.setenv("GLASSBOX_MAX_DOWNLOAD_GB", "1000")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**50, 0, 2**50))
    with pytest.raises(GlassboxError, match="Cannot fetch test-org/tiny-neox from the Hugging Face hub: .*too large"):
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert "GET /test-org/tiny-neox/resolve/" + COMMIT + "/model.safetensors" not in fake_hub


@pytest.mark.parametrize(
    "answer",
    [
        b"<html>a login page</html>",
        b"[]",
        b'{"siblings": 5}',
        json.dumps({"id": "x", "sha": COMMIT, "siblings": [{"rfilename": "model.safetensors", "size": "huge"}]}).encode(),
        json.dumps({"id": "x", "sha": COMMIT, "siblings": [{"rfilename": "model.safetensors", "size": -1}]}).encode(),
        json.dumps({"id": "x", "sha": COMMIT, "siblings": [{"rfilename": "model.safetensors", "size": 1e40}]}).encode(),
    ],
)
def test_a_garbled_listing_is_a_clean_message(fake_hub, answer):
    """Reference: what the hub's listing must be (JSON with a commit and files with byte counts);
    anything else is one GlassboxError line that does not quote HF_ENDPOINT, not a crash."""
    fake_hub.answers["test-org/tiny-neox"] = answer
    with pytest.raises(
        GlassboxError, match="^Cannot fetch test-org/tiny-neox from the Hugging Face hub: its answer is not a model listing$"
    ):
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert not [p for p in fake_hub if "/resolve/" in p]


def test_a_hung_listing_times_out_and_hub_errors_do_not_quote_the_endpoint(fake_hub, monkeypatch):
    """A listing that never answers, with GLASSBOX_HUB_TIMEOUT=0.5: a GlassboxError naming the
    setting and its value (the fake hub would hold it 15 s); a listing answering HTTP 500 is named
    by its status. Reference: the fake hub's address (HF_ENDPOINT), which no message contains."""
    import os

    monkeypatch.setenv("GLASSBOX_HUB_TIMEOUT", "0.5")
    fake_hub.misbehave[("test-org/tiny-neox", "listing")] = "hang"
    with pytest.raises(GlassboxError, match="did not answer within 0.5 s \\(GLASSBOX_HUB_TIMEOUT\\)") as hung:
        hub.download(hub.HubId("test-org/tiny-neox"))
    fake_hub.misbehave[("test-org/tiny-neox", "listing")] = "fail"
    with pytest.raises(
        GlassboxError, match="^Cannot fetch test-org/tiny-neox from the Hugging Face hub: it answered HTTP 500$"
    ) as failed:
        hub.download(hub.HubId("test-org/tiny-neox"))
    host = os.environ["HF_ENDPOINT"].split("//")[1]
    for message in (str(hung.value), str(failed.value)):
        assert host not in message and "127.0.0.1" not in message, message


@pytest.mark.parametrize("misbehaving", ["drop", "stall"])
def test_a_transfer_that_drops_or_stalls_is_retried_a_bounded_number_of_times(fake_hub, monkeypatch, misbehaving):
    """The weights' GET sends 1,000 bytes, then closes the connection ("drop": huggingface_hub
    resumes for ever while bytes keep coming) or sends nothing more ("stall"), every time. With
    RETRIES=1 and GLASSBOX_HUB_TIMEOUT=0.5: exactly 2 GETs of the file (reference: the fake
    hub's request log; it gives up with a 404 after 3), then one GlassboxError line naming the
    setting, and no partial file left in the cache."""
    monkeypatch.setattr(hub_transfer, "RETRIES", 1)
    monkeypatch.setenv("GLASSBOX_HUB_TIMEOUT", "0.5")
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = misbehaving
    with pytest.raises(GlassboxError, match="a request failed 2 times \\(each waits at most 0.5 s .*GLASSBOX_HUB_TIMEOUT"):
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert [p for p in fake_hub if p.startswith("GET") and p.endswith("/model.safetensors")] == [
        "GET /test-org/tiny-neox/resolve/main/model.safetensors"
    ] * 2
    assert not list(hub.cache_dir().rglob("*.incomplete"))


def test_a_download_stops_at_once_when_its_page_goes(fake_hub):
    """The tab closes while the weights are requested and the hub drops that connection before
    a byte: the page's progress callback raises Streamlit's StopException (what st calls raise
    in the script thread once its session asks the script to stop: ScriptRunner's
    _maybe_handle_execution_control_request). Reference: the fake hub's log: the weights were
    asked for once (no retry), nothing after; StopException reaches the caller unchanged; no
    partial file is left."""
    import threading

    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    gone = threading.Event()
    fake_hub.part = 0
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "drop"
    fake_hub.on_get = lambda path: gone.set() if path.endswith("/model.safetensors") else None

    def progress(done, total):
        if gone.is_set():
            raise StopException()

    with pytest.raises(StopException):
        hub.download(hub.HubId("test-org/tiny-neox"), progress)
    weights = [i for i, p in enumerate(fake_hub) if p.startswith("GET") and p.endswith("/model.safetensors")]
    assert len(weights) == 1 and weights[0] == len(fake_hub) - 1
    assert not list(hub.cache_dir().rglob("*.incomplete"))


def test_partial_files_a_killed_download_left_are_removed_by_the_next(fake_hub, neox_dir):
    """A killed process leaves `<etag>.<id>.incomplete` in the blobs folder under a name no later
    download takes up. Reference: the files' modification times: one untouched for an hour is
    deleted by the next download of the model, one written a moment ago (a live download's) is
    kept."""
    import os
    import time

    blobs = hub.cache_dir() / "models--test-org--tiny-neox" / "blobs"
    blobs.mkdir(parents=True)
    stale, live = blobs / "aaaa.0badf00d.incomplete", blobs / "bbbb.0c0ffee0.incomplete"
    for partial in (stale, live):
        partial.write_bytes(b"x" * 1000)
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    hub.download(hub.HubId("test-org/tiny-neox"))
    assert not stale.exists() and live.exists()


def test_a_bad_timeout_setting_is_a_clean_message(monkeypatch):
    """Reference: the setting's rule (a number of seconds above 0)."""
    for value in ("soon", "0", "-1", "nan", "inf"):
        monkeypatch.setenv("GLASSBOX_HUB_TIMEOUT", value)
        with pytest.raises(GlassboxError, match=f"GLASSBOX_HUB_TIMEOUT must be a number of seconds above 0, not '{value}'"):
            hub_transfer.timeout()
    monkeypatch.setenv("GLASSBOX_HUB_TIMEOUT", "2.5")
    assert hub_transfer.timeout() == 2.5
    monkeypatch.delenv("GLASSBOX_HUB_TIMEOUT")
    assert hub_transfer.timeout() == hub_transfer.DEFAULT_TIMEOUT == 20


def test_a_sparse_autoencoder_is_fetched_by_its_folder_alone_then_opens_offline(fake_hub, tmp_path, monkeypatch):
    """owner/repo/folder: only that folder's config and safetensors are fetched (not another
    folder's, nor a pickle beside them), into the hub cache, where the same id then opens with
    HF_HUB_OFFLINE=1. The SAE's numbers are tests/test_features.py's business."""
    from safetensors.torch import save_file

    from glassbox.model.io.sae import load_sae

    repo = tmp_path / "saes"
    for layer in (0, 1):
        folder = repo / f"blocks.{layer}.hook_resid_pre"
        folder.mkdir(parents=True)
        (folder / "cfg.json").write_text(
            json.dumps(
                {"architecture": "standard", "d_in": 8, "d_sae": 16, "metadata": {"hook_name": f"blocks.{layer}.hook_resid_pre"}}
            )
        )
        save_file(
            {"W_enc": torch.ones(8, 16), "b_enc": torch.zeros(16), "W_dec": torch.ones(16, 8), "b_dec": torch.zeros(8)},
            str(folder / "sae_weights.safetensors"),
        )
        (folder / "sparsity.pt").write_bytes(b"a pickle")
    fake_hub.repos["test-org/saes"] = repo
    sae = load_sae("test-org/saes/blocks.1.hook_resid_pre")
    assert (sae.reads, sae.d_sae, sae.name) == ("blocks.1.hook_resid_pre", 16, "test-org/saes/blocks.1.hook_resid_pre")
    fetched = sorted(p.split("/resolve/")[1].split("/", 1)[1] for p in fake_hub if p.startswith("GET /test-org/saes/"))
    assert fetched == ["blocks.1.hook_resid_pre/cfg.json", "blocks.1.hook_resid_pre/sae_weights.safetensors"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert load_sae("test-org/saes/blocks.1.hook_resid_pre").d_in == 8
    with pytest.raises(GlassboxError, match="not in the hub cache"):
        load_sae("test-org/saes/blocks.0.hook_resid_pre")


# --- Hardening II (issue 31): a download limit, a cache quota, and a hub that lies or crawls -----
# Each download below must end with one GlassboxError line within BOUND seconds (a behaviour
# bound, generous for a loaded 2-core machine: the fake hub would hold each one 15 s or more)
# and leave nothing in the cache that a later load trusts: no partial file, no complete snapshot.
BOUND = 12.0
FETCHED = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def ends_cleanly(match: str, repo: str = "test-org/tiny-neox") -> GlassboxError:
    started = time.monotonic()
    with pytest.raises(GlassboxError, match=f"^Cannot fetch {repo} from the Hugging Face hub: {match}") as failed:
        hub.download(hub.HubId(repo))
    assert time.monotonic() - started < BOUND
    assert "\n" not in str(failed.value) and "127.0.0.1" not in str(failed.value)
    assert not list(hub.cache_dir().rglob("*.incomplete"))
    assert hub.cached(hub.HubId(repo)) is None
    return failed.value


def test_a_download_over_the_download_limit_is_refused_before_the_first_byte(fake_hub, monkeypatch):
    """A listing claiming 3 GB of weights, memory for them, GLASSBOX_MAX_DOWNLOAD_GB=1: refused
    naming the sizes and the setting (reference: the claimed bytes / 2**30); no file requested.
    Unset, the limit is 20 GB."""
    fake_hub.sizes["test-org/tiny-neox"] = {"model.safetensors": 3 * 2**30}
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "100")
    monkeypatch.setenv("GLASSBOX_MAX_DOWNLOAD_GB", "1")
    with pytest.raises(GlassboxError, match=r"a download \(GLASSBOX_MAX_DOWNLOAD_GB\)$") as refused:
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert numbers(str(refused.value)) == pytest.approx([3.0, 1.0], abs=0.05)
    assert not [p for p in fake_hub if "/resolve/" in p]
    monkeypatch.delenv("GLASSBOX_MAX_DOWNLOAD_GB")
    assert hub.max_download() == 20 * 2**30


def test_the_hub_cache_quota_counts_what_is_there_once(fake_hub, neox_dir, monkeypatch):
    """A hub cache already holding 3 MiB (another model's blob), GLASSBOX_HUB_CACHE_GB one byte
    short of that plus this model's files: refused before the first file, naming the setting.
    Reference: the sizes of the files on disk (neox_dir's four that are fetched; the blob the
    test wrote). With room for it the download goes through, and the cache then counts each
    file once (a snapshot's links to the blobs are not files; huggingface_hub's CACHEDIR.TAG
    and refs/main are)."""
    other = hub.cache_dir() / "models--other-org--x" / "blobs"
    other.mkdir(parents=True)
    (other / "0123abcd").write_bytes(b"x" * 3 * 2**20)
    needed = 3 * 2**20 + sum((neox_dir / f).stat().st_size for f in FETCHED)
    monkeypatch.setenv("GLASSBOX_HUB_CACHE_GB", repr((needed - 1) / 2**30))
    with pytest.raises(GlassboxError, match=r"hub cache holds .* it may take \(GLASSBOX_HUB_CACHE_GB\)$"):
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert not [p for p in fake_hub if "/resolve/" in p]
    monkeypatch.setenv("GLASSBOX_HUB_CACHE_GB", repr((needed + 1) / 2**30))
    hub.download(hub.HubId("test-org/tiny-neox"))
    bookkeeping = (hub.cache_dir() / "CACHEDIR.TAG").stat().st_size + len(COMMIT)  # and refs/main
    assert hub.cache_bytes() == needed + bookkeeping


@pytest.mark.parametrize("room, admitted", [(0.5, False), (512, True)])
def test_a_download_in_flight_counts_against_the_quota_once(fake_hub, neox_dir, monkeypatch, room, admitted):
    """Two visitors: the first download stalls in its weights, its config (776 bytes: the files
    come in the listing's order) written. A second model of the same size asked for meanwhile
    is refused when the quota leaves room for half a model more than the two (the first's bytes
    count though the disk holds almost nothing yet), and admitted with 512 bytes to spare: what
    the first has written is counted once, not again in its reservation. Once the first has ended (released, it fails),
    the second goes through in any case. Reference: the quota and the files' sizes on disk."""
    import threading

    fake_hub.repos["test-org/tiny-neox-copy"] = neox_dir
    one = sum((neox_dir / f).stat().st_size for f in FETCHED)
    # more than the room to spare and huggingface_hub's own files (CACHEDIR.TAG: 191 bytes) together
    assert (neox_dir / "config.json").stat().st_size > 512 + 191
    quota = (1 + room) * one if room < 1 else 2 * one + room
    monkeypatch.setenv("GLASSBOX_HUB_CACHE_GB", repr(quota / 2**30))
    monkeypatch.setenv("GLASSBOX_HUB_TIMEOUT", "10")
    stalled = threading.Event()
    fake_hub.on_get = lambda path: stalled.set() if path.endswith("/model.safetensors") else None
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "stall"
    fake_hub.cap = 1
    first_failed = []

    def first():
        try:
            hub.download(hub.HubId("test-org/tiny-neox"))
        except GlassboxError as exc:
            first_failed.append(exc)

    worker = threading.Thread(target=first)
    worker.start()
    assert stalled.wait(BOUND)
    if admitted:
        hub.download(hub.HubId("test-org/tiny-neox-copy"))
    else:
        with pytest.raises(GlassboxError, match=r"GLASSBOX_HUB_CACHE_GB\)$"):
            hub.download(hub.HubId("test-org/tiny-neox-copy"))
    fake_hub.release.set()
    worker.join(BOUND)
    assert not worker.is_alive() and first_failed
    hub.download(hub.HubId("test-org/tiny-neox-copy"))


def test_a_file_longer_than_its_listing_is_stopped_there(fake_hub, neox_dir):
    """The weights' GET answers bytes without end and without a length (huggingface_hub alone
    would write them until the disk is full, then check the size): stopped once past the size
    the listing gives (reference: the file's size on disk), not retried."""
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "endless"
    size = (neox_dir / "model.safetensors").stat().st_size
    ends_cleanly(f"'model.safetensors' sent more than the {size:,} bytes its listing gives: stopped$")
    assert sum(p == "GET /test-org/tiny-neox/resolve/main/model.safetensors" for p in fake_hub) == 1


def test_a_file_behind_a_redirect_is_counted_as_the_file(fake_hub, monkeypatch, neox_dir):
    """The hub answers a weight file's GET with a 302 to its CDN. The file's bytes there are the
    file's (capped at its listed size, not at the 1,000 bytes an answer may have here), and the
    redirect's own body is not counted as the file's: the download completes, byte for byte
    (reference: the file on disk)."""
    monkeypatch.setattr(hub_transfer, "LISTING_BYTES", 1000)
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "redirect"
    fake_hub.cap = 10
    folder = hub.download(hub.HubId("test-org/tiny-neox"))
    assert "GET /cdn/test-org--tiny-neox/model.safetensors" in fake_hub
    assert (folder / "model.safetensors").read_bytes() == (neox_dir / "model.safetensors").read_bytes()


def test_a_resumed_transfer_counts_from_where_it_resumes(fake_hub, monkeypatch, neox_dir):
    """huggingface_hub writes a transfer in chunks (100 bytes here), so of the 1,050 bytes that
    came before the connection dropped it kept 1,000 and asks for the rest from there (Range);
    the fake hub answers 206. The bytes counted restart at the range's start, so the file is not
    taken for longer than its listing: it completes, byte for byte (reference: the file on disk)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 100)
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "resume"
    fake_hub.part = 1050
    folder = hub.download(hub.HubId("test-org/tiny-neox"))
    assert (folder / "model.safetensors").read_bytes() == (neox_dir / "model.safetensors").read_bytes()
    assert fake_hub.count("GET /test-org/tiny-neox/resolve/main/model.safetensors") == 2


def test_a_compressed_answer_is_refused(fake_hub):
    """Every request of a download asks for identity (the bytes counted are the bytes kept); a
    hub that gzips a file anyway is stopped before its body is read: unzipped, it could be any size."""
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "gzip"
    ends_cleanly("it sent compressed data, though asked for none: stopped$")


def test_an_endless_listing_is_stopped(fake_hub, monkeypatch):
    monkeypatch.setattr(hub_transfer, "LISTING_BYTES", 100_000)
    fake_hub.misbehave[("test-org/tiny-neox", "listing")] = "endless"
    ends_cleanly("an answer sent more than the 100,000 bytes allowed: stopped$")
    assert not [p for p in fake_hub if "/resolve/" in p]


def test_a_crawling_transfer_is_stopped_below_the_least_rate(fake_hub, monkeypatch):
    """100 bytes every 50 ms: each wait far within GLASSBOX_HUB_TIMEOUT=0.5, so only the rate
    (50 kB/s by default, over each 0.5 s) ends it; the rate it names is measured (about 2 kB/s)."""
    monkeypatch.setenv("GLASSBOX_HUB_TIMEOUT", "0.5")
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "trickle"
    failed = ends_cleanly(
        r"'model.safetensors' came at [\d.]+ kB/s over [\d.]+ s, below the 50 kB/s this server "
        r"waits for \(GLASSBOX_HUB_MIN_KB_PER_S\): stopped$"
    )
    assert 0.5 < float(re.search(r"came at ([\d.]+) kB/s", str(failed)).group(1)) < 10


def test_a_file_shorter_than_its_listing_is_not_kept(fake_hub, neox_dir):
    """The weights' GET says, and sends, half the file: huggingface_hub's size check against the
    listing's (its HEAD) fails, and that is one line naming both sizes (reference: the file on
    disk). (A length claimed but not sent is "drop" above: the transfer is resumed, boundedly.)"""
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "short"
    size = (neox_dir / "model.safetensors").stat().st_size
    ends_cleanly(f"a file came with {size // 2:,} bytes where the hub lists {size:,}$")


def test_a_file_answering_5xx_is_a_clean_message(fake_hub):
    fake_hub.misbehave[("test-org/tiny-neox", "model.safetensors")] = "fail"
    ends_cleanly("it answered HTTP 503$")


@pytest.mark.parametrize(
    "name, value",
    [
        ("GLASSBOX_MAX_DOWNLOAD_GB", "-1"),
        ("GLASSBOX_HUB_CACHE_GB", "inf"),
        ("GLASSBOX_MAX_DOWNLOAD_GB", "lots"),
        ("GLASSBOX_HUB_MIN_KB_PER_S", "nan"),
    ],
)
def test_a_bad_download_setting_is_a_clean_message(fake_hub, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(GlassboxError, match=f"^{name} must be a number of .* \\(0 or more\\), not '{value}'$"):
        hub.download(hub.HubId("test-org/tiny-neox"))
    assert not [p for p in fake_hub if "/resolve/" in p]


def test_the_picker_checks_a_curated_models_size_before_offering_its_download(hub_cache, monkeypatch):
    """Pythia-70m is 0.14 GB in the curated list (its parameters at float16). Under
    GLASSBOX_MAX_DOWNLOAD_GB=0.1 the page names the limit and offers no Download button; nothing
    is asked of the hub (offline here: it could not be). Reference: the catalog's size and the
    setting."""
    from tests.helpers import shown, start

    monkeypatch.setenv("GLASSBOX_MAX_DOWNLOAD_GB", "0.1")
    at = start("screens/playground.py", model="EleutherAI/pythia-70m")
    assert not at.exception
    assert [b.label for b in at.button] == []
    assert any("GLASSBOX_MAX_DOWNLOAD_GB" in shown(e.value) for e in at.error)
    assert numbers(shown(at.error[0].value)) == pytest.approx(
        [entry("EleutherAI/pythia-70m").download_bytes / 2**30, 0.1], abs=0.005
    )


def test_the_features_view_downloads_a_hub_sae_on_request(fake_hub, tmp_path):
    """An SAE typed as owner/repo/folder in the explorer's Features view, served by the fake hub:
    offered with a Download button (nothing fetched before the click), then fetched (its
    folder's two files alone) and opened: the view draws with no error."""
    from safetensors.torch import save_file

    from tests.helpers import start

    d_model = load("default").cfg.d_model
    folder = tmp_path / "saes" / "blocks.1.hook_resid_pre"
    folder.mkdir(parents=True)
    (folder / "cfg.json").write_text(
        json.dumps(
            {"architecture": "standard", "d_in": d_model, "d_sae": 16, "metadata": {"hook_name": "blocks.1.hook_resid_pre"}}
        )
    )
    torch.manual_seed(0)
    save_file(
        {
            "W_enc": torch.randn(d_model, 16),
            "b_enc": torch.zeros(16),
            "W_dec": torch.randn(16, d_model),
            "b_dec": torch.zeros(d_model),
        },
        str(folder / "sae_weights.safetensors"),
    )
    fake_hub.repos["test-org/saes"] = tmp_path / "saes"
    at = start("screens/explore.py", prompt="the cat sat on the", view="Features")
    at.selectbox(key="explore_sae_choice").set_value("another: a folder, or owner/repo/folder on the hub").run()
    at.text_input(key="explore_sae_source").input("test-org/saes/blocks.1.hook_resid_pre")
    next(b for b in at.button if b.label == "Open").click().run()
    assert not at.exception and not at.error and not [p for p in fake_hub if "/resolve/" in p]
    at.button(key="explore_sae_fetch_download").click().run()
    assert not at.exception and not at.error
    assert sorted(p.rsplit("/", 1)[1] for p in fake_hub if p.startswith("GET /test-org/saes/resolve/")) == [
        "cfg.json",
        "sae_weights.safetensors",
    ]
    assert at.selectbox(key="explore_sae_feature").options  # the view drew its features
