"""Edits compose with traces, with analyses and with each other (model/engine/capture.py: the
active recorders nest). Reference for each: the same computation, without edits, on a copy of
the model whose weights were changed to do what the edit does (float64; 1e-12 relative).
- zeroing head h's z in block 0 is W_O[h] = 0 (and b_O kept);
- scaling hook_embed by c is W_E × c (a model without positions, so the embedding is the stream);
- two nested scalings, c1 outside and c2 inside, are W_E × c1 × c2."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from glassbox.model.analysis.patching import activation_patching
from glassbox.model.engine import ModelConfig, run_trace
from glassbox.model.engine.edits import editing
from glassbox.model.engine.errors import GlassboxError
from tests.helpers import build_random_model

CFG = ModelConfig(vocab_size=30, n_ctx=16, d_model=12, n_layers=2, n_heads=3, d_ff=20)
NO_POSITIONS = ModelConfig(
    vocab_size=30, n_ctx=16, d_model=12, n_layers=2, n_heads=3, d_ff=20, positional="none", tie_embeddings=False
)  # W_E scaled in a copy: not the unembedding too
TOKENS = [3, 14, 7, 22, 9, 1, 5]
HEAD = 1


def zero_head(z: torch.Tensor) -> torch.Tensor:
    out = z.clone()
    out[:, HEAD] = 0
    return out


def without_head(model):
    """The reference: a copy whose block 0 head HEAD writes nothing (its W_O zero)."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.blocks[0].attn.W_O[HEAD].zero_()
    return twin


def scaled_embedding(model, factor: float):
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.embed.W_E.mul_(factor)
    return twin


def assert_same(got, want, names):
    for name in names:
        assert torch.allclose(got[name], want[name], rtol=1e-12, atol=1e-12), name


def test_a_trace_inside_an_edit_is_the_edited_models():
    model = build_random_model(CFG)
    with editing({"blocks.0.attn.hook_z": zero_head}):
        edited = run_trace(model, TOKENS, backward=True)
    reference = run_trace(without_head(model), TOKENS, backward=True)
    assert edited["blocks.0.attn.hook_z"][HEAD].abs().max() == 0  # the trace holds the edited z
    assert reference["blocks.0.attn.hook_z"][HEAD].abs().max() > 0  # the copy computes it, and drops it at W_O
    after = [n for n in reference.names() if n.startswith(("blocks.1.", "hook_logits", "hook_log_probs", "ln_final"))]
    after += ["blocks.0.hook_attn_out", "blocks.0.hook_resid_post", "grad:blocks.1.attn.W_Q", "grad:embed.W_E"]
    assert_same(edited, reference, after)
    assert edited.loss == pytest.approx(reference.loss, rel=1e-12)
    clean = run_trace(model, TOKENS)
    assert not torch.allclose(clean["hook_logits"], edited["hook_logits"])  # the edit did something


def test_nested_edits_compose_outermost_first():
    model = build_random_model(NO_POSITIONS)
    with editing({"hook_embed": lambda x: x * 2.0}), editing({"hook_embed": lambda x: x * 3.0}):
        edited = run_trace(model, TOKENS, backward=True)
    reference = run_trace(scaled_embedding(model, 6.0), TOKENS, backward=True)
    assert_same(edited, reference, ["hook_embed", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_post", "hook_logits"])
    order = []
    with (
        editing({"hook_embed": lambda x: order.append("outer") or x}),
        editing({"hook_embed": lambda x: order.append("inner") or x}),
    ):
        run_trace(model, TOKENS)
    assert order == ["outer", "inner"]


def test_patching_inside_an_edit_patches_the_edited_model():
    model = build_random_model(CFG)
    corrupt = [3, 14, 7, 22, 9, 1, 8]
    with editing({"blocks.0.attn.hook_z": zero_head}):
        edited = activation_patching(model, TOKENS, corrupt, answer=4, wrong=6, site="resid_pre")
    reference = activation_patching(without_head(model), TOKENS, corrupt, answer=4, wrong=6, site="resid_pre")
    assert edited.metric_clean == pytest.approx(reference.metric_clean, rel=1e-12)
    assert np.allclose(edited.metric, reference.metric, rtol=1e-12, atol=1e-12)
    assert np.allclose(edited.estimate, reference.estimate, rtol=1e-12, atol=1e-12)


def test_an_edit_of_a_name_no_pass_computed_still_says_so():
    model = build_random_model(CFG)
    with pytest.raises(GlassboxError, match="No tensor named blocks.0.attn.hook_zz"):
        with editing({"blocks.0.attn.hook_zz": zero_head}):
            run_trace(model, TOKENS)
