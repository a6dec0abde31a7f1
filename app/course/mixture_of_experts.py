"""The lesson on mixture of experts: the MoE micro-model's router on a prompt (each token's top 2 of 8,
per block, with a Route button for another sentence), the balance loss written out from that
routing, expert-choice routing on the same prompt, each expert's share over training with and
without the load-balancing loss, and the course's four remedies for expert collapse trained side by
side (the shipped runs: nothing trains on the page). Computed by model/course/mixture_of_experts.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch
from plotly.subplots import make_subplots

from glassbox.app.components.charts import show
from glassbox.app.components.course import lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, knows
from glassbox.app.components.errors import fragment
from glassbox.app.components.experts import EXPERT_COLOURS, SMOOTHING, share_caption, share_figure
from glassbox.app.components.labels import number, plain
from glassbox.app.resources import shared_model
from glassbox.model.analysis.experts import expert_label
from glassbox.model.course.mixture_of_experts import (
    BALANCED,
    CAPACITY_RUN,
    EXPERT_CHOICE_FACTOR,
    PROMPT,
    REMEDIES_COMMAND,
    RUN_TITLES,
    UNBALANCED,
    Routing,
    balance_terms,
    expert_choice,
    expert_choice_capacity,
    imbalance,
    remedy_runs,
    remedy_table,
    route,
    running_mean,
    sentences,
    share_curves,
)
from glassbox.model.engine import GlassboxError, block_label
from glassbox.model.micro import moe
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import position_labels

# the micro-model's corpus (5,000 stories, seed 0) and its held-out stories: the last 200 lie in its
# validation split (the last 5 % of its tokens, about 24,000; the 200 stories hold about 19,500)
HELD_OUT_OF = ((moe.N_STORIES, moe.SEED), 200)

NO_CAP = "none"
CAPACITY_FACTORS = (NO_CAP, 2.0, 1.25, 1.0, 0.5)


@st.cache_data(max_entries=32, show_spinner=False)
def routed(prompt: str, capacity_factor: float | None, _loaded) -> Routing:
    tokens = _loaded.encode(prompt)
    with lesson_pass("routing a prompt", _loaded, len(tokens)):
        return route(_loaded, tokens, capacity_factor)


@st.cache_data(max_entries=2, show_spinner="Routing held-out text through both runs…")
def both_runs(_loaded) -> dict:
    return moe.figures(_loaded)


@fragment
def the_router(loaded) -> None:
    st.subheader("The router, on a prompt")
    st.markdown(
        "In each block the MLP is replaced by 8 experts, each a SwiGLU MLP of its own. A router, one vector per "
        "expert (`W_router`), scores the token's residual stream against each expert; a softmax turns the scores "
        "into probabilities; the top 2 are kept and renormalised to sum to 1; the block adds those two experts' "
        "outputs, weighted. The other 6 experts are not run for that token. **Route** picks another sentence."
    )
    st.session_state.setdefault("moe_prompt", PROMPT)
    if st.button("Route another sentence", icon=":material/shuffle:"):
        st.session_state.moe_route = st.session_state.get("moe_route", 0) + 1
        choices = sentences()
        st.session_state.moe_prompt = choices[st.session_state.moe_route % len(choices)]
    knows(loaded, "moe_prompt", BALANCED, *HELD_OUT_OF)
    settings = st.columns([4, 2, 2], vertical_alignment="bottom")
    prompt = settings[0].text_input("Prompt", key="moe_prompt", max_chars=400)
    block = settings[1].selectbox("Block", range(loaded.cfg.n_layers), format_func=block_label, key="moe_block")
    factor = settings[2].selectbox(
        "Capacity factor C",
        CAPACITY_FACTORS,
        key="moe_capacity",
        help="GShard's cap: each expert takes at most ceil(C · tokens · 2 / 8) of the prompt's tokens, first come "
        "first served; a token over the cap loses that expert (its weight becomes 0, not renormalised).",
    )
    try:
        seen = routed(prompt, None if factor == NO_CAP else float(factor), loaded)
    except GlassboxError as exc:
        st.error(plain(str(exc)))
        return
    fit_note(loaded, prompt, BALANCED, *HELD_OUT_OF)
    labels = position_labels(loaded.pieces, seen.tokens)
    experts = [expert_label(e) for e in range(loaded.cfg.n_experts)]
    weights = seen.weights[block]
    dropped = seen.dropped[block]
    text = [
        [f"{v:.2f}" if v > 0 else ("dropped" if cut else "") for v, cut in zip(row, cuts)] for row, cuts in zip(weights, dropped)
    ]
    fig = heatmap_figure(
        weights,
        labels,
        experts,
        f"Each token's 2 experts and their weights, {block_label(block)}",
        row_title="token",
        col_title="expert",
        colour="sequential",
        zmax=1.0,
        fixed=True,
        colorbar="weight",
        text=text,
        text_size=11,
        hover="token %{y}<br>%{x}<br>weight %{z:.4f}<extra></extra>",
    )
    fig.update_layout(height=min(140 + 30 * len(labels), 700), margin=dict(l=10, r=10, t=40, b=10))
    show(fig, config={"displayModeBar": False})
    if seen.capacity is not None:
        st.markdown(
            f"With C = {factor}, each expert takes at most **{seen.capacity}** of the {len(labels)} tokens in "
            f"this block. **{int(dropped.sum())}** of the {int(seen.chosen[block].sum())} routings the router "
            "chose were over their expert's cap and dropped (written “dropped”): those tokens keep only their "
            "other expert, or nothing but the residual stream. A cap keeps any expert from taking everything, "
            "at the price of the tokens it turns away."
        )
    balance(seen, block, loaded)
    chosen_by_experts(seen, block, loaded)


def balance(seen: Routing, block: int, loaded) -> None:
    terms = balance_terms(seen, block, loaded.cfg.experts_top_k)
    st.markdown(
        f"**The load-balancing loss on this prompt**, N · Σ fᵢ · Pᵢ with N = {terms['N']}: fᵢ is the share of "
        "positions that chose expert i (the columns' counts above over the number of tokens; they sum to 2), Pᵢ "
        "the router's mean probability for expert i. It is smallest, 2, when both are spread evenly; it grows "
        "when the experts that are chosen most are also the ones the router is surest of."
    )
    table = pd.DataFrame(
        {"fᵢ": terms["f"], "Pᵢ": terms["P"], "fᵢ · Pᵢ": np.multiply(terms["f"], terms["P"])},
        index=[expert_label(e) for e in range(terms["N"])],
    ).T.map(lambda v: f"{v:.4f}")
    st.table(table)
    st.markdown(f"N · Σ fᵢ · Pᵢ = {terms['N']} × {sum(np.multiply(terms['f'], terms['P'])):.4f} = **{terms['loss']:.4f}**")


def over_training(balanced, unbalanced) -> None:
    st.subheader("Trained with the balance loss, and without it")
    st.markdown(
        f"The same model was trained twice from the same start on the same batches, once with "
        f"{moe.ALPHA} × the balance loss added to the next-token loss and once without. Without it, nothing stops a "
        "rich-get-richer loop: an expert that gets more tokens gets more gradient, gets better at them, and the "
        "router sends it more, while others starve."
    )
    block = st.radio(
        "Block",
        range(balanced.cfg.n_layers),
        format_func=block_label,
        horizontal=True,
        key="moe_curve_block",
        index=balanced.cfg.n_layers - 1,
    )  # the last block: where it collapsed
    runs = [
        (title, share_curves(run)[:, block]) for title, run in (("with the balance loss", balanced), ("without it", unbalanced))
    ]
    show(share_figure(runs, balanced.cfg.n_experts), config={"displayModeBar": False})
    st.caption(share_caption(balanced.cfg.n_experts, balanced.cfg.experts_top_k))
    figure = both_runs(balanced)
    rows = {}
    for name in ("balanced", "unbalanced"):
        run = figure[name]
        rows["with the balance loss" if name == "balanced" else "without it"] = {
            "largest share": f"{run['largest_share_end_of_training'][block]:.3f}",
            "smallest share": f"{run['smallest_share_end_of_training'][block]:.3f}",
            f"experts under {moe.STARVED:.0%}": str(run["starved_experts_end_of_training"][block]),
            "largest share, held-out text": f"{run['largest_share_held_out'][block]:.3f}",
            "final training loss": f"{run['final_loss']:.4f}",
        }
    st.table(pd.DataFrame(rows).T)
    st.caption("Over the last 50 training batches, and on 8 held-out windows of the corpus routed now.")


def chosen_by_experts(seen: Routing, block: int, loaded) -> None:
    st.markdown(
        "**Turned around: each expert picks its tokens.** Expert-choice routing (Zhou et al. 2022) keeps the "
        "router's scores but lets each expert take the C tokens it scores highest, with C = "
        f"{EXPERT_CHOICE_FACTOR:g} × tokens / 8 rounded up (as much work as top 2). Every expert is equally busy by "
        "construction; a token may get several experts, or none. Here the same router, on the same prompt and "
        "block, read this way."
    )
    capacity = expert_choice_capacity(len(seen.tokens), loaded.cfg.n_experts)
    weights = expert_choice(torch.from_numpy(seen.probs[block]), capacity).numpy()
    labels = position_labels(loaded.pieces, seen.tokens)
    experts = [expert_label(e) for e in range(loaded.cfg.n_experts)]
    fig = heatmap_figure(
        weights,
        labels,
        experts,
        f"Each expert's {capacity} tokens, {block_label(block)}",
        row_title="token",
        col_title="expert",
        colour="sequential",
        zmax=1.0,
        fixed=True,
        colorbar="weight",
        text=[[f"{v:.2f}" if v > 0 else "" for v in row] for row in weights],
        text_size=11,
        hover="token %{y}<br>%{x}<br>weight %{z:.4f}<extra></extra>",
    )
    fig.update_layout(height=min(140 + 30 * len(labels), 700), margin=dict(l=10, r=10, t=40, b=10))
    show(fig, config={"displayModeBar": False})
    taken = (weights > 0).sum(1)
    alone = [labels[i] for i in np.flatnonzero(taken == 0)]
    st.markdown(
        f"Each of the 8 experts took **{capacity}** of the {len(labels)} tokens. **{len(alone)}** "
        f"token{'' if len(alone) == 1 else 's'} got no expert at all and pass{'es' if len(alone) == 1 else ''} "
        f"the block on the residual stream alone{': ' + plain(', '.join(alone)) if alone else ''}; the busiest "
        f"token got {int(taken.max())} experts."
    )


@st.cache_data(max_entries=1, show_spinner=False)
def shipped_remedies() -> dict:
    return remedy_runs()


def curves_figure(runs: dict, block: int) -> go.Figure:
    """Each run's imbalance and next-token loss over training, running means, on shared step axes."""
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=["Imbalance of the experts' shares", "Next-token loss"]
    )
    for colour, (key, run) in zip(EXPERT_COLOURS, runs.items()):
        steps, spread = running_mean(imbalance(run["shares"][:, block])[:, None], SMOOTHING)
        _, loss = running_mean(run["loss"][:, None], SMOOTHING)
        for column, values in ((1, spread[:, 0]), (2, loss[:, 0])):
            fig.add_scatter(
                x=steps,
                y=values,
                mode="lines",
                name=RUN_TITLES[key],
                legendgroup=key,
                showlegend=column == 1,
                line=dict(color=colour, width=1.5),
                row=1,
                col=column,
            )
    fig.update_xaxes(title="training step")
    fig.update_yaxes(title="coefficient of variation (0: balanced)", row=1, col=1)
    fig.update_yaxes(title="loss (nats)", type="log", row=1, col=2)
    fig.update_layout(
        height=400, margin=dict(l=10, r=10, t=60, b=10), legend=dict(orientation="h", x=0, y=-0.25, xanchor="left", yanchor="top")
    )
    return fig


