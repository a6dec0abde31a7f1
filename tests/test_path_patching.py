"""Path patching (model/analysis/path_patching.py, gb.Model.path_patch). Reference: the same
two passes written out by hand with forward hooks on transformers' GPT2LMHeadModel, same
weights, float64 (1e-10): c_proj's input (the heads' outputs side by side) and the MLP's
output frozen at the corrupted run's but the sender's, then the receiver's slice of c_attn's
output (its q, k or v) put into the corrupted run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import glassbox as gb
from glassbox.model.engine import GlassboxError

CLEAN, CORRUPT, ANSWER, WRONG = "She sells sea shells by the", "She sells wood shells by the", " sea", " wood"


@pytest.fixture(scope="module")
def pair(gpt2_dir):
    from transformers import GPT2LMHeadModel

    model = gb.load(str(gpt2_dir), dtype="float64", device="cpu")
    hf = GPT2LMHeadModel.from_pretrained(str(gpt2_dir), dtype=torch.float64, attn_implementation="eager").eval()
    return model, hf


def run(hf, ids, z=None, mlp=None, keep_attn=None, put=None):
    """One GPT-2 pass. ``z``/``mlp``: block → the heads' outputs (c_proj's input) / the MLP's
    output to put in; ``keep_attn``: a block whose c_attn output is returned; ``put``: (block,
    slice, values) written into c_attn's output. Returns (logits, every block's z and mlp, kept)."""
    seen_z, seen_mlp, kept, handles = {}, {}, {}, []
    for b, layer in enumerate(hf.transformer.h):

        def pre(module, args, b=b):
            seen_z[b] = args[0][0].clone()
            return (z[b][None].clone(),) if z is not None else None

        def after_mlp(module, args, out, b=b):
            seen_mlp[b] = out[0].clone()
            return mlp[b][None].clone() if mlp is not None else None

        def after_attn(module, args, out, b=b):
            if put is not None and put[0] == b:
                out = out.clone()
                out[0, :, put[1]] = put[2]
            if keep_attn == b:
                kept["qkv"] = out[0].clone()
            return out

        handles += [
            layer.attn.c_proj.register_forward_pre_hook(pre),
            layer.mlp.register_forward_hook(after_mlp),
            layer.attn.c_attn.register_forward_hook(after_attn),
        ]
    try:
        with torch.no_grad():
            logits = hf(torch.tensor([ids])).logits[0, -1]
    finally:
        for h in handles:
            h.remove()
    return logits, seen_z, seen_mlp, kept.get("qkv")


def by_hand(model, hf, sender, receiver, which):
    d, dh = model.cfg.d_model, model.cfg.d_head
    clean, corrupt = model.tokens(CLEAN), model.tokens(CORRUPT)
    answer, wrong = model.token_id(ANSWER), model.token_id(WRONG)
    _, clean_z, clean_mlp, _ = run(hf, clean)
    _, z, mlp, _ = run(hf, corrupt)
    (sb, sh), (rb, rh) = sender, receiver
    z, mlp = dict(z), dict(mlp)
    if sh is None:
        mlp[sb] = clean_mlp[sb]
    else:
        z[sb] = z[sb].clone()
        z[sb][:, sh * dh : (sh + 1) * dh] = clean_z[sb][:, sh * dh : (sh + 1) * dh]
    _, _, _, qkv = run(hf, corrupt, z=z, mlp=mlp, keep_attn=rb)
    part = slice("qkv".index(which) * d + rh * dh, "qkv".index(which) * d + (rh + 1) * dh)
    logits, _, _, _ = run(hf, corrupt, put=(rb, part, qkv[:, part]))
    return float(logits[answer] - logits[wrong])


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_path_patching_equals_two_hooked_passes_in_transformers(pair, which):
    model, hf = pair
    result = model.path_patch(CLEAN, CORRUPT, ANSWER, WRONG, which)
    for sender, receiver in [((0, 1), (1, 2)), ((0, None), (2, 0)), ((1, 3), (2, 3)), ((0, 2), (2, 1))]:
        got = result.metric[result.senders.index(sender), result.receivers.index(receiver)]
        assert got == pytest.approx(by_hand(model, hf, sender, receiver, which), abs=1e-10), (sender, receiver)
    # a receiver not after its sender has no path: NaN; every other cell is a number
    later = np.array([[rb > sb for rb, _ in result.receivers] for sb, _ in result.senders])
    assert np.isnan(result.metric[~later]).all() and np.isfinite(result.metric[later]).all()
    assert not np.allclose(result.metric[later], result.metric_corrupt)  # some path moves the metric


def test_bad_path_patching_is_a_clean_error(pair):
    model, _ = pair
    with pytest.raises(GlassboxError, match="one of q, k, v"):
        model.path_patch(CLEAN, CORRUPT, ANSWER, WRONG, "o")
    with pytest.raises(GlassboxError, match="equal length"):
        model.path_patch(CLEAN, "She sells", ANSWER, WRONG)


def test_the_path_patch_command_prints_the_grid(pair, gpt2_dir):
    """`glassbox path-patch --json` (in this process) on the same float64 model: Model.path_patch's grid."""
    import json

    from tests.helpers import cli

    model, _ = pair
    args = [
        "path-patch",
        "--model",
        str(gpt2_dir),
        "--dtype",
        "float64",
        "--clean",
        CLEAN,
        "--corrupt",
        CORRUPT,
        "--answer",
        ANSWER,
        "--wrong",
        WRONG,
        "--input",
        "v",
    ]
    run = cli(*args, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    want = model.path_patch(CLEAN, CORRUPT, ANSWER, WRONG, "v")
    got = np.array([[np.nan if v is None else v for v in row] for row in out["metric"]])
    assert np.allclose(got, want.metric, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert out["senders"][:5] == ["0.0", "0.1", "0.2", "0.3", "0.mlp"] and out["receivers"][0] == "1.0"
    bad = cli(*[a if a != CORRUPT else "She sells" for a in args])
    assert bad.returncode == 2 and "equal length" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_a_pass_from_a_block_equals_the_whole_pass():
    """Transformer.forward_from, which path patching's passes start with: from the residual stream
    a whole pass captured at block b, the same logits (exactly: the same operations)."""
    import glassbox as gb
    from glassbox.model.engine.capture import capture

    model = gb.load("default", dtype="float64").module
    ids = torch.tensor([list(range(3, 12))])
    with capture([f"blocks.{b}.hook_resid_pre" for b in range(4)]) as recorder:
        whole = model(ids).logits
    for b in range(4):
        assert torch.equal(model.forward_from(recorder.tensors[f"blocks.{b}.hook_resid_pre"], b).logits, whole)


def test_a_pass_from_a_block_gives_two_logits_alone_as_the_whole_head_does():
    """forward_from's ``columns``: two vocabulary ids' logits alone (path patching's metric reads
    no others), on a head with a bias and a soft cap. Reference: those columns of the whole
    head's logits, float64, 1e-12."""
    from glassbox.model.engine import ModelConfig, Transformer
    from glassbox.model.engine.capture import capture

    cfg = ModelConfig(vocab_size=30, n_ctx=8, d_model=16, n_layers=2, n_heads=2, d_ff=32, final_softcap=3.0, unembed_bias=True)
    model = Transformer(cfg).init_weights(2).double()
    with torch.no_grad():
        model.unembed.b_U.normal_(generator=torch.Generator().manual_seed(0))
        with capture(["blocks.1.hook_resid_pre"]) as recorder:
            whole = model(torch.tensor([[1, 5, 7, 2]]), last_only=True).logits
        pair = model.forward_from(recorder.tensors["blocks.1.hook_resid_pre"], 1, True, None, [7, 29]).logits
    assert pair.shape == (1, 1, 2) and whole[0, 0, 7] != whole[0, 0, 29]
    torch.testing.assert_close(pair, whole[..., [7, 29]], rtol=0, atol=1e-12)


SHAPES = {  # the attention's paths with a cache: learned positions, RoPE with grouped keys, a window on one layer
    "table": dict(),
    "rope, grouped keys": dict(positional="rope", n_kv_heads=1, norm="rmsnorm", activation="silu", gated_mlp=True),
    "window": dict(window=3, local_layers=(0,), attn_softcap=5.0),
}


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPES)
@pytest.mark.parametrize("first_difference", [0, 3, 7])
def test_a_shared_prefix_run_once_gives_the_whole_prompts_grid(shape, first_difference):
    """The positions two prompts share are run once and every pass continues from their keys and
    values. Reference: the same grid with every pass over the whole prompts (reuse_prefix=False),
    float64, 1e-12, on a random 3-block model of each attention path, for prompts that first differ
    at position 0 (nothing shared), 3, or only at the last one (7 of 8)."""
    from glassbox.model.analysis.path_patching import path_patching, shared_prefix
    from glassbox.model.engine import ModelConfig, Transformer

    cfg = ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=3, n_heads=2, d_ff=32, **SHAPES[shape])
    model = Transformer(cfg).init_weights(5).double()
    generator = torch.Generator().manual_seed(first_difference)
    clean = torch.randint(0, 20, (8,), generator=generator).tolist()
    corrupt = clean[:first_difference] + [(t + 1) % 20 for t in clean[first_difference:]]
    assert shared_prefix(cfg, clean, corrupt) == first_difference
    for receiver in ("q", "k", "v"):
        shared = path_patching(model, clean, corrupt, 3, 4, receiver)
        whole = path_patching(model, clean, corrupt, 3, 4, receiver, reuse_prefix=False)
        assert np.isfinite(shared.metric).sum() == np.isfinite(whole.metric).sum() > 0
        np.testing.assert_allclose(shared.metric, whole.metric, rtol=0, atol=1e-12)
        assert shared.metric_clean == pytest.approx(whole.metric_clean, abs=1e-12)
    assert shared_prefix(dataclasses.replace(cfg, causal=False), clean, corrupt) == 0  # every position sees later ones
    assert shared_prefix(cfg, clean, clean) == len(clean) - 1  # the last position is always run
