"""Malformed sparse-autoencoder folders are refused before they run (issue 43, item 4;
model/io/sae.py's reading, engine/sae.py's check_weights): each with one GlassboxError naming the
config field or the weight, raised before any weight is read where the config or the
safetensors header already shows the fault, and shown as that one line by `glassbox features`
(exit status 2) and by the explorer's Features view (st.error, never "Something went wrong").

References: each malformed folder is one change away from a folder in SAELens 6's own format
(``valid``), which SAELens's ``SAE.load_from_disk`` reads and `glassbox features` runs on the
default model (``test_the_unchanged_folders_are_saelens_own_and_run``); so each refusal is that
change's. Before these checks the boolean k ended in torch's "topk(): argument 'k' must be int,
not bool" (an internal error, exit status 1), scalar weights in an IndexError, and the config
mismatches, the NaN threshold, the infinite decoder and the mistyped fields were accepted and
ran (exit status 0); every case fails on that code but the three hook widths against the model
(glassbox.model.analysis.features.check_sae, which already checked both of a transcoder's sides).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import glassbox as gb
import glassbox.model.io.sae as sae_io
from glassbox.model.engine import GlassboxError
from tests.helpers import cli, require, shown, start

D_IN, D_SAE = 128, 32  # the default model's d_model (d_mlp 512); a few features
DROP = object()  # a config entry or weight left out
PROMPT = "The fox"


def sae_folder(
    path: Path,
    architecture: str = "standard",
    hook: str = "blocks.2.hook_resid_pre",
    hook_out: str | None = None,
    d_out: int = D_IN,
    config: dict | None = None,
    weights: dict | None = None,
) -> str:
    """A folder as SAELens 6's ``save_model`` writes it (cfg.json + sae_weights.safetensors),
    random float32 weights, for the default model; ``config`` (``metadata.KEY`` for the
    metadata's) and ``weights`` replace entries, or drop them (DROP)."""
    transcoder = "transcoder" in architecture
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "W_enc": torch.randn(D_IN, D_SAE, generator=generator) * 0.1,
        "b_enc": torch.randn(D_SAE) * 0.1,
        "W_dec": torch.randn(D_SAE, d_out, generator=generator) * 0.1,
        "b_dec": torch.randn(d_out) * 0.1,
    }
    if "jumprelu" in architecture:
        tensors["threshold"] = torch.rand(D_SAE, generator=generator) * 0.1
    if "skip" in architecture:
        tensors["W_skip"] = torch.randn(d_out, D_IN, generator=generator) * 0.1
    metadata = {"sae_lens_version": "6.54.12", "hook_name": hook}
    cfg = {
        "d_in": D_IN,
        "d_sae": D_SAE,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": not transcoder,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": metadata,
        "architecture": architecture,
    }
    if transcoder:
        cfg["d_out"] = d_out
        metadata["hook_name_out"] = hook_out or hook.replace("ln2.hook_normalized", "hook_mlp_out")
    if architecture == "topk":
        cfg.update(k=4, rescale_acts_by_decoder_norm=False)
    for key, value in (config or {}).items():
        place, key = (metadata, key.removeprefix("metadata.")) if key.startswith("metadata.") else (cfg, key)
        place.pop(key, None) if value is DROP else place.__setitem__(key, value)
    for key, value in (weights or {}).items():
        tensors.pop(key, None) if value is DROP else tensors.__setitem__(key, value)
    path.mkdir(parents=True)
    (path / "cfg.json").write_text(json.dumps(cfg))
    save_file({key: value.contiguous() for key, value in tensors.items()}, str(path / "sae_weights.safetensors"))
    return str(path)


