"""A trace's figures (model/plot/): ``Trace.figure`` and the explorer draw one slice rule.

References: the attention the model computes (z = pattern · v, scores = q · kᵀ · scale, float64,
1e-12), with the key/value head a query head reads computed here from the config's grouping
(query head h reads key/value head h // (n_heads / n_kv_heads)) rather than by ModelConfig.kv_head;
the two ways of drawing (the trace's figure, the explorer's grid) are compared exactly."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

import glassbox as gb
from glassbox.app.explore.backward import cached_grid
from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, names, run_trace
from glassbox.model.plot.grid import unit_axis, unit_index
from glassbox.model.plot.labels import token_text

TOKENS = [3, 1, 4, 1, 5, 9, 2]
GROUPED = {  # learned positions: the keys the scores read are hook_k itself (no rotation)
    "grouped-query: 4 query heads, 2 key/value heads": ModelConfig(
        vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24
    ),
    "multi-query: 6 query heads, 1 key/value head": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=12,
        n_layers=1,
        n_heads=6,
        n_kv_heads=1,
        d_ff=16,
        norm="rmsnorm",
        gated_mlp=True,
        activation="silu",
    ),
}


@pytest.fixture(params=list(GROUPED))
def traced(request, random_model):
    cfg = GROUPED[request.param]
    pieces = [f" w{i}" for i in range(cfg.vocab_size)]
    return gb.Trace.of(run_trace(random_model(cfg), TOKENS, backward=True), cfg, pieces)


def explorer(trace: gb.Trace) -> types.SimpleNamespace:
    """What the explorer's views label a grid with (app/explore/common.py's Explorer): each
    position as "position:token", every token id as drawn."""
    drawn = [token_text(p) for p in trace.pieces]
    return types.SimpleNamespace(
        cfg=trace.cfg,
        tokens=trace.tokens,
        source_labels=[],
        vocab_pieces=drawn,
        labels=[f"{i}:{drawn[t]}" for i, t in enumerate(trace.tokens)],
    )


def blank(values: np.ndarray) -> np.ndarray:
    """As a heatmap holds values: −∞ (a masked score) left blank, NaN."""
    return np.where(np.isfinite(values), values, np.nan)


def test_every_head_is_drawn_alike_by_the_trace_and_the_explorer_and_reads_its_groups_key_value_head(traced):
    """Every head of every per-head tensor, gradient and weight (hook_k, W_V, grad:…hook_q …),
    drawn by trace.figure and by the explorer's grid (backward.py's cached_grid, over tensor_grid):
    the same numbers and labels, and on a key/value tensor the key/value head of the query head's
    group."""
    cfg, ctx = traced.cfg, explorer(traced)
    group = cfg.n_heads // cfg.n_kv_heads
    per_head = [n for n in traced if unit_axis(n) in ("head", "kv_head")]
    assert any(names.axes(n)[0] == "kv_head" for n in per_head) and any(n.startswith(GRAD) for n in per_head)
    for name in per_head:
        shared = names.axes(name)[0] == "kv_head"
        for head in range(cfg.n_heads):
            drawn = traced.figure(name, head=head)
            values, rows, cols, *_ = cached_grid(ctx, traced, name, head)
            z = np.asarray(drawn.data[0].z, dtype=np.float32)
            np.testing.assert_array_equal(z, blank(values), err_msg=f"{name} head {head}")
            assert list(drawn.data[0].y) == list(rows) and list(drawn.data[0].x) == list(cols)
            index = head // group if shared else head
            expected = traced[name][index].float().numpy()
            np.testing.assert_array_equal(z, blank(expected.reshape(z.shape)), err_msg=f"{name} head {head}")
            assert f"{name}[{index}]" in drawn.layout.title.text
            assert unit_index(cfg, name, head) == (index,)


def test_the_key_value_head_drawn_for_a_query_head_is_the_one_its_attention_reads(traced):
    """The model's own arithmetic, with the drawn key/value heads: query head h's z is its pattern
    times the values drawn for h, and its scores are its queries times the keys drawn for h."""
    cfg = traced.cfg
    scale = 1 / math.sqrt(cfg.d_model // cfg.n_heads)
    for block in range(cfg.n_layers):
        p = f"blocks.{block}.attn."
        for head in range(cfg.n_heads):
            index = unit_index(cfg, p + "hook_v", head)
            v, k = traced[p + "hook_v"][index], traced[p + "hook_k"][index]
            torch.testing.assert_close(traced[p + "hook_pattern"][head] @ v, traced[p + "hook_z"][head], rtol=0, atol=1e-12)
            torch.testing.assert_close(
                traced[p + "hook_q"][head] @ k.T * scale, traced[p + "hook_scores"][head], rtol=0, atol=1e-12
            )


def test_a_head_or_expert_outside_the_model_is_refused_in_words(traced):
    with pytest.raises(GlassboxError, match="head must be 0 … 3|head must be 0 … 5"):
        traced.figure("k", block=0, head=traced.cfg.n_heads)
    traced.figure("k", block=0, head=traced.cfg.n_heads - 1)  # once a bare IndexError past the key/value heads
