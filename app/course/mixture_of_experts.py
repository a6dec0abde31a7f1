"""Lesson 10, mixture of experts: the MoE micro-model's router on a prompt (each token's top 2 of 8,
per block, with a Route button for another sentence), the balance loss written out from that
routing, and each expert's share over training with and without the load-balancing loss.
Computed by model/course/mixture_of_experts.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.experts import share_caption, share_figure
from glassbox.app.components.course import lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, knows
from glassbox.app.components.errors import fragment
from glassbox.app.components.heatmap import heatmap_figure
from glassbox.app.components.labels import plain, position_labels
from glassbox.app.resources import shared_model
from glassbox.model.course.mixture_of_experts import (BALANCED, PROMPT, UNBALANCED, Routing, balance_terms, route,
                                                      sentences, share_curves)
from glassbox.model.analysis.experts import expert_label
from glassbox.model.engine import GlassboxError, block_label
from glassbox.model.micro import moe

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
        "outputs, weighted. The other 6 experts are not run for that token. **Route** picks another sentence.")
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
        "Capacity factor C", CAPACITY_FACTORS, key="moe_capacity",
        help="GShard's cap: each expert takes at most ceil(C · tokens · 2 / 8) of the prompt's tokens, first come "
             "first served; a token over the cap loses that expert (its weight becomes 0, not renormalised).")
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
    text = [[f"{v:.2f}" if v > 0 else ("dropped" if cut else "") for v, cut in zip(row, cuts)]
            for row, cuts in zip(weights, dropped)]
    fig = heatmap_figure(weights, labels, experts, f"Each token's 2 experts and their weights, {block_label(block)}",
                         row_title="token", col_title="expert", colour="sequential", zmax=1.0, fixed=True,
                         colorbar="weight", text=text, text_size=11,
                         hover="token %{y}<br>%{x}<br>weight %{z:.4f}<extra></extra>")
    fig.update_layout(height=min(140 + 30 * len(labels), 700), margin=dict(l=10, r=10, t=40, b=10))
    show(fig, config={"displayModeBar": False})
    if seen.capacity is not None:
        st.markdown(f"With C = {factor}, each expert takes at most **{seen.capacity}** of the {len(labels)} tokens in "
                    f"this block. **{int(dropped.sum())}** of the {int(seen.chosen[block].sum())} routings the router "
                    "chose were over their expert's cap and dropped (written “dropped”): those tokens keep only their "
                    "other expert, or nothing but the residual stream. A cap keeps any expert from taking everything, "
                    "at the price of the tokens it turns away.")
    balance(seen, block, loaded)


def balance(seen: Routing, block: int, loaded) -> None:
    terms = balance_terms(seen, block, loaded.cfg.experts_top_k)
    st.markdown(
        f"**The load-balancing loss on this prompt**, N · Σ fᵢ · Pᵢ with N = {terms['N']}: fᵢ is the share of "
        "positions that chose expert i (the columns' counts above over the number of tokens; they sum to 2), Pᵢ "
        "the router's mean probability for expert i. It is smallest, 2, when both are spread evenly; it grows "
        "when the experts that are chosen most are also the ones the router is surest of.")
    table = pd.DataFrame({"fᵢ": terms["f"], "Pᵢ": terms["P"], "fᵢ · Pᵢ": np.multiply(terms["f"], terms["P"])},
                         index=[expert_label(e) for e in range(terms["N"])]).T.map(lambda v: f"{v:.4f}")
    st.table(table)
    st.markdown(f"N · Σ fᵢ · Pᵢ = {terms['N']} × {sum(np.multiply(terms['f'], terms['P'])):.4f} = "
                f"**{terms['loss']:.4f}**")


def over_training(balanced, unbalanced) -> None:
    st.subheader("Trained with the balance loss, and without it")
    st.markdown(
        f"The same model was trained twice from the same start on the same batches, once with "
        f"{moe.ALPHA} × the balance loss added to the next-token loss and once without. Without it, nothing stops a "
        "rich-get-richer loop: an expert that gets more tokens gets more gradient, gets better at them, and the "
        "router sends it more, while others starve.")
    block = st.radio("Block", range(balanced.cfg.n_layers), format_func=block_label, horizontal=True,
                     key="moe_curve_block", index=balanced.cfg.n_layers - 1)  # the last block: where it collapsed
    runs = [(title, share_curves(run)[:, block]) for title, run in (("with the balance loss", balanced),
                                                                       ("without it", unbalanced))]
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
            "final training loss": f"{run['final_loss']:.4f}"}
    st.table(pd.DataFrame(rows).T)
    st.caption("Over the last 50 training batches, and on 8 held-out windows of the corpus routed now.")


lesson = lesson_page("moe")
balanced, unbalanced = shared_model(BALANCED), shared_model(UNBALANCED)
st.markdown(
    "A mixture of experts grows a model's parameters without growing the work per token: each token runs through 2 "
    "of the block's 8 expert MLPs, chosen for it by a router. Mixtral-8x7B is built this way. The micro-model here "
    f"({plain(balanced.about.get('card', {}).get('architecture', ''))}) was trained on the story corpus in a few "
    "minutes; `glassbox train-micro moe` trains both runs again.")
the_router(balanced)
over_training(balanced, unbalanced)
lesson_end(lesson, (("The MoE micro-model in the explorer", BALANCED, PROMPT),))
