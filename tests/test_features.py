"""Sparse-autoencoder features (model/engine/sae.py, features.py; model/io/sae.py; gb.Model.sae,
features, feature_logits, ablate_feature, steer_feature).

References:
- the SAE's maths: SAELens's own classes (PyPI sae-lens), the same random weights saved with its
  ``save_model`` and read back here; encode and the reconstruction within 1e-5 (float32);
- on a model: transformers' GPT2LMHeadModel on the same weights (float64), with forward hooks
  that put SAELens's reconstruction, or the input minus one feature's share, in place of the
  tensor, or add a feature's decoder row: losses and probabilities within 1e-10;
- the logit effect: the final LayerNorm written out on transformers' hidden state (1e-10).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import glassbox as gb
from glassbox.model.engine import GlassboxError
from glassbox.model.io.assets import asset
from glassbox.model.io.sae import curated, load_sae
from tests.helpers import require

sae_lens = require("sae_lens")  # a development extra (pyproject.toml)
D_IN, D_SAE = 64, 96  # the tiny GPT-2 of conftest's gpt2_dir has d_model 64
PROMPT = "The cat sat on the mat and the dog"


def saelens_sae(architecture: str, hook: str = "blocks.1.hook_resid_pre", seed: int = 0, dtype: str = "float32", **settings):
    """A SAELens SAE of ``architecture`` with random weights (every bias and threshold nonzero)."""
    from sae_lens import SAE

    metadata = {"hook_name": hook}
    config = {
        "architecture": architecture,
        "d_in": D_IN,
        "d_sae": D_SAE,
        "dtype": dtype,
        "device": "cpu",
        "metadata": metadata,
        **settings,
    }
    if "transcoder" in architecture:
        block = hook.split(".")[1]
        config["d_out"] = D_IN
        config["apply_b_dec_to_input"] = False  # SAELens refuses it for a transcoder
        metadata["hook_name_out"] = f"blocks.{block}.hook_mlp_out"
    sae = SAE.from_dict(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in sae.named_parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * 0.3)
            if name == "threshold":
                parameter.abs_()
    return sae


CASES = [
    ("standard", {}),
    ("standard", {"apply_b_dec_to_input": False}),
    ("standard", {"normalize_activations": "constant_norm_rescale"}),
    ("standard", {"normalize_activations": "layer_norm"}),
    ("jumprelu", {}),
    ("topk", {"k": 7}),
    ("topk", {"k": 7, "rescale_acts_by_decoder_norm": True}),
    ("transcoder", {}),
    ("skip_transcoder", {}),
    ("jumprelu_transcoder", {}),
    ("jumprelu_skip_transcoder", {}),
]


@pytest.mark.parametrize("architecture, settings", CASES, ids=[f"{a}-{'-'.join(s) or 'plain'}" for a, s in CASES])
def test_encode_and_decode_equal_saelens_on_its_saved_files(tmp_path, architecture, settings):
    reference = saelens_sae(architecture, **settings)
    reference.save_model(tmp_path)
    sae = load_sae(str(tmp_path))
    assert sae.architecture == architecture and sae.reads == "blocks.1.hook_resid_pre"
    x = torch.randn(11, D_IN, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        want_acts, want_out = reference.encode(x), reference(x)
    got_acts = sae.encode(x)
    assert torch.allclose(got_acts, want_acts, rtol=0, atol=1e-5)
    assert torch.allclose(sae.decode(got_acts, x), want_out, rtol=0, atol=1e-5)
    assert 0 < (got_acts > 0).sum() < got_acts.numel()  # some features on, some off: the activation was exercised


def test_gemma_scope_params_read_as_saelens_reads_them(tmp_path):
    """Gemma Scope 2's params.safetensors, mapped as SAELens's gemma_3 loader maps it, into its JumpReLUSAE."""
    reference = saelens_sae("jumprelu", apply_b_dec_to_input=False)
    folder = tmp_path / "resid_post" / "layer_1_width_16k_l0_medium"
    folder.mkdir(parents=True)
    state = reference.state_dict()
    save_file(
        {
            "w_enc": state["W_enc"],
            "w_dec": state["W_dec"],
            "b_enc": state["b_enc"],
            "b_dec": state["b_dec"],
            "threshold": state["threshold"],
        },
        str(folder / "params.safetensors"),
    )
    sae = load_sae(str(folder))
    assert (sae.architecture, sae.reads, sae.writes) == ("jumprelu", "blocks.1.hook_resid_post", "blocks.1.hook_resid_post")
    x = torch.randn(5, D_IN, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(sae(x), reference(x), rtol=0, atol=1e-5)


def test_a_legacy_config_and_an_attention_z_sae(tmp_path):
    """An old SAELens cfg.json (hook_point at the top level, TopK in activation_fn_kwargs) and a
    hook_z SAE: TransformerLens's z (position × head × d_head) flattened heads-last."""
    reference = saelens_sae("topk", k=5)
    reference.save_model(tmp_path)
    config = json.loads((tmp_path / "cfg.json").read_text())
    legacy = {
        "d_in": D_IN,
        "d_sae": D_SAE,
        "hook_point": "blocks.0.attn.hook_z",
        "activation_fn_str": "topk",
        "activation_fn_kwargs": {"k": 5},
        "apply_b_dec_to_input": config["apply_b_dec_to_input"],
    }
    (tmp_path / "cfg.json").write_text(json.dumps(legacy))
    sae = load_sae(str(tmp_path))
    assert (sae.architecture, sae.k, sae.reads) == ("topk", 5, "blocks.0.attn.hook_z")
    z = torch.randn(4, 3, 16)  # head × position × d_head, as Glassbox holds it
    flat = z.transpose(0, 1).reshape(3, 64)  # as TransformerLens holds it, flattened by SAELens
    with torch.no_grad():
        assert torch.allclose(sae.encode(sae.rows(z)), reference.encode(flat), atol=1e-5)
        assert torch.allclose(sae.unrows(sae(sae.rows(z)), z), reference(flat).reshape(3, 4, 16).transpose(0, 1), atol=1e-5)


