"""Train it live's mixture-of-experts tab: a model of the MoE micro-model's shape trained in the
session with a balance weight α and a capacity factor C (model/micro/moe.py's ``train_live``).

References: the routings dropped over capacity, against GShard's rule written out in plain Python
from the router's own probabilities (exact counts); the page's figures, against ``train_live``
called directly with the same settings (deterministic training: equal to 1e-12)."""

import math

import pytest
import torch

from glassbox.model.engine import ModelConfig, Transformer
from glassbox.model.engine.capture import capture
from glassbox.model.micro import moe
from tests.helpers import charts, start


def test_dropped_share_counts_the_routings_over_each_experts_cap():
    cfg = ModelConfig(
        vocab_size=50,
        n_ctx=24,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=16,
        norm="rmsnorm",
        activation="silu",
        gated_mlp=True,
        positional="rope",
        mlp_bias=False,
        n_experts=4,
        experts_top_k=2,
        norm_top_k=True,
        expert_capacity=0.75,
    )
    model = Transformer(cfg).init_weights(3)
    tokens = torch.randint(50, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), capture(moe.ROUTED) as recorder:
        model(tokens)
    probs, weights = recorder.tensors["blocks.0.mlp.hook_router_probs"], recorder.tensors["blocks.0.mlp.hook_expert_weights"]
    capacity = math.ceil(0.75 * 24 * 2 / 4)  # per sequence
    dropped = 0
    for sequence in probs:
        taken = [0] * 4
        for position in sequence:
            for e in position.topk(2).indices.tolist():
                taken[e] += 1
                dropped += taken[e] > capacity
    assert dropped > 0
    assert moe.dropped_share(weights, 2) == pytest.approx(dropped / (3 * 24 * 2), abs=1e-12)


def test_train_live_records_shares_drops_and_its_end():
    curve = moe.train_live(12, 0.0, 1.0, seed=1)
    assert len(curve["shares"]) == len(curve["dropped"]) == 12
    for step in curve["shares"]:
        assert all(sum(block) == pytest.approx(1, abs=1e-3) for block in step)  # rounded to 4 digits each
    end = moe.curve_end(curve, 5)
    shares = torch.tensor(curve["shares"][-5:]).mean(0)
    assert end["largest"] == pytest.approx(shares.max(-1).values.tolist(), abs=1e-7)
    assert end["dropped"] == pytest.approx(torch.tensor(curve["dropped"][-5:]).mean(0).tolist(), abs=1e-7)
    assert 0 < max(end["dropped"]) < 1  # C = 1 turns some routings away, not all
    assert max(moe.curve_end(moe.train_live(12, 0.01, None, seed=1), 5)["dropped"]) == 0  # no cap, no drop


def test_the_experts_tab_trains_with_the_chosen_settings_and_compares_runs():
    at = start("screens/train_live.py")
    at.number_input(key="experts_steps").set_value(20)
    at.selectbox(key="experts_capacity").set_value(1.25)
    next(b for b in at.button if b.label == "Train the experts").click().run()
    assert not at.exception and not at.error
    run = at.session_state["expert_run"]
    direct = moe.curve_end(moe.train_live(20, moe.ALPHA, 1.25, 0), 10)
    assert run["end"]["largest"] == pytest.approx(direct["largest"], abs=1e-12)
    assert run["end"]["dropped"] == pytest.approx(direct["dropped"], abs=1e-12)
    assert float(at.metric[0].value) == pytest.approx(direct["largest"][0], abs=6e-4)  # shown to 3 decimals
    titles = [c["layout"]["title"]["text"] for c in charts(at) if c["layout"].get("title")]
    assert "Routings dropped over capacity" in titles and any("loss" in t for t in titles)
    at.selectbox(key="experts_capacity").set_value("none")
    next(b for b in at.button if b.label == "Train the experts").click().run()
    assert not at.exception and not at.error
    (table,) = [d for d in at.dataframe if "settings" in d.value.columns]
    assert list(table.value["settings"]) == ["α = 0.01, C = none, 20 steps, seed 0", "α = 0.01, C = 1.25, 20 steps, seed 0"]
    assert table.value["dropped, block 1 (blocks.0)"].iloc[0] == 0