NAN, INF = float("nan"), float("inf")
TRANSCODER = {"architecture": "transcoder", "hook": "blocks.1.ln2.hook_normalized"}
K_MUST = "cfg.json's k must be a whole number above 0"
# (id, sae_folder's arguments, what the one line says, whether the weights are read before the refusal)
CASES = [
    # TopK's k
    ("k-boolean", {"architecture": "topk", "config": {"k": True}}, f"{K_MUST}, not true", False),
    ("k-zero", {"architecture": "topk", "config": {"k": 0}}, f"{K_MUST}, not 0", False),
    ("k-negative", {"architecture": "topk", "config": {"k": -3}}, f"{K_MUST}, not -3", False),
    ("k-float", {"architecture": "topk", "config": {"k": 4.0}}, f"{K_MUST}, not 4.0", False),
    (
        "k-above-d_sae",
        {"architecture": "topk", "config": {"k": 33}},
        "a TopK SAE's k must be a whole number from 1 to d_sae (32), not 33",
        False,
    ),
    ("k-missing", {"architecture": "topk", "config": {"k": DROP}}, "a TopK SAE needs k in its cfg.json", False),
    # the weights' ranks and shapes, from the header
    (
        "scalar-weights",
        {"weights": {key: torch.tensor(0.5) for key in ("W_enc", "b_enc", "W_dec", "b_dec")}},
        "W_enc has shape [] but must be a matrix, d_in × d_sae",
        False,
    ),
    ("scalar-bias", {"weights": {"b_enc": torch.tensor(0.5)}}, "b_enc has shape [] but must be d_sae = [32]", False),
    ("W_enc-1d", {"weights": {"W_enc": torch.randn(D_IN)}}, "W_enc has shape [128] but must be a matrix", False),
    ("W_enc-3d", {"weights": {"W_enc": torch.randn(D_IN, D_SAE, 2)}}, "W_enc has shape [128, 32, 2] but must be a matrix", False),
    (
        "W_dec-transposed",
        {"weights": {"W_dec": torch.randn(D_IN, D_SAE)}},
        "W_dec has shape [128, 32] but must be d_sae × d_in = [32, 128]",
        False,
    ),
    ("b_dec-width", {"weights": {"b_dec": torch.randn(D_IN + 1)}}, "b_dec has shape [129] but must be d_in = [128]", False),
    ("d_sae-not-the-weights", {"config": {"d_sae": 64}}, "W_enc has shape [128, 32], but its config says d_sae = 64", False),
    ("d_in-not-the-weights", {"config": {"d_in": 64}}, "W_enc has shape [128, 32], but its config says d_in = 64", False),
    (
        "threshold-width",
        {"architecture": "jumprelu", "weights": {"threshold": torch.rand(D_SAE - 1)}},
        "threshold has shape [31] but must be d_sae = [32]",
        False,
    ),
    (
        "threshold-missing",
        {"architecture": "jumprelu", "weights": {"threshold": DROP}},
        "its weights lack threshold (a jumprelu SAE's)",
        False,
    ),
    (
        "threshold-unused",
        {"weights": {"threshold": torch.rand(D_SAE)}},
        "its weights hold threshold, which a standard SAE does not use",
        False,
    ),
    (
        "W_skip-shape",
        {**TRANSCODER, "architecture": "skip_transcoder", "weights": {"W_skip": torch.randn(64, D_IN)}},
        "W_skip has shape [64, 128] but must be d_out × d_in = [128, 128]",
        False,
    ),
    (
        "integer-weights",
        {"weights": {"W_enc": torch.ones(D_IN, D_SAE, dtype=torch.int64)}},
        "W_enc is stored as I64; an SAE's weights are floating-point numbers",
        False,
    ),
    # every number finite, once read
    (
        "threshold-nan",
        {"architecture": "jumprelu", "weights": {"threshold": torch.full((D_SAE,), NAN)}},
        "threshold holds NaN or infinite numbers",
        True,
    ),
    ("W_dec-inf", {"weights": {"W_dec": torch.full((D_SAE, D_IN), INF)}}, "W_dec holds NaN or infinite numbers", True),
    (
        "scaling_factor-nan",
        {"weights": {"scaling_factor": torch.full((D_SAE,), NAN)}},
        "scaling_factor holds NaN or infinite numbers",
        True,
    ),
    (
        "scaling_factor-not-one",
        {"weights": {"scaling_factor": torch.full((D_SAE,), 2.0)}},
        "its weights hold a scaling_factor other than 1",
        True,
    ),
    # a transcoder's two sides: against its config, then against the model's tensors
    (
        "transcoder-d_out-not-the-weights",
        {**TRANSCODER, "config": {"d_out": 64}},
        "W_dec has shape [32, 128], but its config says d_out = 64",
        False,
    ),
    (
        "transcoder-output-hook-width",
        {**TRANSCODER, "hook_out": "blocks.1.mlp.hook_post"},
        "The SAE expects 128 numbers at blocks.1.mlp.hook_post; this model has 512 there",
        True,
    ),
    (
        "transcoder-input-hook-width",
        {**TRANSCODER, "hook": "blocks.1.mlp.hook_post", "hook_out": "blocks.1.hook_mlp_out"},
        "The SAE expects 128 numbers at blocks.1.mlp.hook_post; this model has 512 there",
        True,
    ),
    (
        "sae-hook-width",
        {"hook": "blocks.1.mlp.hook_post"},
        "The SAE expects 128 numbers at blocks.1.mlp.hook_post; this model has 512 there",
        True,
    ),
    # config fields of the wrong JSON type, or unknown values
    ("d_in-string", {"config": {"d_in": "128"}}, 'cfg.json\'s d_in must be a whole number above 0, not "128"', False),
    ("d_sae-boolean", {"config": {"d_sae": True}}, "cfg.json's d_sae must be a whole number above 0, not true", False),
    (
        "hook_name-number",
        {"config": {"metadata.hook_name": 3}},
        "cfg.json's hook_name must be the name of a tensor (a string), not 3",
        False,
    ),
    (
        "hook_name_out-list",
        {**TRANSCODER, "config": {"metadata.hook_name_out": ["blocks.1.hook_mlp_out"]}},
        'cfg.json\'s hook_name_out must be the name of a tensor (a string), not ["blocks.1.hook_mlp_out"]',
        False,
    ),
    (
        "architecture-unknown",
        {"config": {"architecture": "weird"}},
        "cfg.json's architecture must be one of standard, jumprelu, topk, transcoder",
        False,
    ),
    (
        "architecture-list",
        {"config": {"architecture": ["standard"]}},
        'cfg.json\'s architecture must be a string, not ["standard"]',
        False,
    ),
    (
        "normalize_activations-unknown",
        {"config": {"normalize_activations": "expected_average_only_in"}},
        "cfg.json's normalize_activations is 'expected_average_only_in', which needs a dataset-wide factor",
        False,
    ),
    (
        "normalize_activations-number",
        {"config": {"normalize_activations": 1}},
        "cfg.json's normalize_activations must be a string, not 1",
        False,
    ),
    (
        "apply_b_dec_to_input-string",
        {"config": {"apply_b_dec_to_input": "false"}},
        'cfg.json\'s apply_b_dec_to_input must be true or false, not "false"',
        False,
    ),
    (
        "model_from_pretrained_kwargs-string",
        {"config": {"metadata.model_from_pretrained_kwargs": "center"}},
        'cfg.json\'s model_from_pretrained_kwargs must be an object, not "center"',
        False,
    ),
]


