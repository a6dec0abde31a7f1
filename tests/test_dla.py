"""Direct logit attribution (model/analysis/dla.py). Reference: the model's own logit (its
hook_logits, or hook_logits_uncapped where the logits are soft-capped) from the same forward
pass; the parts must add up to it, float64, ≤1e-10 × (1 + |logit|), on every kind of model the
engine runs (GPT-2-like, Llama-like, Gemma-like with post norms and soft-caps, NeoX-like
parallel blocks) and on the worked example."""

import copy
import dataclasses

import pytest
import torch

from glassbox.model.analysis.dla import direct_logit_attribution, parts_written
from glassbox.model.engine import GlassboxError, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import build_random_model
from tests.test_gradient_cells import MODELS


def model_and_tokens(name):
    if name == "worked-example":
        return copy.deepcopy(load("worked-example").model).double(), [0, 1, 2, 3, 0]
    model = build_random_model(MODELS[name])
    return model, torch.randint(0, model.cfg.vocab_size, (7,), generator=torch.Generator().manual_seed(3)).tolist()


@pytest.mark.parametrize("name", ["worked-example", *MODELS])
@pytest.mark.parametrize("position, wrong", [(-1, None), (2, None), (-1, 4)])
def test_the_parts_add_up_to_the_logit(name, position, wrong):
    model, tokens = model_and_tokens(name)
    result = direct_logit_attribution(model, tokens, 5, position, wrong)
    assert len(result.values) == len(result.names) == len(parts_written(model))
    assert abs(result.values.sum() - result.logit) <= 1e-10 * (1 + abs(result.logit))
    assert (abs(result.values) > 1e-6).sum() > 3  # many parts, not one carrying it all


@pytest.mark.parametrize("name", list(MODELS))
def test_the_logit_is_the_models_own(name):
    """The attributed logit is the forward pass's (before any soft-cap), not one recomputed here."""
    model, tokens = model_and_tokens(name)
    result = direct_logit_attribution(model, tokens, 5)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0, -1]
    cap = model.cfg.final_softcap
    expected = logits[5] if cap is None else cap * torch.atanh(logits[5] / cap)
    assert result.logit == pytest.approx(float(expected), abs=1e-9)


def test_heads_are_split_unless_post_norms_join_them():
    names = {name: parts_written(build_random_model(cfg)) for name, cfg in MODELS.items()}
    for name, parts in names.items():
        post = MODELS[name].post_norms
        assert any(p.endswith("hook_attn_out") for p in parts) == post
        assert any("hook_result[" in p for p in parts) != post


def test_every_part_has_words_of_its_own():
    """The Ask why chart names parts as every page names blocks and heads (from 1): each model's
    parts get distinct words, none of them an engine name."""
    from glassbox.model.analysis.dla import part_words

    for name, cfg in MODELS.items():
        parts = parts_written(build_random_model(cfg))
        words = [part_words(p) for p in parts]
        assert len(set(words)) == len(parts) and not any("hook_" in w or "blocks." in w for w in words), name
    assert part_words("blocks.3.attn.hook_result[1]") == "block 4, head 2"


def test_bad_positions_and_tokens_say_why():
    model, tokens = model_and_tokens("worked-example")
    with pytest.raises(GlassboxError, match="outside the prompt"):
        direct_logit_attribution(model, tokens, 5, position=9)
    with pytest.raises(GlassboxError, match="outside the vocabulary"):
        direct_logit_attribution(model, tokens, 99)


def test_without_a_final_norm_a_heads_share_is_its_output_times_the_unembedding():
    """Each part on its own: with no final norm, head h's share is hook_result[h, position] ·
    W_U[:, token], and an MLP's is hook_mlp_out · W_U[:, token] (run_trace, float64, ≤1e-12)."""
    model = build_random_model(dataclasses.replace(MODELS["modern"], final_norm=False))
    tokens = [1, 4, 2, 7, 3]
    result = direct_logit_attribution(model, tokens, 5, position=3)
    trace = run_trace(model, tokens, names=["blocks.1.attn.hook_result", "blocks.0.hook_mlp_out"])
    share = dict(zip(result.names, result.values))
    W_U = model.W_U.detach()
    assert share["blocks.1.attn.hook_result[1]"] == pytest.approx(
        float(trace["blocks.1.attn.hook_result"][1, 3] @ W_U[:, 5]), abs=1e-12
    )
    assert share["blocks.0.hook_mlp_out"] == pytest.approx(float(trace["blocks.0.hook_mlp_out"][3] @ W_U[:, 5]), abs=1e-12)
