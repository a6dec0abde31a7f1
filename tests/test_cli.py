"""The CLI contract: `glassbox trace|hooks|patch|attribute|dla`, and clean errors. The commands
run in this process (tests/helpers.py's cli: main() with its output captured), but one: the
whole contract in a process of its own, as a user meets it."""

import json

import numpy as np
import pytest

from tests.helpers import cli


def test_trace_writes_every_tensor_and_gradient(tmp_path):
    out = tmp_path / "t.npz"
    run = cli("trace", "--model", "worked-example", "--prompt", "the cat sat on the", "--backward", "--npz", str(out))
    assert run.returncode == 0, run.stderr
    data = np.load(out)
    assert data["tokens"].tolist() == [0, 1, 2, 3, 0]
    for name in [
        "hook_embed",
        "hook_pos_embed",
        "blocks.1.attn.hook_pattern",
        "blocks.0.ln1.hook_mean",
        "ln_final.hook_normalized",
        "hook_logits",
        "hook_probs",
        "hook_loss",
    ]:
        assert name in data, name
    assert data["blocks.0.attn.hook_pattern"].shape == (2, 5, 5)
    assert "grad:blocks.0.hook_resid_pre" in data and "grad:embed.W_E" in data
    assert "grad:hook_probs" not in data

    forward_only = tmp_path / "f.npz"
    assert cli("trace", "--model", "worked-example", "--prompt", "the cat", "--npz", str(forward_only)).returncode == 0
    assert not any(k.startswith("grad:") for k in np.load(forward_only))


