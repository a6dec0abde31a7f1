"""Transcoders trained here (model/tools/train_transcoder.py, `glassbox train-transcoder`), the
shipped set for the default model (assets/default-transcoders), and the graph on them
(`glassbox graph`). References: numpy (explained variance and L0 recomputed from the held-out
MLP inputs and outputs), the real model's logit (the graph's edges and biases add up to it:
float64 1e-10, float32 1e-5), and the library's own graph for the CLI's JSON."""

import json

import numpy as np
import pytest
import torch

import glassbox as gb
from glassbox.model.data.stories import corpus
from glassbox.model.io.sae import load_transcoders
from glassbox.model.tools import train_transcoder
from tests.helpers import cli

PROMPT, TARGET = "Lily had a", " cat"


def test_a_short_training_writes_saelens_transcoders_whose_figures_hold(tmp_path):
    """Reference: numpy on the held-out stories' MLP inputs and outputs, with the weights read back."""
    model = gb.load("default")
    summary = train_transcoder.train(model, tmp_path, steps=20, n_stories=6, d_sae=64, log=lambda *a: None)
    transcoders = load_transcoders(str(tmp_path))
    assert [t.reads for t in transcoders] == [f"blocks.{i}.ln2.hook_out" for i in range(4)]
    assert all(t.architecture == "transcoder" and t.d_sae == 64 for t in transcoders)
    held = corpus(6 + 1)[6:]
    trace = model.trace(model.encode(held[0])[: model.cfg.n_ctx])
    for t, figures in zip(transcoders, summary["blocks"]):
        x, y = trace[t.reads].double().numpy(), trace[t.writes].double().numpy()
        W_enc, b_enc, W_dec, b_dec = (v.double().numpy() for v in (t.W_enc, t.b_enc, t.W_dec, t.b_dec))
        acts = np.maximum(x @ W_enc + b_enc, 0)
        explained = 1 - ((y - (acts @ W_dec + b_dec)) ** 2).sum() / ((y - y.mean(0)) ** 2).sum()
        assert figures["variance_explained_held_out"] == pytest.approx(explained, abs=1e-4)
        assert figures["l0_held_out"] == pytest.approx((acts > 0).sum(-1).mean(), abs=1e-4)
    assert summary["replacement_loss_held_out"] > 0 and summary["loss_held_out"] > 0


def test_the_shipped_transcoders_reconstruct_the_mlps_and_the_graph_is_complete():
    """The shipped set's own training.json says what it reaches; the graph on the default model adds
    up to the real logit (float32 1e-6; float64, model and transcoders: 1e-10); its logit is the
    trace's (float32: 1e-5, the graph's pass is not fused)."""
    shipped = json.loads((gb.load("default").path.parent / "default-transcoders" / "training.json").read_text())
    assert all(b["variance_explained_held_out"] > 0.95 and b["l0_held_out"] < 20 for b in shipped["blocks"])
    assert shipped["replacement_loss_held_out"] < shipped["loss_held_out"] * 1.1
    for dtype, same, tolerance in (("float32", 1e-5, 1e-6), ("float64", 1e-10, 1e-10)):
        model = gb.load("default", dtype=dtype)
        graph = model.attribution_graph(PROMPT, TARGET)
        real = float(model.trace(PROMPT)["hook_logits"][-1, model.token_id(TARGET)])
        assert graph.target_value == pytest.approx(real, abs=same)  # float32: fused and explicit kernels differ
        assert graph.completeness() < tolerance, dtype
        assert graph.edges.dtype == torch.float64


def test_the_cli_prints_the_graph_and_trains(tmp_path):
    out = cli("graph", "--prompt", PROMPT, "--target", TARGET, "--share", "0.5", "--json")
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    graph = gb.load("default").attribution_graph(PROMPT, TARGET)
    assert printed["kept"] == graph.pruned(0.5) and len(printed["nodes"]) == len(graph.nodes)
    for edge in printed["edges"]:
        assert edge["weight"] == pytest.approx(float(graph.edges[edge["target"], edge["source"]]), abs=1e-12)
    assert printed["completeness"] < 1e-6
    node = next(k for k, n in enumerate(graph.nodes) if n.kind == "feature")
    switched = cli("graph", "--prompt", PROMPT, "--target", TARGET, "--intervene", f"{node}:0", "--json")
    done = gb.load("default").intervene(PROMPT, graph, node, 0.0)
    printed = json.loads(switched.stdout)["intervention"]
    assert printed["logit_after"] == pytest.approx(done.logit_after, abs=1e-6)
    assert printed["predicted"] == pytest.approx(done.predicted, abs=1e-6)
    not_a_feature = cli("graph", "--prompt", PROMPT, "--target", TARGET, "--intervene", "0:0")
    assert not_a_feature.returncode != 0 and "Only a feature" in not_a_feature.stderr
    bad = cli("graph", "--prompt", PROMPT, "--target", TARGET, "--share", "2")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    made = cli("train-transcoder", "--steps", "3", "--stories", "3", "--d-sae", "16", "--out", str(tmp_path / "tc"))
    assert made.returncode == 0, made.stderr
    assert len(load_transcoders(str(tmp_path / "tc"))) == 4


def test_a_graph_goes_to_circuit_tracers_json_and_back(tmp_path):
    """Reference: circuit-tracer's frontend (circuit_tracer/frontend/graph_models.py) names nodes
    E_{token}_{position}, {layer}_{feature}_{position}, {layer}_-1_{position} (an error) and
    {layers + 1}_{token}_{position} (the logit), numbers a feature by Cantor's pairing of (layer,
    feature), and writes links as {source, target, weight}: the file written here has those names,
    and read back gives the kept nodes and their edges exactly."""
    from glassbox.model.analysis.graph_json import from_circuit_tracer

    model = gb.load("default")
    tokens = model.tokens(PROMPT)
    graph = model.attribution_graph(PROMPT, TARGET)
    kept = graph.pruned(0.8)
    out = cli("graph", "--prompt", PROMPT, "--target", TARGET, "--export", str(tmp_path / "graph.json"))
    assert out.returncode == 0, out.stderr
    written = json.loads((tmp_path / "graph.json").read_text())
    assert set(written) == {"metadata", "qParams", "nodes", "links"}
    assert written["metadata"]["prompt_tokens"] == [model.pieces[t] for t in tokens]
    for entry, i in zip(written["nodes"], kept):
        n = graph.nodes[i]
        expected = {
            "embedding": f"E_{tokens[n.position]}_{n.position}",
            "feature": f"{n.block}_{n.feature}_{n.position}",
            "error": f"{n.block}_-1_{n.position}",
            "logit": f"{model.cfg.n_layers + 1}_{model.token_id(TARGET)}_{n.position}",
        }[n.kind]
        assert entry["node_id"] == expected
        if n.kind == "feature":
            x, y = n.block, n.feature
            assert entry["feature"] == (x + y) * (x + y + 1) // 2 + y and entry["activation"] == pytest.approx(n.value)
    nodes, edges, ids = from_circuit_tracer(written)
    assert [(n.kind, n.position, n.block, n.feature) for n in nodes] == [
        (graph.nodes[i].kind, graph.nodes[i].position, graph.nodes[i].block, graph.nodes[i].feature) for i in kept
    ]
    assert torch.equal(edges, graph.edges[kept][:, kept])
    with pytest.raises(gb.GlassboxError, match="Not a circuit-tracer graph"):
        from_circuit_tracer({"nodes": [{"feature_type": "attention"}], "links": []})
