"""The CLI contract: `python -m model trace|hooks` on the worked example, and clean errors."""

import numpy as np
import pytest

from tests.helpers import cli

pytestmark = pytest.mark.subprocess

def test_trace_writes_every_tensor_and_gradient(tmp_path):
    out = tmp_path / "t.npz"
    run = cli("trace", "--model", "worked-example", "--prompt", "the cat sat on the", "--backward", "--npz", str(out))
    assert run.returncode == 0, run.stderr
    data = np.load(out)
    assert data["tokens"].tolist() == [0, 1, 2, 3, 0]
    for name in ["hook_embed", "hook_pos_embed", "blocks.1.attn.hook_pattern", "blocks.0.ln1.hook_mean",
                 "ln_final.hook_normalized", "hook_logits", "hook_probs", "hook_loss"]:
        assert name in data, name
    assert data["blocks.0.attn.hook_pattern"].shape == (2, 5, 5)
    assert "grad:blocks.0.hook_resid_pre" in data and "grad:embed.W_E" in data
    assert "grad:hook_probs" not in data

    forward_only = tmp_path / "f.npz"
    assert cli("trace", "--model", "worked-example", "--prompt", "the cat", "--npz", str(forward_only)).returncode == 0
    assert not any(k.startswith("grad:") for k in np.load(forward_only))


def test_trace_with_target_and_name_filter(tmp_path):
    out = tmp_path / "t.npz"
    run = cli("trace", "--model", "worked-example", "--prompt", "the cat sat on the", "--target", "mat", "--names", "*hook_pattern", "hook_probs",
              "--npz", str(out))
    assert run.returncode == 0, run.stderr
    data = np.load(out)
    assert sorted(k for k in data if not k.startswith("grad:")) == [
        "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern", "hook_probs", "tokens"]
    # the printed loss is -log p(mat) at the last position
    loss = float(run.stdout.split("loss")[1].split()[0])
    assert loss == pytest.approx(-np.log(data["hook_probs"][4, 5]), abs=1e-6)


def test_hooks_lists_names_with_shapes():
    run = cli("hooks", "--model", "worked-example")
    assert run.returncode == 0, run.stderr
    assert "blocks.1.attn.hook_scores_masked" in run.stdout and "[2, 5, 5]" in run.stdout
    assert "blocks.0.mlp.W_in" in run.stdout and "[4, 8]" in run.stdout


@pytest.mark.parametrize("args, message", [
    (["--prompt", ""], "empty"),
    (["--prompt", "the cow sat"], "Unknown word"),
    (["--prompt", "the cat sat on the mat"], "context"),
    (["--prompt", "the cat", "--target", "cow"], "not"),
    (["--prompt", "the cat", "--position", "0"], "--target"),
    (["--prompt", "the cat", "--target", "mat", "--position", "7"], "outside"),
    (["--prompt", "the", "--backward"], "one-token prompt"),
    (["--model", "no-such-model", "--prompt", "x"], "No model"),
])
def test_bad_input_is_a_clean_error(tmp_path, args, message):
    model = [] if "--model" in args else ["--model", "worked-example"]
    run = cli("trace", *model, *args, "--npz", str(tmp_path / "x.npz"))
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
