"""Helpers shared by test files: a random model, the app run in-process by AppTest, and the app
served on a port of this machine for Chromium."""

import base64
import importlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from glassbox.model.engine import ModelConfig, Transformer

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app" / "main.py")
CHROMIUM = "/usr/bin/chromium"  # Debian's, installed by tests/install.sh; Playwright drives it
INSTALL = "./tests/install.sh"  # every package the tests need (requirements-dev.txt), Chromium and nginx


def package_version() -> str:
    """The version pyproject.toml gives the package: the one place it is written."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def in_ci() -> bool:
    """Whether this run is CI's (`CI=true bash .ci/run`, as CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require(module: str, package: str | None = None):
    """``module`` imported, for a test that needs it (a reference such as transformers): where it
    is not installed, the test is skipped here but fails under CI=true, naming the package and
    the command that installs it, so that a broken dev install cannot run green there. Works at a
    module's top (the whole file skipped or failed) as in a test. A module that is there but fails
    to import raises its own error everywhere."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name not in (module, module.split(".")[0]):
            raise  # the module is there; something it imports is not: its own error says what
    message = f"{module} is not installed (pip package {package or module.replace('_', '-')}): run {INSTALL}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


def healthy(url: str, seconds: float = 120) -> bool:
    """Whether the Streamlit server at ``url`` answers its health check within ``seconds``."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok":
                return True
        except OSError:
            time.sleep(0.5)
    return False