@fragment
def remedies(loaded) -> None:
    st.subheader("Four remedies, trained side by side")
    st.markdown(
        "The course lists four remedies for collapse. Each run below starts from the same weights and sees the same "
        "600 batches; only the routing differs: the **balance loss** above; a **capacity factor** "
        f"(C = {CAPACITY_RUN:g}, no balance loss); **noisy top-k** (Shazeer et al. 2017: while training, Gaussian "
        "noise of a learned scale, softplus(x·W_noise), is added to the router's scores, so an expert the router "
        "ignores still gets tokens by chance); **expert choice** (each expert takes its top C tokens of the sequence)."
    )
    runs = shipped_remedies()
    block = st.radio(
        "Block",
        range(loaded.cfg.n_layers),
        format_func=block_label,
        horizontal=True,
        key="moe_remedy_block",
        index=loaded.cfg.n_layers - 1,
    )
    show(curves_figure(runs, block), config={"displayModeBar": False})
    st.caption(
        f"The coefficient of variation of the 8 experts' shares of the work in each batch (their standard "
        f"deviation over their mean, 1/8): 0 is perfect balance, √7 ≈ 2.65 one expert doing everything. "
        f"Running means of {SMOOTHING} batches; the balance-loss run's loss without its balance term."
    )
    show(
        share_figure(
            [(RUN_TITLES[key], runs[key]["shares"][:, block]) for key in ("capacity", "noisy", "expert_choice")],
            loaded.cfg.n_experts,
        ),
        config={"displayModeBar": False},
    )
    st.caption(
        "Each expert's share of the expert computations run in each batch (with a cap, the routings it "
        "took, not those it dropped)."
    )
    table = remedy_table(runs)
    st.table(
        pd.DataFrame(
            {
                RUN_TITLES[key]: {
                    "largest share": number(row["largest_share"][block], 3),
                    "imbalance": number(row["imbalance"][block], 3),
                    "tokens with no expert": f"{row['unrouted'][block]:.1%}",
                    "final loss": number(row["loss"], 4),
                }
                for key, row in table.items()
            }
        ).T
    )
    noise = runs["noisy"].get("noise_scale")
    st.caption(
        "Over the last 50 training batches. "
        + (
            f"The noisy router's learned noise scale ended at {number(noise[block], 3)} in {block_label(block)} "
            "(it starts at softplus(0) ≈ 0.69). "
            if noise
            else ""
        )
        + "Shazeer et al. pair the noise with balance losses; "
        "alone, the router can learn to shrink it. Expert choice looks at the whole sequence, later tokens "
        "included, to pick an expert's tokens: in a decoder that is a peek at the future, which may flatter its loss. "
        f"`{REMEDIES_COMMAND}` trains these three runs again."
    )


lesson = lesson_page("moe")
balanced, unbalanced = shared_model(BALANCED), shared_model(UNBALANCED)
st.markdown(
    "A mixture of experts grows a model's parameters without growing the work per token: each token runs through 2 "
    "of the block's 8 expert MLPs, chosen for it by a router. Mixtral-8x7B is built this way. The micro-model here "
    f"({plain(balanced.about.get('card', {}).get('architecture', ''))}) was trained on the story corpus in a few "
    "minutes; `glassbox train-micro moe` trains both runs again."
)
the_router(balanced)
over_training(balanced, unbalanced)
remedies(balanced)
lesson_end(lesson, (("The MoE micro-model in the explorer", BALANCED, PROMPT),))
