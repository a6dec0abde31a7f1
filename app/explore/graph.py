"""Attribution graph: why the model gives the next token its logit, as the direct linear effects
between the prompt's tokens, transcoder features, error terms and that logit (circuit-tracer's
graph), pruned to the nodes that carry most of the influence. A node's click shows where the
feature fires most in the bundled stories and what it does to the logit; an intervention scales
the feature in the real model, beside what the graph predicts. A circuit-tracer or Neuronpedia
graph file opens here too. Computed by model/analysis/attribution_graph.py through the Model."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import streamlit as st
import torch

from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer, lacks, not_a_decoder, probs_at
from glassbox.app.resources import model_pass
from glassbox.model.analysis.attribution_graph import BATCH
from glassbox.model.analysis.graph_json import from_circuit_tracer, to_circuit_tracer
from glassbox.model.engine import GlassboxError
from glassbox.model.io.sae import TRANSCODERS
from glassbox.model.plot.attribution_graph import graph_figure
from glassbox.model.serving import Needs

NODE_KEY, CHART_KEY = "explore_graph_node", "explore_graph_chart"
OTHER = "A folder of transcoders…"
CONTEXT = 10  # tokens of a story shown before an example's token
TOP = 8  # examples shown per feature (distinct ones: the stories repeat phrases)


FLOAT64_UP_TO = 50_000_000  # parameters: a model this small is copied to float64 for its graph (complete to 1e-14)


def precise(ctx: Explorer) -> torch.dtype | None:
    """float64 for a small model on the CPU (a copy costs little there), else the model's own dtype."""
    small = sum(p.numel() for p in ctx.model.parameters()) <= FLOAT64_UP_TO
    return torch.float64 if small and ctx.model.device.type == "cpu" else None


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{i}.mlp" for i in range(ctx.cfg.n_layers)}  # the MLPs the transcoders replace


@st.cache_resource(max_entries=8, show_spinner="Drawing the attribution graph: one backward pass per 32 nodes…")
def build(model_key: str, source: str, tokens: tuple, token: int, demeaned: bool, _ctx: Explorer):
    cost = _ctx.pass_cost("The attribution graph", backward=True, batch=lambda n: BATCH)
    with model_pass("attribution graph", cost):
        return _ctx.loaded.attribution_graph(list(tokens), token, source, demeaned, precise(_ctx))


@st.cache_resource(max_entries=4, show_spinner="Reading the bundled stories through every feature…")
def top_examples(model_key: str, source: str, _ctx: Explorer):
    with model_pass("top activations", _ctx.pass_cost("The stories", backward=False, n_tokens=_ctx.cfg.n_ctx)):
        return _ctx.loaded.top_activations(source, k=2 * TOP)


@st.cache_resource(max_entries=32, show_spinner="Running the model with the feature scaled…")
def intervention(
    model_key: str, source: str, tokens: tuple, token: int, demeaned: bool, node: int, factor: float, _ctx: Explorer
):
    graph = build(model_key, source, tokens, token, demeaned, _ctx)
    with model_pass("intervention", _ctx.pass_cost("The intervention", backward=False, batch=lambda n: 2)):
        return _ctx.loaded.intervene(list(tokens), graph, node, factor, source)


def choose_transcoders(ctx: Explorer) -> str | None:
    shipped = [name for name, model in TRANSCODERS.items() if model == ctx.model_key]
    choice = st.selectbox(
        "Transcoders",
        [*shipped, OTHER],
        key="explore_graph_transcoders",
        persist_state="session",
        help="One per block, each mapping the MLP's input to its output (glassbox train-transcoder)",
    )
    if choice != OTHER:
        return choice
    typed = st.text_input("Folder of blocks.0/, blocks.1/, …", key="explore_graph_folder", persist_state="session")
    if not typed.strip():
        st.info("Train transcoders for this model with `glassbox train-transcoder`, then give their folder.")
        return None
    return typed.strip()