# --- on a model, against transformers with hooks ---
@pytest.fixture(scope="module")
def pair(gpt2_dir):
    from transformers import GPT2LMHeadModel

    model = gb.load(str(gpt2_dir), dtype="float64", device="cpu")
    hf = GPT2LMHeadModel.from_pretrained(str(gpt2_dir), dtype=torch.float64, attn_implementation="eager").eval()
    return model, hf


def saved(tmp_path, reference) -> str:
    reference.save_model(tmp_path)
    return str(tmp_path)


def hf_run(hf, ids, block: int, change) -> torch.Tensor:
    """transformers' logits with ``change(hidden)`` replacing the residual stream entering ``block``."""

    def pre(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        hidden = change(hidden[0])[None]
        return ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})

    handle = hf.transformer.h[block].register_forward_pre_hook(pre, with_kwargs=True)
    try:
        with torch.no_grad():
            return hf(torch.tensor([ids])).logits[0]
    finally:
        handle.remove()


def stream(hf, ids, block: int) -> torch.Tensor:
    """transformers' residual stream entering ``block`` (its hidden state), one sequence."""
    with torch.no_grad():
        return hf(torch.tensor([ids]), output_hidden_states=True).hidden_states[block][0]


def mean_loss(logits: torch.Tensor, ids: list[int]) -> float:
    return float(torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])))


