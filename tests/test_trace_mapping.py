"""A trace is a read-only mapping of names to tensors, and the one class a user gets
(``glassbox.Trace``). References: the registry's own list of a model's names
(names.activation_names) and the trace's activations and gradients dicts read directly; the
dataclass's field-by-field equality; a pickle round trip."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping

import pytest
import torch

import glassbox as gb
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, names, run_trace
from glassbox.model.engine.trace import Trace as EngineTrace

CFG = ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24)
TOKENS = [3, 1, 4, 1, 5]


@pytest.fixture(scope="module")
def model():
    from tests.helpers import build_random_model

    return build_random_model(CFG)


@pytest.fixture(scope="module")
def trace(model):
    return gb.Trace.of(run_trace(model, TOKENS, backward=True), CFG, [f"t{i}" for i in range(CFG.vocab_size)])


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN for NaN (hook_loss has none at the last position: it has no next token)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def test_a_trace_is_a_mapping_of_its_names_then_its_gradients(trace):
    assert isinstance(trace, Mapping) and isinstance(trace, EngineTrace)
    assert "blocks.0.hook_resid_pre" in trace and "grad:blocks.0.hook_resid_pre" in trace
    assert "blocks.0.hook_resid_prex" not in trace and 0 not in trace and None not in trace
    order = names.activation_names(CFG) + list(trace.grads)
    assert list(trace) == trace.names() == order and list(trace.keys()) == order
    assert len(trace) == len(order) and any(n.startswith(GRAD + "blocks.") for n in trace)
    for name, tensor in trace.items():
        direct = trace.grads[name] if name.startswith(GRAD) else trace.activations[name]
        assert same(tensor, direct), name
    assert trace.get("blocks.9.hook_resid_pre") is None and trace.get("nothing", 7) == 7
    assert torch.equal(trace.get("hook_logits"), trace.activations["hook_logits"])


def test_a_missing_name_is_a_key_error_naming_the_nearest(model, trace):
    with pytest.raises(KeyError) as typo:
        trace["blocks.1.attn.hook_patern"]
    message = str(typo.value)
    assert isinstance(typo.value, GlassboxError) and "\n" not in message
    assert "no tensor is named so" in message and "nearest: blocks.1.attn.hook_pattern" in message
    with pytest.raises(KeyError, match="nearest: grad:blocks.0.hook_resid_pre"):
        trace["grad:blocks.0.hook_resid_pr"]
    kept = gb.Trace.of(run_trace(model, TOKENS, names=["blocks.0.*"]), CFG, [])
    with pytest.raises(KeyError, match="did not keep it.*nearest: blocks.0.hook_resid_post"):
        kept["blocks.1.hook_resid_post"]
    with pytest.raises(KeyError, match="no gradients .*backward=True"):
        kept["grad:blocks.0.hook_resid_pre"]


def test_transformer_lens_shorthand_names_a_block_tensor(trace):
    """trace["pattern", 1] is trace[gb.name("pattern", 1)], a norm's third part its norm, and a
    "grad:" on the short name the gradient."""
    assert torch.equal(trace["pattern", 1], trace["blocks.1.attn.hook_pattern"])
    assert torch.equal(trace["resid_pre", 0], trace.activations["blocks.0.hook_resid_pre"])
    assert torch.equal(trace["scale", 0, "ln1"], trace["blocks.0.ln1.hook_scale"])
    assert torch.equal(trace["grad:resid_post", 1], trace.grads["grad:blocks.1.hook_resid_post"])
    assert ("pattern", 1) in trace and ("pattern", 7) not in trace and ("no_such_thing", 0) not in trace
    with pytest.raises(KeyError, match="say which block"):
        trace["pattern",]
    assert trace.get(("no_such_thing", 0)) is None
    with pytest.raises(KeyError, match="blocks.7.attn.hook_pattern"):
        trace["pattern", 7]


def test_one_trace_class_that_keeps_dataclass_equality_and_pickles(model, trace):
    assert type(trace) is gb.Trace and not hasattr(gb, "Traced") and "Traced" not in dir(gb)
    assert type(gb.load("worked-example").trace("the cat")) is gb.Trace
    # equality is the dataclass's, field by field (the Mapping's would compare every tensor)
    assert trace == dataclasses.replace(trace) and trace != dataclasses.replace(trace, tokens=[3, 1, 4, 1, 6])
    with pytest.raises(TypeError):
        hash(trace)  # mutable: unhashable, as before (the app keys its caches by id)
    again = pickle.loads(pickle.dumps(trace))
    assert type(again) is gb.Trace and again.names() == trace.names() and again.cfg == CFG
    assert all(same(again[n], trace[n]) for n in trace)
    assert (
        repr(trace) == f"<Trace: 5 tokens, {len(trace.activations)} tensors, {len(trace.grads)} gradients, loss {trace.loss:.4g}>"
    )
