"""Train it live's mixture-of-experts tab: a fresh model of the MoE micro-model's shape trained in
the session (model/micro/moe.py's ``train_live``), with the load-balancing loss's weight α and
GShard's capacity factor C as options; each expert's share over the steps, the routings dropped
over capacity, and every run of the session side by side."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.errors import fragment
from glassbox.app.components.experts import share_caption, share_figure
from glassbox.app.components.labels import plain
from glassbox.app.components.long_task import cancelled_note, limit_note, long_computation
from glassbox.model.analysis import plans
from glassbox.model.engine import block_label
from glassbox.model.engine.work import report
from glassbox.model.micro import moe
from glassbox.model.serving.sizing import training_bytes

NO_CAP = "none"
ALPHAS = (0.0, 0.001, 0.01, 0.1)
CAPACITY_FACTORS = (NO_CAP, 2.0, 1.25, 1.0, 0.5)
LAST = 10  # the batches a run's end is averaged over
KEPT_RUNS = 6
MAX_STEPS = 600  # the session's runs kept in the comparison table


def settings_text(alpha: float, capacity: float | None, steps: int, seed: int) -> str:
    balance = f"α = {alpha:g}" if alpha else "no balance loss"
    return f"{balance}, C = {'none' if capacity is None else f'{capacity:g}'}, {steps} steps, seed {seed}"


@st.cache_resource
def timed_model():
    """A model of the runs' shape, whose pass time estimates a run (long_task.py)."""
    return moe.live_model()


def train(alpha: float, capacity: float | None, steps: int, seed: int) -> None:
    """A run on the server's long lane (long_task.py): cancellable, within the time limit."""
    curve = long_computation(
        "Training the experts",
        (alpha, capacity, steps, seed),
        plans.training(steps, moe.BATCH, moe.T),
        timed_model(),
        lambda: moe.train_live(steps, alpha, capacity, seed, on_step=report),
        training_bytes(moe.live_model(), moe.T, moe.BATCH),
        shared=False,
    )
    if curve is None:
        return
    run = {
        "settings": settings_text(alpha, capacity, steps, seed),
        "capacity": capacity,
        "curve": curve,
        "end": moe.curve_end(curve, min(LAST, steps)),
    }
    st.session_state.expert_run = run
    runs = [r for r in st.session_state.get("expert_runs", []) if r["settings"] != run["settings"]]
    st.session_state.expert_runs = (
        [{"settings": run["settings"], "end": run["end"], "alpha": alpha, "capacity": capacity, "steps": steps, "seed": seed}]
        + runs
    )[:KEPT_RUNS]


def unbalanced_by_alpha(runs: list[dict]) -> list[tuple[dict, dict]]:
    """(with α, without) pairs of runs alike but for α where the balance loss left the largest expert's
    share (in any block) larger than none did: what the learner should be told about."""
    pairs = []
    for r in runs:
        if not r.get("alpha"):
            continue
        for other in runs:
            if (
                other.get("alpha") == 0.0
                and (other.get("capacity"), other.get("steps"), other.get("seed")) == (r["capacity"], r["steps"], r["seed"])
                and max(r["end"]["largest"]) > max(other["end"]["largest"])
            ):
                pairs.append((r, other))
    return pairs


def alpha_note(with_alpha: dict, without: dict) -> str:
    """Why a run with the balance loss can end less balanced than one without, in words and its numbers."""
    worst = max(range(len(with_alpha["end"]["largest"])), key=lambda b: with_alpha["end"]["largest"][b])
    short = with_alpha["steps"] < moe.LIVE_STEPS
    return (
        f"Here α = {with_alpha['alpha']:g} ended less balanced than no balance loss: the largest expert's share in "
        f"{block_label(worst)} is {with_alpha['end']['largest'][worst]:.3f} against "
        f"{without['end']['largest'][worst]:.3f}. The balance term is a small pull (α times a number near 1, beside "
        "a cross-entropy of several nats), and it pulls towards balance only once the router has favourites; "
        + (
            f"in {with_alpha['steps']} steps (the first {min(50, with_alpha['steps'] // 5)} of them warming the "
            "learning rate up) the routers are still near their random start, and the shares differ by the chance "
            f"of the start and the batches more than by α. Train both for {moe.LIVE_STEPS} steps or more: without "
            "the term an expert that is chosen more gets more gradient and is chosen more still, and the gap opens."
            if short
            else "over a run, a router that is balanced already gets little from it, so one run against another can "
            "differ by the chance of the batches more than by α; the starved experts and a longer run show the "
            "difference more surely."
        )
    )