@pytest.mark.parametrize("architecture, settings", [("standard", {}), ("jumprelu", {}), ("topk", {"k": 6})])
def test_features_and_the_spliced_loss_equal_transformers_with_saelens_in_place(pair, tmp_path, architecture, settings):
    model, hf = pair
    reference = saelens_sae(architecture, dtype="float64", **settings)
    sae = model.sae(saved(tmp_path, reference))
    ids = model.tokens(PROMPT)
    got = model.features(PROMPT, sae, top=4)
    with torch.no_grad():
        x = stream(hf, ids, 1)
        acts = reference.encode(x)
        want_error = (x - reference(x)).norm(dim=-1)
    values, order = acts.topk(4, dim=-1)
    assert np.allclose(got.top_values, values.numpy(), rtol=0, atol=1e-10)
    active = values > 0
    assert np.array_equal(got.top_ids[active.numpy()], order[active].numpy())
    assert np.array_equal(got.active, (acts > 0).sum(-1).numpy())
    assert np.allclose(got.error_norm, want_error.numpy(), rtol=1e-10)
    # the grid's columns: features among some position's top 4, by their largest activation
    assert np.allclose(got.column_values, acts[:, got.columns].numpy(), atol=1e-10)
    assert set(got.columns) <= set(order[active].tolist()) and len(got.columns) == min(24, len(set(order[active].tolist())))
    assert (np.diff(got.column_values.max(0)) <= 0).all()
    with torch.no_grad():
        plain = hf(torch.tensor([ids])).logits[0]
    spliced = hf_run(hf, ids, 1, lambda h: reference(h))
    assert got.loss == pytest.approx(mean_loss(plain, ids), abs=1e-10)
    assert got.spliced_loss == pytest.approx(mean_loss(spliced, ids), abs=1e-10)
    assert got.spliced_loss != pytest.approx(got.loss, abs=1e-6)  # a random SAE reconstructs badly: the splice bit


def standard_sae(model, tmp_path):
    """A random standard SAE of SAELens (float64), the same one as Glassbox reads it, and PROMPT's ids."""
    reference = saelens_sae("standard", dtype="float64")
    return reference, model.sae(saved(tmp_path, reference)), model.tokens(PROMPT)


def test_ablating_a_feature_equals_transformers_minus_its_share(pair, tmp_path):
    model, hf = pair
    reference, sae, ids = standard_sae(model, tmp_path)
    with torch.no_grad():
        acts = reference.encode(stream(hf, ids, 1))
    feature = int(acts[-1].argmax())  # active at the last position
    got = model.ablate_feature(PROMPT, sae, feature)
    assert np.allclose(got.activations, acts[:, feature].numpy(), atol=1e-10)

    def minus_share(h):
        return h - reference.encode(h)[:, feature, None] * reference.W_dec[feature]

    want = torch.softmax(hf_run(hf, ids, 1, minus_share)[-1], -1)
    assert np.allclose(got.ablated, want.numpy(), rtol=0, atol=1e-10)
    with torch.no_grad():
        assert np.allclose(got.plain, torch.softmax(hf(torch.tensor([ids])).logits[0, -1], -1).numpy(), atol=1e-10)
    assert got.kl > 1e-6


def test_a_centred_sae_reads_the_stream_without_its_mean(pair, tmp_path):
    """SAEs trained on TransformerLens's GPT-2 with center_writing_weights read a stream whose mean
    over d_model is zero (TransformerLens removes it by centring every weight that writes it)."""
    model, hf = pair
    reference = saelens_sae(
        "standard",
        dtype="float64",
        metadata={"hook_name": "blocks.1.hook_resid_pre", "model_from_pretrained_kwargs": {"center_writing_weights": True}},
    )
    sae = model.sae(saved(tmp_path, reference))
    assert sae.center_input
    ids = model.tokens(PROMPT)
    with torch.no_grad():
        x = stream(hf, ids, 1)
        centred = x - x.mean(-1, keepdim=True)
        values = reference.encode(centred).topk(3, dim=-1).values
        want_error = (centred - reference(centred)).norm(dim=-1)
    got = model.features(PROMPT, sae, top=3)
    assert np.allclose(got.top_values, values.numpy(), atol=1e-10)
    assert np.allclose(got.error_norm, want_error.numpy(), rtol=1e-10)