@contextmanager
def serving(command: list[str] | str, env: dict | None = None, seconds: float = 120) -> Iterator[subprocess.Popen]:
    """A Streamlit app started by ``command`` (an argv, or a shell line such as the README's) on a
    free port of 127.0.0.1, headless; yields the server, its address in ``server.url``. Stopped
    with its process group at the end; its output is then in ``server.log``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    shell = isinstance(command, str)
    command = command + " " + " ".join(options) if shell else [*command, *options]
    with tempfile.TemporaryFile("w+") as output:  # not a pipe: a chatty server would fill it and stall
        server = subprocess.Popen(
            command, shell=shell, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        server.url = f"http://127.0.0.1:{port}"
        try:
            if not healthy(server.url, seconds):
                raise AssertionError(f"the app did not start with {command!r}")
            yield server
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=60)
            output.seek(0)
            server.log = output.read()


def cli(*args: str, process: bool = False) -> subprocess.CompletedProcess:
    """`glassbox ARGS`: its exit status, stdout and stderr. Run in this process (``main`` with
    stdout and stderr captured, argparse's exits caught) unless ``process``: then `python -m
    glassbox ARGS` in a process of its own, as a user runs it (what tests of the environment a
    command reads at start need, and one test of the whole contract)."""
    if process:
        return subprocess.run([sys.executable, "-m", "glassbox", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    from glassbox.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's --help and usage errors
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess(["glassbox", *args], code, out.getvalue(), err.getvalue())


def build_random_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """float64, random weights; norms and biases pushed away from 1 and 0 so that mistakes show."""
    model = Transformer(cfg).init_weights(seed, std=0.3).double().eval()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if name.endswith(".w") or name.split(".")[-1].startswith("b"):
                p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


def start(page=None, **query):
    """The app in AppTest, on ``page`` (e.g. "screens/explore.py") with ``query`` in the URL."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception
    return at


def edit_weights(edit):
    """A way to break a model directory: ``edit`` changes its stored state dict in place."""

    def brk(d: Path):
        state = load_file(str(d / "model.safetensors"))
        edit(state)
        save_file(state, str(d / "model.safetensors"))

    return brk


def shown(markdown: str) -> str:
    """What a reader sees of Markdown that app.components.labels.plain wrote: CommonMark undoes a
    backslash before any ASCII punctuation, and the word joiners (U+2060) are invisible."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


def charts(at) -> list[dict]:
    """The page's plotly charts, as the browser receives them."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def played(at, step: str | None = None) -> dict:
    """What the worked example's page sends its in-page player (app/components/step_player.py):
    everything, or one step's part of it."""
    data = json.loads(at.get("bidi_component")[0].proto.json)
    return data if step is None else next(s for s in data["steps"] if s["key"] == step)


def press(at, label: str = "Generate", **sent_instead):
    """The playground's Generate (or Fill) button, drawn in the page with the sliders
    (app/components/sampling_controls.js): AppTest cannot click it, so this does what its click
    makes the server do: the settings the page shows become the session's, and the run that
    follows knows it was clicked (Chromium clicks the real one, tests/test_browser.py)."""
    sent = json.loads(at.get("bidi_component")[0].proto.json)
    assert sent["action"] == label, sent["action"]
    at.session_state["sampling_controls:clicked"] = dict(sent["settings"]) | sent_instead
    return at.run()


def attention_sent(at) -> dict:
    """What the explorer's Attention view sends its in-page heads (app/components/attention_head.py):
    the chosen block's part, with each head's scores, pattern, queries and keys decoded (float64 or
    float32, as sent; no scores or pattern where the page computes them), and beside it the choice, its pick number and every block sent."""
    (data,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "blocks" in json.loads(c.proto.json)]
    for block in data["blocks"]:
        n = len(block["labels"])
        for head in block["heads"]:
            for name, shape in (("scores", (n, n)), ("pattern", (n, n)), ("q", (n, -1)), ("k", (n, -1))):
                if name in head:  # a long prompt's scores and pattern are computed by the page
                    head[name] = np.frombuffer(base64.b64decode(head[name]), dtype=f"<f{block['bytes']}").reshape(shape)
    chosen = next(b for b in data["blocks"] if b["layer"] == data["chosen"]["block"])
    return {**chosen, "chosen": data["chosen"], "pick": data["pick"], "blocks": data["blocks"]}


def choose_in_page(at, block: int, head: int, query: int, key: int):
    """A block, head and positions chosen in the Attention view's page: AppTest cannot click the
    element, so this does what its message makes the server do (``attention_head``'s callback:
    the page's choice noted, ``chosen_in_page``), then reruns."""
    from glassbox.app.components.attention_head import PAGE_CHOICE

    at.session_state[PAGE_CHOICE] = {"block": block, "head": head, "query": query, "key": key}
    at.session_state["explore_block"], at.session_state["explore_head"] = block, head
    at.session_state["explore_pos"], at.session_state["explore_key_pos"] = query, key
    return at.run()


def decoded_step(step: dict) -> dict:
    """A Backward step as the page gets it (app/explore/backward_sent.py), each map's values decoded."""
    for grid in step["grids"]:
        flat = np.frombuffer(base64.b64decode(grid["values"]), dtype=f"<f{grid['bytes']}")
        grid["values"] = flat.reshape(len(grid["rows"]), len(grid["cols"]))
    return step


def backward_sent(at) -> dict:
    """What the explorer's Backward view sends its in-page steps (app/components/backward_player.py):
    the step titles, the step the element opens on (its maps decoded), its pick and the fetch address."""
    (data,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "titles" in json.loads(c.proto.json)]
    decoded_step(data["step"])
    return data


def fetch_step(at, index: int) -> dict | None:
    """What the Backward view's page fetches of step ``index`` (app/served.py's route, at the
    address it is sent), decoded; None where the route would answer 404."""
    from glassbox.app import served

    body = served.answer(backward_sent(at)["url"].removeprefix(served.PREFIX + "/"), index)
    return None if body is None else decoded_step(json.loads(json.dumps(body)))


def step_in_page(at, key: str):
    """A Backward step chosen in the page (◀ ▶ or its list): AppTest cannot click the element, so
    this does what its message makes the server do (``backward_player``'s callback), then reruns."""
    from glassbox.app.components.backward_player import PAGE_CHOICE

    at.session_state[PAGE_CHOICE] = {"step": backward_sent(at)["keys"].index(key)}
    at.session_state["explore_bstep"] = key
    return at.run()


PAGE_RUNNER = """
import * as page from "./component.mjs";
const revive = (v) => v && v.f64 ? Float64Array.from(v.f64) : Array.isArray(v) ? v.map(revive)
  : v && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, revive(x)])) : v;
const plain = (v) => ArrayBuffer.isView(v) ? Array.from(v) : Array.isArray(v) ? v.map(plain)
  : v && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)])) : v;
let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const { name, calls } = JSON.parse(input);
  process.stdout.write(JSON.stringify(calls.map((args) => plain(page[name](...revive(args))))));
});
"""


def page_functions(tmp_path: Path, name: str, calls: list, script: str = "attention_head.js") -> list:
    """An in-page component's exported function ``name`` called with each of ``calls`` (lists of
    JSON arguments; {"f64": [...]} becomes a Float64Array), run by Node (the one Playwright ships)
    on the script as the page gets it: app/components/page_kit.js first."""
    import playwright

    components = Path(__file__).parents[1] / "app" / "components"
    (tmp_path / "component.mjs").write_text((components / "page_kit.js").read_text() + "\n" + (components / script).read_text())
    (tmp_path / "run.mjs").write_text(PAGE_RUNNER)
    node = Path(playwright.__file__).parent / "driver" / "node"
    done = subprocess.run(
        [str(node), "run.mjs"],
        cwd=tmp_path,
        input=json.dumps({"name": name, "calls": calls}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def exact(grid: dict) -> np.ndarray:
    """A played grid's exact values (−∞ where the mask put it)."""
    return np.array([[float(v) for v in row] for row in grid["exact"]])


def values(data) -> np.ndarray:
    """An array as sent to the browser: a list, or plotly's typed array for numpy input
    ({"dtype": "f4", "bdata": base64, "shape": "rows, cols"})."""
    if isinstance(data, dict):
        flat = np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
        return flat.reshape(tuple(int(n) for n in data["shape"].split(","))) if "shape" in data else flat
    return np.array(data, dtype=np.float64)


def z(chart) -> np.ndarray:
    return values(chart["data"][0]["z"])


def wrong_answer(exercise) -> str:
    """An answer an exercise must refuse: another choice, or a number three tolerances off (1 off an exact one)."""
    if exercise.kind == "choice":
        return next(c for c in exercise.choices if c != exercise.answer)
    return repr(float(exercise.answer) + (3 * exercise.allowed if exercise.allowed else 1))


def check_against_references(exercises, references: dict, slug: str, seed: int, typed) -> None:
    """Each exercise's answer against ``references[(slug, key)] = (recompute from data, style)``
    (1e-9 relative), its typed answer (``typed(exercise, style)``) judged right, a wrong one wrong,
    and its question, solution and hint written."""
    assert {x.key for x in exercises} == {key for s, key in references if s == slug}
    for exercise in exercises:
        reference, style = references[(slug, exercise.key)]
        expected = reference(exercise.data)
        if exercise.kind == "choice":
            assert exercise.answer == expected and len(set(exercise.choices)) == len(exercise.choices) >= 2
        else:
            assert exercise.answer == pytest.approx(expected, rel=1e-9, abs=1e-12), (seed, exercise.key)
        given = typed(exercise, style)
        assert exercise.check(given).right, (seed, exercise.key, given, exercise.answer)
        assert not exercise.check(wrong_answer(exercise)).right, (seed, exercise.key, wrong_answer(exercise))
        for part in ("question", "solution", "hint"):
            assert getattr(exercise, part), (exercise.key, part)


def assert_registered_seq2seq_trace(model, source: list[int], target: list[int]):
    """Reference: the registry (names.py): an encoder-decoder trace holds exactly the registered
    names, in order, and each activation, gradient and parameter has the registered shape (the
    encoder's positions and the cross-attention's keys on the source axis). Returns the trace."""
    from glassbox.model.engine import names, run_seq2seq_trace

    cfg = model.cfg
    trace = run_seq2seq_trace(model, source, target, backward=True)
    assert list(trace.activations) == names.activation_names(cfg)
    for name, tensor in [*trace.activations.items(), *trace.grads.items()]:
        assert tuple(tensor.shape) == names.shape(name, cfg, len(target), len(source)), name
    params = list(model.named_parameters())
    assert [n for n, _ in params] == names.parameter_names(cfg)
    for name, p in params:
        assert tuple(p.shape) == names.shape(name, cfg, len(target), len(source)), name
    return trace


def hooked_transformer(model, cls=None):
    """A TransformerLens HookedTransformer holding ``model``'s weights (a GPT-2-style Glassbox
    model: the parameter names and shapes are TransformerLens's, see docs/transformerlens.md) and
    its tokenizer; an instance of ``cls``, a subclass of HookedTransformer, where given."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformers import PreTrainedTokenizerFast

    c = model.cfg
    assert (c.norm, c.activation, c.positional, c.tie_embeddings) == ("layernorm", "gelu_tanh", "table", True)
    config = HookedTransformerConfig(
        n_layers=c.n_layers,
        d_model=c.d_model,
        n_ctx=c.n_ctx,
        d_head=c.d_head,
        n_heads=c.n_heads,
        d_mlp=c.d_ff,
        d_vocab=c.vocab_size,
        act_fn="gelu_new",
        normalization_type="LN",
        eps=c.norm_eps,
        positional_embedding_type="standard",
        default_prepend_bos=False,
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(model.path / "tokenizer.json"))
    hooked = (cls or HookedTransformer)(config, tokenizer=tokenizer)
    weights = dict(model.module.state_dict())
    weights["unembed.W_U"] = weights["embed.W_E"].T  # tied
    weights["unembed.b_U"] = torch.zeros(c.vocab_size)
    missing, unexpected = hooked.load_state_dict(weights, strict=False)
    assert not unexpected and all(name.endswith((".mask", ".IGNORE")) for name in missing), (missing, unexpected)
    return hooked.eval()