def test_trace_with_target_and_name_filter(tmp_path):
    out = tmp_path / "t.npz"
    run = cli(
        "trace",
        "--model",
        "worked-example",
        "--prompt",
        "the cat sat on the",
        "--target",
        "mat",
        "--names",
        "*hook_pattern",
        "hook_probs",
        "--npz",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    data = np.load(out)
    assert sorted(k for k in data if not k.startswith("grad:")) == [
        "blocks.0.attn.hook_pattern",
        "blocks.1.attn.hook_pattern",
        "hook_probs",
        "tokens",
    ]
    # the printed loss is -log p(mat) at the last position
    loss = float(run.stdout.split("loss")[1].split()[0])
    assert loss == pytest.approx(-np.log(data["hook_probs"][4, 5]), abs=1e-6)


def test_hooks_lists_names_with_shapes():
    run = cli("hooks", "--model", "worked-example")
    assert run.returncode == 0, run.stderr
    assert "blocks.1.attn.hook_scores_masked" in run.stdout and "[2, 5, 5]" in run.stdout
    assert "blocks.0.mlp.W_in" in run.stdout and "[4, 8]" in run.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", ""], "empty"),
        (["--prompt", "the cow sat"], "Unknown word"),
        (["--prompt", "the cat sat on the mat"], "context"),
        (["--prompt", "the cat", "--target", "cow"], "not"),
        (["--prompt", "the cat", "--position", "0"], "--target"),
        (["--prompt", "the cat", "--target", "mat", "--position", "7"], "outside"),
        (["--prompt", "the", "--backward"], "one-token prompt"),
        (["--model", "no-such-model", "--prompt", "x"], "No model"),
    ],
)
def test_bad_input_is_a_clean_error(tmp_path, args, message):
    model = [] if "--model" in args else ["--model", "worked-example"]
    run = cli("trace", *model, *args, "--npz", str(tmp_path / "x.npz"))
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.subprocess
def test_a_bad_input_in_a_process_of_its_own_is_one_line_and_status_2(tmp_path):
    """What the in-process tests stand for: the process's own exit status and stderr."""
    run = cli("trace", "--model", "worked-example", "--prompt", "the cow sat", "--npz", str(tmp_path / "x.npz"), process=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("error: ") and "Unknown word" in run.stderr and len(run.stderr.splitlines()) == 1


# The "ask why" commands on the default model. Reference for every logit: run_trace's hook_logits,
# computed here in-process (float32; the CLI prints what its own process computed: ≤1e-4).
CLEAN, CORRUPT = "Zoe had a frog. Zoe loved the", "Zoe had a boat. Zoe loved the"


def logits_of(prompt):
    from glassbox.model.engine import run_trace
    from glassbox.model.io.checkpoint import load

    loaded = load("default")
    return loaded, run_trace(loaded.model, loaded.encode(prompt), names=["hook_logits"])["hook_logits"][-1]


@pytest.mark.parametrize("site, width", [("resid_pre", 8), ("attn_out", None), ("mlp_out", None), ("head", 4)])
def test_patch_json_contract(site, width):
    run = cli("patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", " frog", "--wrong", " boat", "--site", site, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    loaded, clean = logits_of(CLEAN)
    _, corrupt = logits_of(CORRUPT)
    frog, boat = loaded.tokenizer.token_id(" frog"), loaded.tokenizer.token_id(" boat")
    assert out["metric_clean"] == pytest.approx(float(clean[frog] - clean[boat]), abs=1e-4)
    assert out["metric_corrupt"] == pytest.approx(float(corrupt[frog] - corrupt[boat]), abs=1e-4)
    assert len(out["results"]) == loaded.cfg.n_layers * (width or 1)
    key = {"resid_pre": "position", "head": "head"}.get(site)
    assert all(set(r) == {"block", "metric"} | ({key} if key else set()) for r in out["results"])
    estimates = out["attribution_patching"]
    assert len(estimates["estimates"]) == len(out["results"]) and estimates["largest_difference"] >= 0
    assert estimates["correlation"] is None or -1 <= estimates["correlation"] <= 1
    if site == "resid_pre":  # block 0 at the one differing position is the clean run itself
        (first,) = [r for r in out["results"] if r["block"] == 0 and r["position"] == 3]
        assert first["metric"] == pytest.approx(out["metric_clean"], abs=1e-4)


def test_dla_json_sums_to_the_logit():
    run = cli("dla", "--prompt", CLEAN, "--token", " frog", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    loaded, logits = logits_of(CLEAN)
    assert out["logit"] == pytest.approx(float(logits[loaded.tokenizer.token_id(" frog")]), abs=1e-4)
    assert sum(c["value"] for c in out["components"]) == pytest.approx(out["logit"], abs=1e-4)
    assert {"hook_embed", "hook_pos_embed", "blocks.0.attn.hook_result[0]", "ln_final.b"} <= {
        c["name"] for c in out["components"]
    }


@pytest.mark.parametrize("method", ["saliency", "input_x_gradient", "integrated_gradients"])
def test_attribute_json_contract(method):
    run = cli("attribute", "--prompt", CLEAN, "--target", " frog", "--method", method, "--steps", "64", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    loaded, logits = logits_of(CLEAN)
    assert out["tokens"] == [loaded.tokenizer.pieces[t] for t in loaded.encode(CLEAN)] and len(out["scores"]) == 8
    assert out["target_logit"] == pytest.approx(float(logits[loaded.tokenizer.token_id(" frog")]), abs=1e-4)
    if method == "integrated_gradients":
        gap = out["target_logit"] - out["baseline_logit"]
        assert out["completeness_error"] == pytest.approx(abs(sum(out["scores"]) - gap), abs=1e-5)
        assert out["completeness_error"] < 0.01 * abs(gap)


@pytest.mark.parametrize(
    "command",
    [
        ["patch", "--clean", "Zoe had a frog", "--corrupt", CORRUPT, "--answer", " frog", "--wrong", " boat"],
        ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "zzzq", "--wrong", " boat"],
        ["dla", "--prompt", CLEAN, "--token", " frog", "--position", "40"],
        ["attribute", "--prompt", CLEAN, "--target", " frog", "--method", "integrated_gradients", "--steps", "0"],
    ],
)
def test_ask_why_commands_fail_in_one_line(command):
    run = cli(*command)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_ask_why_on_an_attention_only_micro_model():
    """micro-attention-only: the logit split into its parts adds up to run_trace's logit with no MLP
    among them (in-process reference, float32: ≤1e-4); patching an MLP it lacks fails in one line."""
    from glassbox.model.analysis.architecture import NO_MLP
    from glassbox.model.engine import run_trace
    from glassbox.model.io.checkpoint import load

    run = cli("dla", "--model", "micro-attention-only", "--prompt", "the cat sat on the", "--token", " mat", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    loaded = load("micro-attention-only")
    logits = run_trace(loaded.model, loaded.encode("the cat sat on the"), names=["hook_logits"])["hook_logits"][-1]
    assert out["logit"] == pytest.approx(float(logits[loaded.tokenizer.token_id(" mat")]), abs=1e-4)
    assert sum(c["value"] for c in out["components"]) == pytest.approx(out["logit"], abs=1e-4)
    names = {c["name"] for c in out["components"]}
    assert {"hook_embed", "blocks.0.attn.hook_result[3]"} <= names and not any("mlp" in n for n in names)
    run = cli(
        "patch",
        "--model",
        "micro-attention-only",
        "--clean",
        "the cat sat on the",
        "--corrupt",
        "the dog sat on the",
        "--answer",
        " mat",
        "--wrong",
        " bed",
        "--site",
        "mlp_out",
    )
    assert run.returncode == 2 and run.stderr.strip() == f"error: {NO_MLP}"


def test_the_ask_why_choices_are_the_analyses_own():
    """The CLI writes the sites and methods out (torch is not imported before a command runs)."""
    from glassbox.cli import parser
    from glassbox.model.analysis.attribution import METHODS
    from glassbox.model.analysis.patching import SITES

    choices = {a.dest: a.choices for p in parser()._subparsers._group_actions[0].choices.values() for a in p._actions}
    assert tuple(choices["site"]) == SITES and tuple(choices["method"]) == METHODS


# --- the command line's layout: a module per command -----------------------------------------------


def test_every_command_module_registers_its_own_command_and_help_lists_them_all():
    """Reference: the modules in model/api/cli/ (pkgutil, computed: not a typed list). Each one but
    common.py adds exactly one subparser, named after its file (train_micro.py: train-micro), run
    by its own run(); `glassbox --help` lists exactly those commands, so a new module left out of
    COMMANDS fails here."""
    import argparse
    import importlib
    import pkgutil
    import re

    import glassbox.cli

    modules = sorted(m.name for m in pkgutil.iter_modules(glassbox.cli.__path__) if m.name != "common")
    assert len(modules) > 20, modules
    for name in modules:
        module = importlib.import_module(f"glassbox.cli.{name}")
        sub = argparse.ArgumentParser().add_subparsers()
        module.add_arguments(sub)
        command = name.replace("_", "-")
        assert list(sub.choices) == [command], name
        assert sub.choices[command].get_default("func") is module.run, name
    run = cli("--help")
    assert run.returncode == 0, run.stderr
    listed = re.findall(r"^    (\S+)", run.stdout, re.M)  # the commands' lines under "positional arguments"
    commands = {name.replace("_", "-") for name in modules}
    assert sorted(listed) == sorted(commands), set(listed) ^ commands


# --- bounds a command line must not get past --------------------------------------------------------


@pytest.mark.parametrize(
    "steps, words",
    [
        ("300000000", "300,000,000 is outside 1 to 10,000"),
        ("1000000000000", "1,000,000,000,000 is outside 1 to 10,000"),
        ("10^12", "'10^12' is not a whole number"),
    ],
)
def test_attribute_steps_are_bounded_before_anything_runs(steps, words):
    """Reference: the bound, attribution.MAX_STEPS (10,000); the parser refuses in one line, by
    its words (old code: 3·10^8 steps ran for ever, 10^12 asked for 8 TB)."""
    run = cli("attribute", "--prompt", CLEAN, "--target", " frog", "--method", "integrated_gradients", "--steps", steps)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("error: argument --steps: ") and words in line, line


def test_the_analysis_refuses_too_many_steps_before_allocating(monkeypatch):
    """Reference: MAX_STEPS; the analysis checks it itself (the app and the library call it
    without the parser), before the path's points are allocated: torch.arange is never called."""
    import torch

    from glassbox.cli import parser
    from glassbox.model.analysis.attribution import MAX_STEPS, attribute
    from glassbox.model.engine import GlassboxError
    from glassbox.model.io.checkpoint import load

    loaded = load("default")
    tokens = loaded.encode(CLEAN)
    monkeypatch.setattr(torch, "arange", lambda *a, **k: pytest.fail("allocated the path before the check"))
    for steps in (MAX_STEPS + 1, 10**12):
        with pytest.raises(GlassboxError, match=f"at most {MAX_STEPS:,}, not {steps:,}"):
            attribute(loaded.model, tokens, loaded.tokenizer.token_id(" frog"), "integrated_gradients", steps)
    steps_type = next(a.type for a in parser()._subparsers._group_actions[0].choices["attribute"]._actions if a.dest == "steps")
    assert steps_type(str(MAX_STEPS)) == MAX_STEPS  # the parser's bound, written out in cli/attribute.py, is the analysis's


def test_an_empty_target_is_a_short_error():
    """Reference: the words of the message; one short line, not the vocabulary (old code: every
    piece of the default model's 598)."""
    run = cli("attribute", "--prompt", CLEAN, "--target", "")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == "error: The token is empty: give one token of this model's vocabulary"


@pytest.mark.subprocess
def test_sigterm_to_glassbox_app_stops_the_server_and_frees_its_port():
    """Reference: the port itself and the process table. `python -m model app` on a free port
    answers its health check; after a SIGTERM to that process and its exit, nothing listens on
    the port and no process it started is left (old code: the Streamlit child kept the port)."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    from tests.helpers import ROOT, healthy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glassbox",
            "app",
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert healthy(f"http://127.0.0.1:{port}", seconds=240), "the app did not start"
        group = [int(p) for p in os.listdir("/proc") if p.isdigit() and _group_of(int(p)) == app.pid]
        app.send_signal(signal.SIGTERM)
        app.wait(timeout=120)
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "something still listens on the app's port"
        assert [p for p in group if _alive(p)] == [], "a process `glassbox app` started is still running"
    finally:
        try:
            os.killpg(app.pid, signal.SIGKILL)  # whatever the old code left behind
        except ProcessLookupError:
            pass


def _group_of(pid: int) -> int | None:
    """The process group of ``pid`` (None once it is gone)."""
    import os

    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
