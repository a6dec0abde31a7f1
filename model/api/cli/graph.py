"""`glassbox graph`: the attribution graph of a prediction (model/analysis/attribution_graph.py)."""

from __future__ import annotations

import json
from pathlib import Path

from glassbox.cli.common import add_model_arguments, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("graph", help="the attribution graph of a token's logit: tokens → transcoder features → logit")
    add_model_arguments(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--target", required=True, help="the token whose logit at the last position is explained (its text)")
    p.add_argument(
        "--transcoders",
        default="default-transcoders",
        help="a shipped set (default-transcoders) or a folder of blocks.L/ (glassbox train-transcoder)",
    )
    p.add_argument(
        "--demeaned",
        action="store_true",
        help="explain the logit less the mean logit (circuit-tracer's and Neuronpedia's target)",
    )
    p.add_argument("--float64", action="store_true", help="build the graph on a float64 copy of the model (complete to ~1e-14)")
    p.add_argument("--share", type=float, default=0.8, help="keep the nodes that explain this share of the influence (0 to 1]")
    p.add_argument(
        "--intervene",
        metavar="NODE:FACTOR",
        help="scale feature node NODE (its index in the JSON's nodes) by FACTOR (0: off): the real model's new logit beside the graph's prediction",
    )
    p.add_argument(
        "--export",
        type=Path,
        metavar="FILE",
        help="also write the pruned graph as circuit-tracer's and Neuronpedia's graph JSON",
    )
    p.add_argument("--json", action="store_true", help='print {"nodes", "edges", "bias", "logit", "completeness", "kept"}')
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from glassbox.model.engine import GlassboxError

    if not 0 < args.share <= 1:
        raise GlassboxError(f"--share must be in (0, 1], not {args.share}")
    loaded = model_from(args)
    precision = torch.float64 if args.float64 else None
    graph = loaded.attribution_graph(args.prompt, args.target, args.transcoders, args.demeaned, precision)
    kept = graph.pruned(args.share)
    tokens = loaded.tokens(args.prompt)
    nodes = [
        {
            "kind": n.kind,
            "position": n.position,
            "token": loaded.pieces[tokens[n.position]],
            "block": n.block,
            "feature": n.feature,
            "value": n.value,
            "label": n.label,
        }
        for n in graph.nodes
    ]
    edges = [{"source": j, "target": i, "weight": float(graph.edges[i, j])} for i in kept for j in kept if graph.edges[i, j] != 0]
    if args.export:
        from glassbox.cli.common import writable
        from glassbox.model.analysis.graph_json import to_circuit_tracer
        from glassbox.model.engine.files import write_text

        exported = to_circuit_tracer(graph, tokens, loaded.pieces, loaded.cfg.n_layers, kept, "glassbox-graph", loaded.name)
        write_text(writable(args.export), json.dumps(exported))
    intervention = None
    if args.intervene:
        node, colon, factor = args.intervene.partition(":")
        try:
            chosen, scale = int(node), float(factor)
        except ValueError:
            raise GlassboxError(f"--intervene takes NODE:FACTOR (for example 12:0), not {args.intervene!r}") from None
        if not 0 <= chosen < len(graph.nodes):
            raise GlassboxError(f"There is no node {chosen}: the graph has {len(graph.nodes)}")
        done = loaded.intervene(args.prompt, graph, chosen, scale, args.transcoders)
        intervention = {
            "node": chosen,
            "factor": scale,
            "logit_before": done.logit_before,
            "logit_after": done.logit_after,
            "predicted_direct": done.predicted_direct,
            "predicted": done.predicted,
        }
    if args.json:
        out = {
            "prompt": args.prompt,
            "target": args.target,
            "logit": graph.target_value,
            "demeaned": graph.demeaned,
            "completeness": graph.completeness(),
            "nodes": nodes,
            "bias": graph.bias.tolist(),
            "kept": kept,
            "edges": edges,
            "intervention": intervention,
        }
        print(json.dumps(out))
        return 0
    influence = graph.influence()
    what = "logit − mean logit" if graph.demeaned else "logit"
    print(f"{what}({args.target!r}) = {graph.target_value:.4f}; edges + biases differ from it by {graph.completeness():.1e}")
    print(f"{len(graph.nodes)} nodes; {len(kept) - 1} explain {args.share:.0%} of the influence on the logit:")
    for i in sorted(kept[:-1], key=lambda i: -float(influence[i])):
        print(
            f"  {nodes[i]['label']:<44} {nodes[i]['token']!r:<12} influence {float(influence[i]):.3f}  direct {float(graph.edges[-1, i]):+.4f}"
        )
    if intervention:
        print(
            f"{nodes[intervention['node']]['label']} × {intervention['factor']:g}: logit {intervention['logit_before']:.4f} → "
            f"{intervention['logit_after']:.4f} (the real model); the graph predicts {intervention['predicted']:.4f} "
            f"({intervention['predicted_direct']:.4f} from its direct edge alone)"
        )
    return 0