def test_a_transcoder_predicts_the_mlp_output_from_its_input(pair, tmp_path):
    model, hf = pair
    reference = saelens_sae("transcoder", hook="blocks.1.ln2.hook_normalized", dtype="float64")
    sae = model.sae(saved(tmp_path, reference))
    assert (sae.reads, sae.writes) == ("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out")
    ids = model.tokens(PROMPT)
    block = hf.transformer.h[1]
    seen = {}
    hooks = [
        block.ln_2.register_forward_hook(lambda m, a, out: seen.__setitem__("in", a[0][0])),
        block.mlp.register_forward_hook(lambda m, a, out: seen.__setitem__("out", out[0])),
    ]
    with torch.no_grad():
        hf(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    x_in = seen["in"]  # ln_2's input; normalised without its gain, as TransformerLens's hook_normalized
    normed = (x_in - x_in.mean(-1, keepdim=True)) / torch.sqrt(x_in.var(-1, unbiased=False, keepdim=True) + 1e-5)
    with torch.no_grad():
        want_error = (seen["out"] - reference(normed)).norm(dim=-1)
    got = model.features(PROMPT, sae, top=3)
    assert np.allclose(got.error_norm, want_error.numpy(), rtol=1e-9)


def test_the_logit_effect_is_the_decoder_row_through_the_final_norm_and_unembedding(pair, tmp_path):
    model, hf = pair
    reference, sae, ids = standard_sae(model, tmp_path)
    with torch.no_grad():
        last = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]
    # transformers' last hidden state is after ln_f; recompute its input's scale from the block outputs
    seen = {}
    handle = hf.transformer.ln_f.register_forward_hook(lambda m, a, out: seen.__setitem__("x", a[0][0, -1]))
    with torch.no_grad():
        hf(torch.tensor([ids]))
    handle.remove()
    x = seen["x"]
    scale = torch.sqrt(x.var(unbiased=False) + hf.config.layer_norm_epsilon)
    row = reference.W_dec[7]
    want = ((row - row.mean()) / scale * hf.transformer.ln_f.weight) @ hf.lm_head.weight.T
    got = model.feature_logits(PROMPT, sae, 7, k=5)
    assert got.promoted_ids == want.topk(5).indices.tolist()
    assert np.allclose(got.promoted, want.topk(5).values.detach().numpy(), atol=1e-10)
    assert got.suppressed_ids == (-want).topk(5).indices.tolist()
    assert last.shape[-1] == D_IN


def test_steering_with_a_feature_adds_its_decoder_row_where_the_sae_writes(pair, tmp_path):
    model, hf = pair
    reference = saelens_sae("standard", hook="blocks.0.hook_resid_post", dtype="float64")
    sae = model.sae(saved(tmp_path, reference))
    steered, plain = model.steer_feature("The cat", sae, 3, strength=6.0, max_new_tokens=4, temperature=0)
    prompt = model.tokens("The cat")
    all_ids = prompt + [t.token_id for t in steered]
    # blocks.0.hook_resid_post is what block 1 reads
    logits = hf_run(hf, all_ids, 1, lambda h: h + 6.0 * reference.W_dec[3])
    for i, token in enumerate(steered):
        assert torch.allclose(token.before.log(), torch.log_softmax(logits[len(prompt) - 1 + i], -1), atol=1e-10)
    assert any(not torch.allclose(a.before, b.before) for a, b in zip(plain, steered))