def render(ctx: Explorer) -> None:
    st.markdown(
        "Each MLP is replaced by a transcoder: a few active *features* rebuild its output, and an *error* node "
        "holds what they miss. With attention patterns and norm scales held at this prompt's values, the logit "
        "is a sum of direct effects along the graph's edges; the graph keeps the nodes that carry most of it."
    )
    if lacks(ctx, mlp=True):
        return
    if not_a_decoder(ctx, "The attribution graph explains a decoder's prediction"):
        return
    explain(ctx)
    # open while it holds a file: a rerun may draw it afresh, and a fresh expander is closed
    with st.expander(
        "Open a graph file from circuit-tracer or Neuronpedia", expanded=bool(st.session_state.get("explore_graph_file"))
    ):
        imported = st.file_uploader("A graph JSON (their graph_models format)", type=["json"], key="explore_graph_file")
        if imported is not None:
            show_imported(imported.getvalue())


def explain(ctx: Explorer) -> None:
    """The graph of one of the next token's logits, pruned, and the chosen feature."""
    source = choose_transcoders(ctx)
    if source is None:
        return
    ranked = np.argsort(-probs_at(ctx.trace(Needs(("hook_probs",))), -1).float().cpu().numpy(), kind="stable")[:10]
    left, middle, right = st.columns([2, 2, 1])
    token = left.selectbox(
        "Explain the logit of",
        [int(i) for i in ranked],
        key="explore_graph_target",
        format_func=lambda i: f"{ctx.piece(i)} (id {i})",
        help="The model's ten likeliest next tokens",
    )
    share = middle.slider(
        "Keep the nodes that carry this share of the influence", 0.5, 0.99, 0.8, 0.01, key="explore_graph_share"
    )
    demeaned = right.checkbox(
        "Less the mean logit", key="explore_graph_demeaned", help="circuit-tracer's and Neuronpedia's target"
    )
    try:
        graph = build(ctx.model_key, source, tuple(ctx.tokens), token, demeaned, ctx)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    kept, influence = graph.pruned(share), graph.influence()
    what = "logit − mean logit" if demeaned else "logit"
    a, b, c = st.columns(3)
    a.metric(f"{what} of “{ctx.piece(token)}”", f"{graph.target_value:.4f}", help=f"p = {graph.probability:.4f}")
    b.metric(
        "Edges + biases − the logit",
        f"{graph.completeness():.1e}",
        help=f"The graph is complete: this is rounding (computed in {'float64' if precise(ctx) else 'the model’s dtype'})",
    )
    c.metric("Nodes kept", f"{len(kept) - 1} of {len(graph.nodes) - 1}")
    features = [i for i in kept if graph.nodes[i].kind == "feature"]
    if features and st.session_state.get(NODE_KEY) not in features:
        st.session_state[NODE_KEY] = max(features, key=lambda i: float(influence[i]))
    figure = graph_figure(
        graph.nodes,
        graph.edges,
        kept,
        influence,
        ctx.labels,
        ctx.cfg.n_layers,
        f"Why “{ctx.piece(token)}”: the {len(kept) - 1} nodes that carry {share:.0%} of the influence",
        selected=st.session_state.get(NODE_KEY),
    )

    def clicked() -> None:
        points = [p for p in st.session_state[CHART_KEY].selection.points if p.get("curve_number") == len(figure.data) - 1]
        if points and graph.nodes[kept[int(points[0]["point_index"])]].kind == "feature":
            st.session_state[NODE_KEY] = kept[int(points[0]["point_index"])]

    st.plotly_chart(figure, width="stretch", key=CHART_KEY, on_select=clicked, selection_mode="points")
    st.caption(
        "Squares: the prompt's tokens; circles: features, as large as their influence; diamonds: error terms. "
        "Blue edges raise their target, red ones lower it. Click a feature to follow it."
    )
    exported = to_circuit_tracer(graph, ctx.tokens, ctx.loaded.pieces, ctx.cfg.n_layers, kept, "glassbox-graph", ctx.model_key)
    st.download_button("Download as circuit-tracer / Neuronpedia JSON", json.dumps(exported), "graph.json", "application/json")
    if features:
        follow(ctx, source, graph, kept, influence, (token, demeaned), features)