class Unread:
    """safe_open whose tensors may not be read: what is refused from the config or the header
    is refused before any weight is."""

    def __init__(self, *args, **kwargs):
        self.opened = REAL_SAFE_OPEN(*args, **kwargs)

    def __enter__(self):
        self.stored = self.opened.__enter__()
        return self

    def __exit__(self, *exc):
        return self.opened.__exit__(*exc)

    def keys(self):
        return self.stored.keys()

    def get_slice(self, key):
        return self.stored.get_slice(key)

    def get_tensor(self, key):
        raise AssertionError(f"{key} was read before the refusal")


REAL_SAFE_OPEN = sae_io.safe_open


@pytest.fixture(scope="module")
def default_model():
    return gb.load("default")


@pytest.mark.parametrize("arguments, message, reads", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_malformed_sae_is_one_line_naming_the_field(tmp_path, monkeypatch, default_model, arguments, message, reads):
    """Model.sae raises one GlassboxError with the message (before any weight is read where
    ``reads`` is False), and `glassbox features --sae FOLDER` prints just that as one `error:`
    line and exits with 2: no internal error (1), no traceback, no run (0)."""
    folder = sae_folder(tmp_path / "sae", **arguments)
    if not reads:
        monkeypatch.setattr(sae_io, "safe_open", Unread)
    with pytest.raises(GlassboxError, match=re.escape(message)):
        default_model.sae(folder)
    run = cli("features", "--sae", folder, "--prompt", PROMPT)
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stderr)
    (line,) = run.stderr.splitlines()
    assert line.startswith("error: ") and message in line and "internal error" not in line, line