def test_a_mismatched_or_broken_sae_is_a_clean_error(pair, tmp_path):
    model, _ = pair
    wrong_width = saelens_sae("standard")
    wrong_width.save_model(tmp_path / "ok")
    config = json.loads((tmp_path / "ok" / "cfg.json").read_text())
    config["metadata"]["hook_name"] = "blocks.1.mlp.hook_post"  # 256 wide
    (tmp_path / "ok" / "cfg.json").write_text(json.dumps(config))
    with pytest.raises(GlassboxError, match="expects 64 numbers at blocks.1.mlp.hook_post; this model has 256"):
        model.sae(str(tmp_path / "ok"))
    config["metadata"]["hook_name"] = "blocks.9.hook_resid_pre"
    (tmp_path / "ok" / "cfg.json").write_text(json.dumps(config))
    with pytest.raises(GlassboxError, match="does not compute"):
        model.sae(str(tmp_path / "ok"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(GlassboxError, match="No sparse autoencoder"):
        model.sae(str(tmp_path / "empty"))
    (tmp_path / "ok" / "sae_weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(GlassboxError, match="not a readable safetensors"):
        model.sae(str(tmp_path / "ok"))
    with pytest.raises(GlassboxError, match="feature must be from 0 to 95"):
        model.feature_logits(PROMPT, load_sae(saved(tmp_path / "again", saelens_sae("standard")), torch.float64), 96)


def test_the_curated_list_names_releases_for_models_glassbox_opens():
    from glassbox.model.io.catalog import curated as curated_models

    hub_ids = {entry.hub_id for entry in curated_models()} | {"default"}
    for entry in curated():
        assert entry.model in hub_ids, entry.model
        assert entry.download_bytes > entry.d_in * entry.d_sae * 8
    assert {e.model for e in curated()} == {"default", "openai-community/gpt2", "google/gemma-3-270m"}


def test_the_cli_prints_the_apis_numbers_and_one_line_for_bad_input(pair, gpt2_dir, tmp_path):
    """`glassbox features --json` carries Model.features / feature_logits / ablate_feature /
    steer_feature's numbers (those are checked against their references above)."""
    from tests.helpers import cli

    model, _ = pair
    folder = saved(tmp_path, saelens_sae("standard", hook="blocks.0.hook_resid_post", dtype="float64"))
    sae = model.sae(folder)
    want = model.features(PROMPT, sae, top=3)
    feature = int(want.top_ids[-1, 0])
    args = [
        "features",
        "--model",
        str(gpt2_dir),
        "--dtype",
        "float64",
        "--sae",
        folder,
        "--prompt",
        PROMPT,
        "--top",
        "3",
        "--feature",
        str(feature),
        "--ablate",
        "--steer",
        "5",
        "--max-new-tokens",
        "3",
    ]
    run = cli(*args, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["spliced_loss"] == pytest.approx(want.spliced_loss, abs=1e-12)
    assert [t["top"][0]["feature"] for t in out["tokens"]] == [int(i) for i in want.top_ids[:, 0]]
    assert out["feature"]["promoted"][0]["logit"] == pytest.approx(model.feature_logits(PROMPT, sae, feature).promoted[0])
    assert out["feature"]["ablation"]["kl"] == pytest.approx(model.ablate_feature(PROMPT, sae, feature).kl)
    steered, _ = model.steer_feature(PROMPT, sae, feature, 5.0, max_new_tokens=3, temperature=0)
    assert [s["token_id"] for s in out["feature"]["steering"]["steered"]["steps"]] == [t.token_id for t in steered]
    text = cli(*args)
    assert text.returncode == 0 and "with the reconstruction in place" in text.stdout and "steered × 5" in text.stdout
    for bad, message in (
        (["--sae", str(tmp_path / "nothing")], "error:"),
        (["--feature", "96"], "feature must be"),
        (["--steer", "1"], "give --feature"),
    ):
        base = [a for a in args if a not in ("--ablate",)]
        if bad[0] == "--steer":
            base = base[: base.index("--feature")]
        run = cli(*[*base, *bad])
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    listing = cli("features", "--list")
    assert listing.returncode == 0 and "jbloom/GPT2-Small-SAEs-Reformatted/blocks.8.hook_resid_pre" in listing.stdout


@pytest.mark.long
def test_train_sae_writes_what_saelens_reads_and_learns(tmp_path):
    """`glassbox train-sae`, a short run: SAELens's own SAE.load_from_disk reads the folder and
    encodes as Glassbox does (1e-5); the loss fell; the shipped one (assets/default-sae) opens on
    the default model and explains most of its stream on held-out stories."""
    from sae_lens import SAE

    from tests.helpers import cli

    run = cli("train-sae", "--out", str(tmp_path / "sae"), "--steps", "200", "--stories", "12")
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "sae" / "training.json").read_text())
    assert [c["step"] for c in summary["curve"]] == [100, 200] and summary["curve"][1]["mse"] < summary["curve"][0]["mse"]
    reference = SAE.load_from_disk(str(tmp_path / "sae"))
    ours = load_sae(str(tmp_path / "sae"))
    x = torch.randn(9, 128, generator=torch.Generator().manual_seed(3)) * 4
    with torch.no_grad():
        assert torch.allclose(ours.encode(x), reference.encode(x), atol=1e-5)
    assert gb.load("default").sae("default-sae").d_sae == 1024  # opens, and fits the default model
    shipped = json.loads((asset("default-sae") / "training.json").read_text())
    assert shipped["variance_explained_held_out"] > 0.95 and shipped["curve"][-1]["mse"] < shipped["curve"][0]["mse"] / 4
