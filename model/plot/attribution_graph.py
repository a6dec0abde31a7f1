"""An attribution graph drawn by layer and position, as circuit-tracer's and Neuronpedia's graphs
are: the prompt's tokens along the bottom, each block's features (circles) and error terms
(diamonds) in its row above the position where they are, the target logit on top; a line per edge,
blue where it raises its target and red where it lowers it, as wide as its weight. The last
trace's points are the nodes (model/analysis/attribution_graph.py's ``Node``s), in ``kept``'s
order (a click reports its point index), drawn over the lines."""

from __future__ import annotations

from collections import defaultdict

import torch

from glassbox.model.engine import block_label

RAISES, LOWERS = "#2563eb", "#dc2626"
KIND_COLOUR = {"embedding": "#6b7280", "feature": "#f59e0b", "error": "#9ca3af", "logit": "#059669"}
MOST_EDGES = 150  # the strongest edges among the kept nodes that are drawn; the rest are in the tables


def layout(nodes: list, kept: list[int], n_layers: int) -> tuple[dict[int, tuple[float, float]], dict[int, float]]:
    """Each kept node's (x, y), and each shown position's x (its column's middle). A position's
    column is as wide as the most nodes one of its rows holds (Neuronpedia's layout), so that the
    last position, where most features are, is not a crowd; y is 0 for the tokens, block + 1 for a
    block's features and errors, n_layers + 1 for the logit."""
    cells: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in kept:
        node = nodes[i]
        row = 0 if node.kind == "embedding" else n_layers + 1 if node.kind == "logit" else (node.block or 0) + 1
        cells[(node.position, row)].append(i)
    widths: dict[int, int] = defaultdict(lambda: 1)
    for (position, _), members in cells.items():
        widths[position] = max(widths[position], len(members))
    starts, x = {}, 0.0
    for position in sorted(widths):
        starts[position], x = x, x + widths[position] + 0.5
    placed = {}
    for (position, row), members in cells.items():
        middle = starts[position] + (widths[position] - 1) / 2
        members = sorted(members, key=lambda i: (nodes[i].kind != "feature", nodes[i].feature or 0))
        for k, i in enumerate(members):
            placed[i] = (middle + k - (len(members) - 1) / 2, float(row))
    return placed, {p: starts[p] + (widths[p] - 1) / 2 for p in starts}


def graph_figure(
    nodes: list,
    edges: torch.Tensor,
    kept: list[int],
    influence: torch.Tensor | None,
    labels: list[str],
    n_layers: int,
    title: str,
    selected: int | None = None,
    height: int = 560,
):
    """The figure (plotly) of the ``kept`` nodes of a graph and the strongest edges among them;
    ``labels`` name the positions (the x axis); ``selected`` (a node) is outlined."""
    import plotly.graph_objects as go

    placed, columns = layout(nodes, kept, n_layers)
    links = [(float(edges[i, j]), j, i) for i in kept for j in kept if edges[i, j] != 0]
    links = sorted(links, key=lambda link: -abs(link[0]))[:MOST_EDGES]
    strongest = max((abs(w) for w, _, _ in links), default=1.0) or 1.0
    figure = go.Figure()
    hover = []
    for i in kept:
        node = nodes[i]
        line = [node.label, f"token {labels[node.position]}"]
        if node.kind == "feature":
            line.append(f"activation {node.value:.4g}")
        if influence is not None and node.kind != "logit":
            line.append(f"influence on the logit {float(influence[i]):.3f}")
        if node.kind != "logit":
            line.append(f"direct effect on the logit {float(edges[kept[-1], i]):+.4g}")
        hover.append("<br>".join(line))
    size = [8 + (22 * float(influence[i]) / max(float(influence[kept[:-1]].max()), 1e-12) if influence is not None and i != kept[-1] else 8)
            for i in kept]  # fmt: skip
    size[-1] = 18
    for weight, source, target in reversed(links):  # the strongest drawn last, on top
        (x0, y0), (x1, y1) = placed[source], placed[target]
        figure.add_trace(
            go.Scatter(
                x=[x0, x1],
                y=[y0, y1],
                mode="lines",
                line={"width": 0.5 + 5 * abs(weight) / strongest, "color": RAISES if weight > 0 else LOWERS},
                opacity=0.35 + 0.5 * abs(weight) / strongest,
                hoverinfo="skip",
                showlegend=False,
            )
        )
    figure.add_trace(
        go.Scatter(
            x=[placed[i][0] for i in kept],
            y=[placed[i][1] for i in kept],
            mode="markers",
            marker={
                "size": size,
                "color": [KIND_COLOUR[nodes[i].kind] for i in kept],
                "symbol": [
                    "diamond" if nodes[i].kind == "error" else "square" if nodes[i].kind == "embedding" else "circle"
                    for i in kept
                ],
                "line": {
                    "width": [3 if i == selected else 1 for i in kept],
                    "color": ["#111827" if i == selected else "white" for i in kept],
                },
            },
            customdata=kept,
            hovertext=hover,
            hoverinfo="text",
            showlegend=False,
        )
    )
    rows = ["tokens", *[block_label(b) for b in range(n_layers)], "logit"]
    shown = sorted(columns)
    figure.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height,
        margin={"l": 70, "r": 20, "t": 50, "b": 90},
        plot_bgcolor="white",
        xaxis={
            "title": "position: token",
            "tickmode": "array",
            "tickvals": [columns[p] for p in shown],
            "ticktext": [labels[p] for p in shown],
            "tickangle": -45 if len(shown) > 12 else 0,
            "range": [-0.8, max(placed[i][0] for i in kept) + 0.8],
            "showgrid": False,
            "gridcolor": "#f3f4f6",
        },
        yaxis={
            "title": "layer",
            "tickmode": "array",
            "tickvals": list(range(n_layers + 2)),
            "ticktext": rows,
            "range": [-0.5, n_layers + 1.5],
            "gridcolor": "#e5e7eb",
        },
    )
    return figure