VALID = ["standard", "jumprelu", "topk", "transcoder", "skip_transcoder", "jumprelu_skip_transcoder"]


def test_the_unchanged_folders_are_saelens_own_and_run(tmp_path, monkeypatch, default_model):
    """The folders the cases above change by one entry: SAELens's SAE.load_from_disk reads each
    (its own format, its own checks), and Glassbox runs each on the default model (exit 0)."""
    sae_lens = require("sae_lens")  # a development extra (pyproject.toml)
    for architecture in VALID:
        arguments = (
            TRANSCODER | {"architecture": architecture} if "transcoder" in architecture else {"architecture": architecture}
        )
        folder = sae_folder(tmp_path / architecture, **arguments)
        reference = sae_lens.SAE.load_from_disk(folder)
        ours = default_model.sae(folder)
        x = torch.randn(3, D_IN, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            assert torch.allclose(ours.encode(x), reference.encode(x), atol=1e-6), architecture
        run = cli("features", "--sae", folder, "--prompt", PROMPT)
        assert run.returncode == 0 and run.stderr == "", (architecture, run.stderr)
    ones = sae_folder(tmp_path / "ones", weights={"scaling_factor": torch.ones(D_SAE)})  # SAELens's reader drops it
    assert default_model.sae(ones).d_sae == D_SAE
    monkeypatch.setattr(sae_io, "safe_open", Unread)  # the guard above bites where weights are read
    with pytest.raises(AssertionError, match="was read before the refusal"):
        default_model.sae(ones)


def test_a_float16_model_refuses_weights_too_large_for_it(tmp_path):
    """Finite in the file, infinite once in the model's dtype: refused, naming the weight and the dtype."""
    folder = sae_folder(tmp_path / "sae", weights={"b_dec": torch.full((D_IN,), 1e6)})
    with pytest.raises(GlassboxError, match=re.escape("b_dec holds numbers too large for float16")):
        sae_io.load_sae(folder, torch.float16)


def test_an_sae_built_in_code_is_checked_likewise():
    """engine/sae.py's SparseAutoencoder checks its own weights' shapes and k (check_weights, the
    same rules as the header's): an SAE built in code is no less checked."""
    from glassbox.model.engine.sae import SparseAutoencoder

    weights = [torch.zeros(D_IN, D_SAE), torch.zeros(D_SAE), torch.zeros(D_SAE, D_IN), torch.zeros(D_IN)]
    with pytest.raises(GlassboxError, match="k must be a whole number from 1 to d_sae"):
        SparseAutoencoder("topk", "blocks.2.hook_resid_pre", "blocks.2.hook_resid_pre", *weights, k=True)
    with pytest.raises(GlassboxError, match=re.escape("b_dec has shape [127] but must be d_in = [128]")):
        SparseAutoencoder("standard", "blocks.2.hook_resid_pre", "blocks.2.hook_resid_pre", *weights[:3], torch.zeros(D_IN - 1))


APP_CASES = [case for case in CASES if case[0] in ("k-boolean", "threshold-nan")]


@pytest.mark.parametrize("arguments, message", [case[1:3] for case in APP_CASES], ids=[case[0] for case in APP_CASES])
def test_the_features_view_shows_the_refusal(tmp_path, arguments, message):
    """A malformed folder typed into the explorer's Features view: its one message as an error
    (app/explore/features.py's st.error of it), never the crash guard's "Something went wrong on
    the server" (which the boolean k gave before) nor a drawn view (which the NaN threshold gave)."""
    folder = sae_folder(tmp_path / "sae", **arguments)
    at = start("screens/explore.py", prompt=PROMPT, view="Features")
    at.selectbox(key="explore_sae_choice").set_value("another: a folder, or owner/repo/folder on the hub").run()
    at.text_input(key="explore_sae_source").input(folder)
    next(b for b in at.button if b.label == "Open").click().run()
    errors = [shown(e.value) for e in at.error]
    assert not at.exception and len(errors) == 1 and message in errors[0], errors
    assert not any("Something went wrong" in e for e in errors) and not at.metric