def follow(ctx: Explorer, source: str, graph, kept: list[int], influence, target: tuple, features: list[int]) -> None:
    node = st.selectbox(
        "Feature",
        sorted(features, key=lambda i: -float(influence[i])),
        key=NODE_KEY,
        format_func=lambda i: f"{graph.nodes[i].label} ({ctx.pieces[graph.nodes[i].position]})",
    )
    feature = graph.nodes[node]
    left, right = st.columns(2)
    with left:
        st.markdown(f"**Where it fires most in the bundled stories** (activation here {feature.value:.4g})")
        try:
            top = top_examples(ctx.model_key, source, ctx)
        except GlassboxError as exc:
            st.error(plain(exc))
        else:
            rows = []
            for value, story, position in top.of(feature.block, feature.feature):
                tokens = top.sequences[story]
                rows.append(
                    {
                        "activation": value,
                        "before": "".join(ctx.piece(t) for t in tokens[max(0, position - CONTEXT) : position]),
                        "token": ctx.piece(tokens[position]),
                        "after": "".join(ctx.piece(t) for t in tokens[position + 1 : position + 4]),
                    }
                )
            if rows:
                st.dataframe(
                    pd.DataFrame(rows).drop_duplicates(["before", "token", "after"]).head(TOP),
                    hide_index=True,
                    width="stretch",
                    column_config={"activation": st.column_config.NumberColumn(format="%.3f")},
                )
            else:
                st.info("It never fires in the bundled stories: only on prompts like this one.")
    with right:
        st.markdown("**Its effect on the logit**")
        st.dataframe(
            pd.DataFrame(
                {
                    "": ["direct (its edge into the logit)", "influence (direct and through later nodes)"],
                    "value": [float(graph.edges[kept[-1], node]), float(influence[node])],
                }
            ),
            hide_index=True,
            width="stretch",
            column_config={"value": st.column_config.NumberColumn(format="%+.4f")},
        )
        intervene(ctx, source, graph, node, target)


def intervene(ctx: Explorer, source: str, graph, node: int, target: tuple) -> None:
    factor = st.select_slider(
        "Scale the feature by",
        [-1.0, 0.0, 0.5, 2.0, 4.0],
        value=0.0,
        key="explore_graph_factor",
        help="0 switches it off. The real model runs with the feature's decoder row times the change added to its MLP's output",
    )
    try:
        done = intervention(ctx.model_key, source, tuple(ctx.tokens), *target, node, factor, ctx)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    st.dataframe(
        pd.DataFrame(
            {
                "": ["the real model", "the graph (through later features)", "the graph (its direct edge)"],
                "logit after": [done.logit_after, done.predicted, done.predicted_direct],
            }
        ).assign(change=lambda t: t["logit after"] - done.logit_before),
        hide_index=True,
        width="stretch",
        column_config={
            "logit after": st.column_config.NumberColumn(format="%.4f"),
            "change": st.column_config.NumberColumn(format="%+.4f"),
        },
    )
    order = np.argsort(-done.probs_before.numpy(), kind="stable")[:8]
    st.dataframe(
        pd.DataFrame(
            {
                "next token": [ctx.piece(int(i)) for i in order],
                "p": done.probs_before[order].numpy(),
                "p with the feature scaled": done.probs_after[order].numpy(),
            }
        ),
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.4f") for c in ("p", "p with the feature scaled")},
    )
    st.caption(
        "The real model recomputes every later attention pattern, norm and MLP. The graph is linear: it holds "
        "them fixed, and its later features move by their edges alone, below zero too."
    )


def show_imported(data: bytes) -> None:
    try:
        parsed = json.loads(data)
        nodes, edges, _ = from_circuit_tracer(parsed)
        tokens = [str(t) for t in parsed["metadata"]["prompt_tokens"]]
    except (GlassboxError, ValueError, KeyError, TypeError) as exc:
        st.error(plain(f"Cannot open that file: {exc}"))
        return
    if not nodes or nodes[-1].kind != "logit":  # ours end with the logit; order theirs so
        order = [i for i, n in enumerate(nodes) if n.kind != "logit"] + [i for i, n in enumerate(nodes) if n.kind == "logit"]
        nodes, edges = [nodes[i] for i in order], edges[order][:, order]
    layers = max((n.block for n in nodes if n.block is not None), default=0) + 1
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    st.caption(
        plain(
            f"{parsed['metadata'].get('slug', 'A graph')}: {len(nodes)} nodes, {int((edges != 0).sum())} edges, "
            f"prompt {''.join(tokens)!r}"
        )
    )
    figure = graph_figure(nodes, edges, list(range(len(nodes))), None, labels, layers, "The imported graph")
    st.plotly_chart(figure, width="stretch")
