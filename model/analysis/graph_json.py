"""An attribution graph as circuit-tracer's and Neuronpedia's graph JSON (their frontend's
``graph_models``: metadata, qParams, nodes, links), and back, so that a graph made here opens
there and one made there opens here.

Node ids follow circuit-tracer: an input token ``E_{token id}_{position}``, a feature
``{block}_{feature}_{position}``, an error ``{block}_-1_{position}``, the logit
``{blocks + 1}_{token id}_{position}``. A link is ``{source, target, weight}``: the direct effect."""

from __future__ import annotations

import torch

from glassbox.model.analysis.attribution_graph import Graph, Node
from glassbox.model.engine import GlassboxError


def node_id(node: Node, tokens: list[int], n_layers: int, target: int) -> str:
    if node.kind == "embedding":
        return f"E_{tokens[node.position]}_{node.position}"
    if node.kind == "feature":
        return f"{node.block}_{node.feature}_{node.position}"
    if node.kind == "error":
        return f"{node.block}_-1_{node.position}"
    return f"{n_layers + 1}_{target}_{node.position}"


def to_circuit_tracer(
    graph: Graph, tokens: list[int], pieces: list[str], n_layers: int, kept: list[int], slug: str, scan: str
) -> dict:
    """The ``kept`` nodes (``Graph.pruned``) and the links among them, as circuit-tracer writes a graph file."""
    influence = graph.influence()
    ids = [node_id(n, tokens, n_layers, graph.token) for n in graph.nodes]
    nodes = []
    for i in kept:
        n = graph.nodes[i]
        entry = {
            "node_id": ids[i],
            "feature": {"embedding": n.position, "feature": _cantor(n.block or 0, n.feature or 0), "error": -1}.get(
                n.kind, graph.token
            ),
            "layer": {"embedding": "E", "logit": str(n_layers + 1)}.get(n.kind, str(n.block)),
            "ctx_idx": n.position,
            "feature_type": {
                "embedding": "embedding",
                "feature": "cross layer transcoder",
                "error": "mlp reconstruction error",
                "logit": "logit",
            }[n.kind],
            "token_prob": graph.probability if n.kind == "logit" else 0.0,
            "is_target_logit": n.kind == "logit",
            "run_idx": 0,
            "reverse_ctx_idx": 0,
            "jsNodeId": ids[i],
            "clerp": f'Output "{pieces[graph.token]}" (p={graph.probability:.3f})' if n.kind == "logit" else "",
            "influence": None if n.kind == "logit" else float(influence[i]),
            "activation": n.value if n.kind == "feature" else None,
        }
        nodes.append(entry)
    links = [
        {"source": ids[j], "target": ids[i], "weight": float(graph.edges[i, j])}
        for i in kept
        for j in kept
        if graph.edges[i, j] != 0
    ]
    metadata = {
        "slug": slug,
        "scan": scan,
        "transcoder_list": [],
        "prompt_tokens": [pieces[t] for t in tokens],
        "prompt": "".join(pieces[t] for t in tokens),
        "node_threshold": None,
        "schema_version": 1,
    }
    q_params = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": metadata, "qParams": q_params, "nodes": nodes, "links": links}


def from_circuit_tracer(data: dict) -> tuple[list[Node], torch.Tensor, list[str]]:
    """A graph file's nodes (as Glassbox's ``Node``s, in the file's order), its links as an edge
    matrix (``edges[target, source]``), and the node ids."""
    try:
        entries, links = data["nodes"], data["links"]
        nodes, ids = [], []
        for entry in entries:
            kind = {
                "embedding": "embedding",
                "cross layer transcoder": "feature",
                "mlp reconstruction error": "error",
                "logit": "logit",
            }[entry["feature_type"]]
            parts = str(entry["node_id"]).split("_")
            block = None if kind in ("embedding", "logit") else int(parts[0])
            feature = int(parts[1]) if kind == "feature" else None
            value = float(entry.get("activation") or 0.0) if kind == "feature" else 0.0
            nodes.append(Node(kind, int(entry["ctx_idx"]), block, feature, value))
            ids.append(str(entry["node_id"]))
        index = {node: i for i, node in enumerate(ids)}
        edges = torch.zeros(len(ids), len(ids), dtype=torch.float64)
        for link in links:
            edges[index[link["target"]], index[link["source"]]] = float(link["weight"])
    except (KeyError, TypeError, ValueError) as exc:
        raise GlassboxError(f"Not a circuit-tracer graph file: {type(exc).__name__} {exc}") from None
    return nodes, edges, ids


def _cantor(x: int, y: int) -> int:
    """circuit-tracer's feature number for a (layer, feature) pair: Cantor's pairing."""
    return (x + y) * (x + y + 1) // 2 + y
