"""Models split across devices (model/engine/placement.py, glassbox.load(device_map=…),
`glassbox plan`).

References:
- a split model: the same model on one device. On this CPU the split is into the CPU and the
  disk (accelerate's offload: an offloaded block's weights exist only during its forward), so
  every activation, every gradient (the offloaded weights' included) and a sampled generation
  must equal the plain model's (float32, 1e-6; they come out equal);
- a plan: the loader's own parameter count (checkpoint.count_numbers, independent of the
  placement) for the weights, and traces measured by run_trace for the trace's size (the
  registry's estimate from shapes is at least what a trace holds, and within 10 % of it).
"""

from __future__ import annotations

import json

import pytest
import torch

import glassbox as gb
from glassbox.model.engine import GlassboxError, build_model, run_trace
from glassbox.model.engine.placement import memory_plan, parts, placement, total, traced_plan
from glassbox.model.io.catalog import PLAN_SHAPES
from glassbox.model.io.checkpoint import count_numbers
from glassbox.model.io.convert import CONVERTERS
from tests.helpers import cli, require

require("accelerate")
PROMPT = "The cat sat on the mat and the dog"


def split_map(n_layers: int, on_disk: set[int]) -> dict:
    return {
        "embed": "cpu",
        "pos_embed": "cpu",
        "ln_final": "cpu",
        **{f"blocks.{i}": "disk" if i in on_disk else "cpu" for i in range(n_layers)},
    }


def test_a_model_split_over_the_cpu_and_the_disk_traces_and_generates_as_on_one_device(gpt2_dir):
    plain = gb.load(str(gpt2_dir), dtype="float32", device="cpu")
    split = gb.load(str(gpt2_dir), dtype="float32", device_map=split_map(3, {1, 2}))
    assert placement(split.model)["blocks.1"] == "disk" and split.model.blocks[1].attn.W_Q.device.type == "meta"
    assert "blocks 1 on cpu, 2–3 on disk" in repr(split)  # counted from 1, as the pages count
    want, got = plain.trace(PROMPT, backward=True), split.trace(PROMPT, backward=True)
    assert got.names() == want.names()
    assert "grad:blocks.2.attn.W_Q" in got.names()  # an offloaded block's weight: its gradient too
    for name in want.names():
        assert torch.allclose(got[name], want[name], rtol=0, atol=1e-6, equal_nan=True), name
    a, b = plain.generate(PROMPT, 8, temperature=0.9, seed=3), split.generate(PROMPT, 8, temperature=0.9, seed=3)
    assert [t.token_id for t in a] == [t.token_id for t in b]
    assert all(torch.allclose(x.before, y.before, atol=1e-6) for x, y in zip(a, b))

    def zero_head(z):  # an edit inside an offloaded block, as every why-tool makes
        out = z.clone()
        out[1] = 0
        return out

    with plain.edit({"blocks.2.attn.hook_z": zero_head}):
        want = plain.trace(PROMPT)
    with split.edit({"blocks.2.attn.hook_z": zero_head}):
        got = split.trace(PROMPT)
    assert torch.allclose(got["hook_logits"], want["hook_logits"], atol=1e-6)


def test_auto_fills_the_cpu_then_the_disk_and_bad_maps_are_clean_errors(gpt2_dir):
    tight = gb.load(str(gpt2_dir), dtype="float32", device_map="auto", max_memory={"cpu": 200_000})
    where = placement(tight.model)
    assert where["embed"] == "cpu" and "disk" in where.values()
    blocks = [where[f"blocks.{i}"] for i in range(3)]
    assert blocks == sorted(blocks, key=lambda d: d == "disk")  # in order: the CPU's blocks, then the disk's
    roomy = gb.load(str(gpt2_dir), dtype="float32", device_map="auto", max_memory={"cpu": 10**9})
    assert set(placement(roomy.model).values()) == {"cpu"}
    for bad, message in (
        (split_map(2, set()), "lacks \\['blocks.2'\\]"),
        ({**split_map(3, set()), "embed": "disk"}, "Only blocks can wait on the disk"),
        ("everywhere", "auto"),
    ):
        with pytest.raises(GlassboxError, match=message):
            gb.load(str(gpt2_dir), dtype="float32", device_map=bad)


def meta_model(hub_id: str, dtype=torch.bfloat16):
    cfg = CONVERTERS[PLAN_SHAPES[hub_id]["model_type"]].config(PLAN_SHAPES[hub_id])
    with torch.device("meta"):
        return cfg, build_model(cfg).in_precision(dtype)


@pytest.mark.parametrize("hub_id", list(PLAN_SHAPES))
def test_a_plan_for_eight_gpus_spreads_whole_blocks_in_order_within_each_gpu(hub_id):
    cfg, model = meta_model(hub_id)
    mapping, rows = traced_plan(model, 8, 80 * 2**30, 256 * 2**30, 512)
    blocks = [mapping[f"blocks.{i}"] for i in range(cfg.n_layers)]
    assert blocks == sorted(blocks) and all(isinstance(d, int) for d in blocks)  # every block on a GPU, in order
    assert len(set(blocks)) >= 6  # spread, not filled one GPU after another
    assert sum(r["weights_bytes"] for r in rows) == 2 * count_numbers(cfg)  # bfloat16: 2 bytes a number
    assert all(r["fits"] and total(r) <= 80 * 2**30 for r in rows)
    assert sorted(b for r in rows for b in r["blocks"]) == list(range(cfg.n_layers))


def test_llama_70b_on_two_gpus_offloads_and_says_the_first_gpu_cannot_hold_the_trace():
    cfg, model = meta_model("meta-llama/Meta-Llama-3-70B")
    mapping, rows = traced_plan(model, 2, 80 * 2**30, 256 * 2**30, 512)
    assert {"cpu", "disk"} & set(mapping.values())
    first = next(r for r in rows if r["device"] == "cuda:0")
    assert not first["fits"] and total(first) > 80 * 2**30  # the offloaded blocks' trace lands there