def results(run: dict) -> None:
    curve, end = run["curve"], run["end"]
    n_blocks, n_experts = len(end["shares"]), len(end["shares"][0])
    st.subheader(plain(run["settings"]))
    columns = st.columns(n_blocks + 1)
    for b, column in enumerate(columns[:n_blocks]):
        column.metric(
            f"largest expert's share, {block_label(b)}",
            f"{end['largest'][b]:.3f}",
            help=f"Over the last {LAST} batches; 1/{n_experts} is perfect balance, 1/2 the most one "
            "expert can get with top-2 routing.",
        )
    columns[-1].metric("training loss", f"{end['loss']:.4f}")
    steps = [s + 1 for s in curve["step"]]
    runs = [(block_label(b), np.array(curve["shares"])[:, b]) for b in range(n_blocks)]
    show(share_figure(runs, n_experts), config={"displayModeBar": False}, key="expert_shares")
    st.caption(
        share_caption(n_experts, 2)
        + f" Experts under {moe.STARVED:.0%} at the end: "
        + ", ".join(f"{end['starved'][b]} in {block_label(b)}" for b in range(n_blocks))
        + "."
    )
    left, right = st.columns(2)
    fig = go.Figure(go.Scatter(x=steps, y=curve["loss"], mode="lines", name="loss"))
    fig.update_layout(
        title="Training loss (next-token cross-entropy)",
        xaxis_title="step",
        yaxis_title="cross-entropy (nats)",
        height=300,
        margin=dict(t=40, b=10, l=10, r=10),
    )
    show(fig, left, key="expert_loss")
    fig = go.Figure(
        [go.Scatter(x=steps, y=[d[b] for d in curve["dropped"]], mode="lines", name=block_label(b)) for b in range(n_blocks)]
    )
    fig.update_layout(
        title="Routings dropped over capacity",
        xaxis_title="step",
        yaxis_title="share of the routings",
        yaxis_range=[0, 1],
        height=300,
        margin=dict(t=40, b=10, l=10, r=10),
        legend_title="block",
    )
    show(fig, right, key="expert_dropped")
    if run["capacity"] is None:
        right.caption("No capacity factor: every routing the router chose is taken, none is dropped.")
    else:
        right.caption(
            f"With C = {run['capacity']:g}, each expert takes at most ⌈C · 64 · 2 / {n_experts}⌉ of a "
            "sequence's 64 positions, first come first served; a routing past that gets weight 0."
        )


def comparison() -> None:
    runs = st.session_state.get("expert_runs", [])
    if len(runs) < 2:
        return
    st.subheader("This session's runs")
    n_blocks = len(runs[0]["end"]["largest"])
    # short headers, each column as narrow as its numbers, the table as wide as the page: nothing cut off
    st.dataframe(
        {
            "settings": [r["settings"] for r in runs],
            **{f"largest, {block_label(b)}": [round(r["end"]["largest"][b], 3) for r in runs] for b in range(n_blocks)},
            **{f"dropped, {block_label(b)}": [round(r["end"]["dropped"][b], 3) for r in runs] for b in range(n_blocks)},
            "starved": [sum(r["end"]["starved"]) for r in runs],
            "loss": [round(r["end"]["loss"], 4) for r in runs],
        },
        hide_index=True,
        width="stretch",
        column_config={"settings": st.column_config.TextColumn(width="large")},
    )
    st.caption(
        f"Each over its last {LAST} batches, the newest run first. largest: the largest expert's share of the "
        f"routings in that block (1/{len(runs[0]['end']['shares'][0])} is perfect balance); "
        f"dropped: the share turned away over capacity; starved: experts under {moe.STARVED:.0%}, all blocks."
    )
    for with_alpha, without in unbalanced_by_alpha(runs):
        st.info(plain(alpha_note(with_alpha, without)))


@fragment
def expert_training() -> None:
    st.markdown(
        f"A fresh model of the MoE micro-model's shape (2 blocks, each MLP 8 SwiGLU experts behind a top-2 router) "
        f"trained here on the story corpus, batches of {moe.BATCH} windows of {moe.T} tokens. Without the balance "
        "loss an expert that gets more tokens gets more gradient and is chosen more; a capacity factor caps what any "
        "expert can take instead, and turns the overflow away. About a tenth of a second per step on 2 CPU cores."
    )
    with st.form("expert_training"):
        c1, c2, c3, c4 = st.columns([1.6, 1.2, 1, 1])
        alpha = c1.select_slider(
            "Balance loss weight α",
            ALPHAS,
            value=moe.ALPHA,
            key="experts_alpha",
            format_func=lambda a: f"{a:g}" if a else "0 (none)",
            help="The loss is the next-token cross-entropy + α · N · Σ f_i · P_i (the mixture-of-experts lesson "
            "writes the term out on a prompt).",
        )
        capacity = c2.selectbox(
            "Capacity factor C",
            CAPACITY_FACTORS,
            key="experts_capacity",
            help="GShard's cap on the tokens each expert takes per sequence: ⌈C · positions · 2 / 8⌉. none: no cap.",
        )
        steps = c3.number_input(
            "Steps",
            min_value=10,
            max_value=MAX_STEPS,
            value=moe.LIVE_STEPS,
            step=10,
            key="experts_steps",
            help=f"10 to {MAX_STEPS}",
        )
        seed = c4.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, step=1, key="experts_seed")
        submitted = st.form_submit_button("Train the experts", type="primary")
    st.caption(
        plain(limit_note(timed_model(), plans.training(MAX_STEPS, moe.BATCH, moe.T), at=f"{MAX_STEPS} steps, the most here"))
    )
    cancelled_note()
    if submitted:
        train(float(alpha), None if capacity == NO_CAP else float(capacity), int(steps), int(seed))
    run = st.session_state.get("expert_run")
    if run is None:
        st.info(
            "Choose α and C and press **Train the experts**. With α = 0 and no cap, block 2 usually collapses "
            "onto a few experts within 100 steps."
        )
        return
    results(run)
    comparison()