def test_the_trace_estimate_holds_what_a_measured_trace_holds():
    for name in ("default", "micro-moe"):
        model = gb.load(name, device="cpu").model
        mapping = dict.fromkeys(parts(model), "cpu")
        T = min(60, model.cfg.n_ctx)
        (row,) = memory_plan(model, mapping, T)
        trace = run_trace(model, list(range(T)), backward=True)
        parameters = sum(p.nbytes for p in model.parameters())
        measured = (
            sum(t.nbytes for t in trace.activations.held.values()) + sum(t.nbytes for t in trace.grads.values()) - parameters
        )
        assert measured <= row["trace_bytes"] <= 1.1 * measured, (name, row["trace_bytes"], measured)
        assert row["weights_bytes"] == row["gradient_bytes"] == parameters


def test_glassbox_plan_prints_the_map_and_each_devices_memory():
    run = cli("plan", "mistralai/Mixtral-8x7B-v0.1", "--gpus", "8", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["dtype"] == "bfloat16" and out["tokens"] == 512
    assert sorted(b for d in out["devices"] for b in d["blocks"]) == list(range(32))
    assert {d["device"] for d in out["devices"]} <= {f"cuda:{i}" for i in range(8)}
    text = cli("plan", "meta-llama/Meta-Llama-3-70B", "--gpus", "2")
    assert text.returncode == 0 and "NO" in text.stdout and "disk" in text.stdout
    bad = cli("plan", "no-such/model", "--gpus", "2")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "No shape" in bad.stderr


def test_the_servers_device_map_setting_loads_split(gpt2_dir, monkeypatch):
    """GLASSBOX_DEVICE_MAP (app/resources.py): the shared models are loaded with that device map."""
    require("streamlit")  # the app's extra (a GPU machine may lack it)
    from glassbox.app import resources

    monkeypatch.setenv(resources.DEVICE_MAP_SETTING, "auto")
    loaded = resources.split_load(str(gpt2_dir), dtype="float32", device="cpu")
    assert placement(loaded.model) is not None and set(placement(loaded.model).values()) == {"cpu"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_split_across_a_gpu_and_the_cpu_equals_the_model_on_the_gpu(gpt2_dir):
    """Blocks 1 and 2 held on the CPU, offloaded to cuda:0 for their forward: every tensor and
    gradient as on the GPU alone (float64: 1e-10)."""
    whole = gb.load(str(gpt2_dir), dtype="float64", device="cuda")
    mapping = {part: 0 for part in parts(whole.model)} | {"blocks.1": "cpu", "blocks.2": "cpu"}
    split = gb.load(str(gpt2_dir), dtype="float64", device_map=mapping)
    assert "blocks 1 on cuda:0, 2–3 on cpu" in repr(split)
    want, got = whole.trace(PROMPT, backward=True), split.trace(PROMPT, backward=True)
    assert got.names() == want.names() and "grad:blocks.2.attn.W_Q" in got.names()
    for name in want.names():
        assert torch.allclose(got[name].cpu(), want[name].cpu(), rtol=0, atol=1e-10, equal_nan=True), name
    a, b = whole.generate(PROMPT, 6, temperature=0.9, seed=1), split.generate(PROMPT, 6, temperature=0.9, seed=1)
    assert [t.token_id for t in a] == [t.token_id for t in b]


def test_the_cli_splits_a_model_on_request_and_prints_what_the_whole_one_does(gpt2_dir):
    """--device-map auto (here: everything fits the CPU) generates what the plain load does."""
    args = ["generate", "--model", str(gpt2_dir), "--prompt", PROMPT, "--max-new-tokens", "5", "--temperature", "0", "--json"]
    plain, split = cli(*args), cli(*args, "--device-map", "auto")
    assert plain.returncode == split.returncode == 0, split.stderr
    assert json.loads(split.stdout)["completion"] == json.loads(plain.stdout)["completion"]


def test_a_split_models_passes_weigh_on_the_one_budget_so_that_no_device_overflows(gpt2_dir):
    """model/serving/sizing.device_weight. Reference: the per-device shares memory_plan gives
    (its trace bytes are tested above) and the budgets given; admitting passes against the first
    device's budget with the weighted cost never takes a device past its own budget."""
    from glassbox.model.serving.sizing import device_weight

    whole = gb.load(str(gpt2_dir), dtype="float32", device="cpu")
    assert device_weight(whole.model) == 1.0
    model = gb.load(str(gpt2_dir), dtype="float32", device="cpu").model
    model.device_map = {"embed": 0, "pos_embed": 0, "blocks.0": 0, "blocks.1": 1, "blocks.2": 1, "ln_final": 1}
    rows = memory_plan(model, model.device_map, 64)
    shares = {r["device"]: r["trace_bytes"] / sum(x["trace_bytes"] for x in rows) for r in rows}
    for budgets in ({"cuda:0": 8, "cuda:1": 8}, {"cuda:0": 8, "cuda:1": 2}, {"cuda:0": 1, "cuda:1": 16}):
        weight = device_weight(model, budgets)
        assert weight == pytest.approx(max(shares[d] * budgets["cuda:0"] / budgets[d] for d in shares))
        admitted = budgets["cuda:0"] / weight  # the bytes of passes the one budget lets in
        assert all(admitted * shares[d] <= budgets[d] * (1 + 1e-12) for d in shares)
    # on equal budgets two devices sharing the trace let more in than one device holding it all
    assert device_weight(model, {"cuda:0": 8, "cuda:1": 8}) < 1
