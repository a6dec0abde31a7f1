"""Ask why: which parts and which input tokens make the model predict a token here. Direct
logit attribution, attribution per input token (saliency, input × gradient, integrated
gradients, attention rollout) and activation patching beside attribution patching, all
computed by model/analysis on this prompt (the UI chooses and draws)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import paired_bars, show
from glassbox.app.components.labels import plain, token_labels
from glassbox.app.components.long_task import limit_note, long_computation
from glassbox.app.explore.common import (
    Explorer,
    bar_chart,
    choose_expert,
    choose_layer,
    heatmap,
    lacks,
    offered,
    probs_at,
    value_room,
)
from glassbox.app.explore.why_paths import path_patching_view
from glassbox.app.resources import model_pass
from glassbox.model.analysis import plans
from glassbox.model.analysis.architecture import has_mlp, missing
from glassbox.model.analysis.batches import per_pass
from glassbox.model.analysis.dla import linear_head, part_words
from glassbox.model.analysis.experts import unit
from glassbox.model.analysis.patching import sites
from glassbox.model.engine import GlassboxError, block_label, head_label
from glassbox.model.plot.heatmap import abs_max
from glassbox.model.serving import Needs
from glassbox.model.serving.limits import PATCH_TOKENS

METHODS = {
    "input × gradient": "input_x_gradient",
    "integrated gradients": "integrated_gradients",
    "saliency": "saliency",
    "attention rollout": "attention_rollout",
}
SITES = {
    "residual stream, per position": "resid_pre",
    "each head": "head",
    "attention output, per block": "attn_out",
    "MLP output, per block": "mlp_out",
}
UNRELIABLE = 0.5  # below this correlation with the patched runs, attribution patching is said to be unreliable
PATH_TOKENS = 100_000  # tokens run forward and backward by integrated gradients, at most
PARTS_SHOWN = 16


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{i}.{part}" for i in range(ctx.cfg.n_layers) for part in ("attn", "mlp")}


@st.cache_resource(max_entries=32, show_spinner="Splitting the logit into its parts…")
def dla(model_key: str, tokens: tuple, token: int, wrong: int | None, _ctx: Explorer):
    with model_pass("direct logit attribution", _ctx.pass_cost("Splitting the logit", backward=False)):
        return _ctx.loaded.dla(list(tokens), token, wrong)


@st.cache_resource(max_entries=32, show_spinner="Attributing the logit to the input tokens…")
def attribution(model_key: str, tokens: tuple, token: int, method: str, _ctx: Explorer):
    """The one-pass methods (saliency, input × gradient, attention rollout)."""
    with model_pass("attribution", _ctx.pass_cost("Attribution", backward=True)):
        return _ctx.loaded.attribute(list(tokens), token, method)


def integrated_gradients(ctx: Explorer, token: int, steps: int, baseline: int | None):
    """Integrated gradients: ``steps`` points forward and backward, a long computation (long_task.py)."""
    return long_computation(
        "Integrated gradients",
        (ctx.model_key, tuple(ctx.tokens), token, steps, baseline),
        plans.attribution(len(ctx.tokens), "integrated_gradients", steps, baseline is not None),
        ctx.model,
        lambda: ctx.loaded.attribute(list(ctx.tokens), token, "integrated_gradients", steps, baseline),
        ctx.pass_cost("Attribution", backward=True, batch=per_pass),
    )


@st.cache_resource(max_entries=32, show_spinner="Running the prompt with the unit switched off…")
def ablation(
    model_key: str,
    tokens: tuple,
    layer: int,
    head: int | None,
    neuron: int | None,
    mode: str,
    reference: tuple | None,
    _ctx: Explorer,
    expert: int | str | None = None,
):
    lengths = [len(tokens)] + ([] if reference is None else [len(reference)])
    cost = max(_ctx.pass_cost("Ablation", backward=False, n_tokens=n) for n in lengths)
    with model_pass("ablation", cost):
        return _ctx.loaded.ablate(list(tokens), layer, head, neuron, mode, None if reference is None else list(reference), expert)


def patching(ctx: Explorer, corrupt: tuple, answer: int, wrong: int, site: str):
    """Every site patched, a long computation (long_task.py)."""
    memory = max(
        ctx.pass_cost("Patching", backward=False, batch=per_pass),  # the patched runs
        ctx.pass_cost("Patching", backward=True),
    )  # attribution patching's gradient
    return long_computation(
        "Patching",
        (ctx.model_key, tuple(ctx.tokens), corrupt, answer, wrong, site),
        plans.patching(ctx.cfg, len(ctx.tokens), site),
        ctx.model,
        lambda: ctx.loaded.patch(list(ctx.tokens), list(corrupt), answer, wrong, site),
        memory,
    )


def token_choice(ctx: Explorer, label: str, key: str, default: int, help: str, offers: tuple[list[int], list[int]]) -> int | None:
    """A token typed as text, its id; the model's own prediction when left empty. ``offers``: the
    top predictions and the prompt's own tokens, which a pick from the list writes into the box."""
    typed = st.text_input(label, key=key, persist_state="session", placeholder=ctx.loaded.tokenizer.pieces[default], help=help)

    def write_picked() -> None:
        picked = st.session_state[key + ":pick"]
        if picked is not None:
            st.session_state[key] = ctx.loaded.tokenizer.pieces[picked]
            st.session_state[key + ":pick"] = None  # the list goes back to its prompt: the box holds the choice

    predicted, prompt = offers
    choices = list(dict.fromkeys(predicted + prompt))
    st.selectbox(
        f"{label}: pick",
        choices,
        index=None,
        key=key + ":pick",
        on_change=write_picked,
        placeholder="…or pick a predicted token, or one of the prompt's",
        label_visibility="collapsed",
        format_func=lambda i: (
            token_labels([ctx.piece(i)], [i])[0]  # a list's labels are text, not Markdown
            + (f"  (prediction {predicted.index(i) + 1})" if i in predicted else "  (in the prompt)")
        ),
    )
    if not typed:
        return default
    try:
        return ctx.loaded.tokenizer.token_id(typed)
    except GlassboxError as exc:
        st.error(plain(f"{label}: {exc}"))
        return None


def render(ctx: Explorer) -> None:
    trace = ctx.trace(Needs(("hook_probs",)))
    ranked = np.argsort(-probs_at(trace, -1).float().cpu().numpy(), kind="stable")
    where = (
        "at the last position (an encoder: its guess of the token there, seeing every token)"
        if ctx.cfg.kind == "encoder"
        else "after the last token"
    )
    st.markdown(
        f"Why does the model predict what it does {where}? Choose the token to explain "
        "(empty: the model's most likely one) and the token it is compared with (empty: its second): type "
        "it, or pick one of the model's top predictions or of the prompt's own tokens from the list below the box."
    )
    space = (
        ""
        if ctx.loaded.tokenizer.word_level
        else " A word inside a sentence is usually one token with its space in front (“ frog”, shown ␣frog): "
        "“frog” without the space may be another token, or several."
    )
    offers = ([int(i) for i in ranked[:5]], list(ctx.tokens))
    left, right = st.columns(2)
    with left:
        token = token_choice(
            ctx,
            "Explain the logit of",
            "explore_why_token",
            int(ranked[0]),
            "One token of this vocabulary, as text." + space,
            offers,
        )
    with right:
        wrong = token_choice(
            ctx,
            "Compared with",
            "explore_why_wrong",
            int(ranked[1]),
            "Patching measures logit(explained) − logit(this); the logit attribution can split that difference too." + space,
            offers,
        )
    if token is None or wrong is None:
        return
    logit_attribution(ctx, token, wrong)
    input_attribution(ctx, token)
    ablation_view(ctx, token)
    patching_view(ctx, token, wrong)
    path_patching_view(ctx, token, wrong)


def logit_attribution(ctx: Explorer, token: int, wrong: int) -> None:
    st.subheader("Direct logit attribution")
    if linear_head(ctx.cfg):  # post-norm (BERT): the parts do not add up to the stream
        st.info(plain(linear_head(ctx.cfg)))
        return
    difference = st.toggle(
        plain(f"Split logit({ctx.piece(token)}) − logit({ctx.piece(wrong)})"),
        key="explore_why_difference",
        persist_state="session",
    )
    result = dla(ctx.model_key, tuple(ctx.tokens), token, wrong if difference else None, ctx)
    what = f"logit({ctx.piece(token)})" + (f" − logit({ctx.piece(wrong)})" if difference else "")
    order = np.argsort(-np.abs(result.values), kind="stable")[:PARTS_SHOWN]
    fig = go.Figure(
        go.Bar(
            y=[part_words(result.names[i]) for i in order],
            x=result.values[order],
            orientation="h",
            marker_color=["#0068C9" if result.values[i] >= 0 else "#FF2B2B" for i in order],
            customdata=[result.names[i] for i in order],
            text=[f"{result.values[i]:.3g}" for i in order],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y} (%{customdata}): %{x:.6g}<extra></extra>",
        )
    )
    shown = f"the {len(order)} largest of {len(result.names)}" if len(order) < len(result.names) else "every part"
    fig.update_layout(
        title=dict(
            text=f"<b>What each part writes into {what}</b> at the last position ({ctx.labels[-1]}): {shown}",
            font=dict(size=13),
            x=0,
        ),
        height=max(220, 120 + 22 * len(order)),
        margin=dict(l=10, r=50, t=40, b=10),  # the axis title fits
        # room beyond the bars' ends for their values: a negative bar's would print over the part names
        xaxis=dict(title="direct share of the logit", range=value_room(result.values[order])),
        yaxis=dict(title="part (its engine name on hover)", autorange="reversed", type="category"),
    )
    show(fig, width="stretch")
    through = (
        "the final norm, with this position's scale held fixed, and the unembedding"
        if ctx.cfg.final_norm
        else "the unembedding (this model has no final norm)"
    )
    total = f"All {len(result.names)} parts add up to" if len(result.names) > 1 else "The one part is"
    st.caption(
        f"Each part is put through {through}. "
        f"{total} {result.values.sum():.6g}; the model's {plain(what)} is "
        f"{result.logit:.6g}." + (" Logits are taken before the soft-cap, which is not linear." if ctx.cfg.final_softcap else "")
    )


def input_attribution(ctx: Explorer, token: int) -> None:
    st.subheader("Which input tokens matter")
    method = st.segmented_control(
        "Method",
        list(METHODS),
        key="explore_why_method",
        persist_state="session",
        required=True,
        default="input × gradient",
        help="Integrated gradients run the model once per step: slow on a large model and a long prompt",
    )
    steps, baseline = 0, None
    if METHODS[method] == "integrated_gradients":
        left, right = st.columns(2)
        steps = left.select_slider(
            "Steps",
            [8, 16, 32, 64, 128, 256],
            value=32,
            key="explore_why_steps",
            persist_state="session",
            help="Points on the path from the baseline: more steps, smaller completeness error",
        )
        zero = right.radio(
            "Baseline",
            ["zeros", "the first token's embedding at every position"],
            horizontal=True,
            key="explore_why_baseline",
            persist_state="session",
            help="Integrated gradients walk from this embedding to the prompt's",
        )
        baseline = None if zero == "zeros" else ctx.tokens[0]
        if steps * len(ctx.tokens) > PATH_TOKENS:
            st.warning(
                plain(
                    f"{steps} steps of {len(ctx.tokens)} tokens is {steps * len(ctx.tokens):,} tokens forward and "
                    "backward: too many for this server. Fewer steps or a shorter prompt."
                )
            )
            return
    if METHODS[method] == "integrated_gradients":
        st.caption(plain(limit_note(ctx.model, plans.attribution(len(ctx.tokens), METHODS[method], steps, baseline is not None))))
        result = integrated_gradients(ctx, token, steps, baseline)
    else:
        result = attribution(ctx.model_key, tuple(ctx.tokens), token, METHODS[method], ctx)
    if result is None:  # cancelled
        return
    title = (
        f"<b>{method.capitalize()}</b> of logit({ctx.piece(token)}) at the last position, per input token"
        if METHODS[method] != "attention_rollout"  # it reads attention weights only, no logit and no gradient
        else "<b>Attention rollout</b>: how much the last position reads each input token, through every block"
    )
    show(bar_chart(ctx.labels, result.scores, title, "score", text=[f"{v:.3g}" for v in result.scores]), width="stretch")
    if result.completeness_error is not None:
        gap = result.target_logit - result.baseline_logit
        st.caption(
            f"Completeness: the scores add up to {result.scores.sum():.6g}; f(prompt) − f(baseline) = "
            f"{result.target_logit:.6g} − {result.baseline_logit:.6g} = {gap:.6g}. Error "
            f"{result.completeness_error:.3g} with {result.steps} steps "
            + (
                "(the midpoint rule's, and the routing's: along the path a token's chosen experts change, and the "
                "logit jumps where they do, which no gradient sees, so more steps do not remove that part)."
                if ctx.cfg.n_experts
                else "(the midpoint rule's; more steps, less)."
            )
        )
    elif METHODS[method] == "attention_rollout":
        st.caption(
            "Attention rollout multiplies each block's head-averaged pattern, with the skip connection as "
            "½(A + I), through the blocks: it reads attention weights only, no gradients and nothing of the MLPs."
        )
    else:
        st.caption(
            "Saliency: ‖∂logit/∂embedding‖, how sensitive the logit is to each token's embedding. Input × "
            "gradient: embedding · ∂logit/∂embedding, its first-order share."
        )


def ablation_view(ctx: Explorer, token: int) -> None:
    st.subheader("Switch one unit off (ablation)")
    if lacks(ctx):
        return
    a, b, c, d = st.columns(4)
    with a:
        layer = choose_layer(ctx)
    units = offered("explore_why_unit", ["head", "MLP neuron"] if has_mlp(ctx.cfg) else ["head"])
    kind = b.radio(
        "Unit", units, key="explore_why_unit", persist_state="session", horizontal=True, help=missing(ctx.cfg, mlp=True)
    )  # where only heads are offered, why
    if kind == "head":
        head = c.selectbox(
            "Head", range(ctx.cfg.n_heads), key="explore_why_head", persist_state="session", format_func=head_label
        )
        neuron = expert = None
    else:
        head = None
        expert = (
            choose_expert(ctx, c, help="A mixture-of-experts block: the neuron is this expert's")
            if ctx.cfg.is_moe(layer)
            else None
        )
        width = unit(ctx.cfg, layer, expert).width  # a dense block's d_ff, an expert's own
        st.session_state.explore_why_neuron = min(st.session_state.get("explore_why_neuron", 0), width - 1)
        neuron = c.number_input(
            "Neuron", 0, width - 1, key="explore_why_neuron", persist_state="session", help=f"0 to {width - 1}"
        )
    mode = d.radio(
        "Set it to",
        ["zero", "mean", "mean on another prompt"],
        key="explore_why_mode",
        persist_state="session",
        help="zero: its output is 0; mean: its mean over this prompt's positions (what it writes on "
        "average stays, what varies with the position goes); or its mean over another prompt's",
    )
    reference = None
    if mode == "mean on another prompt":
        text = st.text_input("Reference prompt", key="explore_why_reference", persist_state="session")
        if not text:
            st.info("Type the prompt whose mean the unit is set to.")
            return
        reference = tuple(ctx.loaded.encode(text))
    result = ablation(
        ctx.model_key, tuple(ctx.tokens), layer, head, neuron, "zero" if mode == "zero" else "mean", reference, ctx, expert
    )
    shown = np.argsort(-np.maximum(result.before, result.after), kind="stable")[:10]
    if token not in shown:
        shown = np.append(shown[:9], token)
    labels = token_labels(
        [ctx.loaded.tokenizer.pieces[i] if i < len(ctx.loaded.tokenizer.pieces) else f"#{i}" for i in shown],
        [int(i) for i in shown],
    )
    show(
        paired_bars(
            labels,
            [("as computed", result.before[shown], "#9db4d0"), ("ablated", result.after[shown], "#d9480f")],
            ("Token at" if ctx.cfg.kind == "encoder" else "Next token after")
            + f" “{ctx.pieces[-1]}” with {result.name} set to "
            + {"zero": "zero", "mean": "its mean over the positions"}.get(mode, "its mean on the reference"),
            "probability",
            "token there" if ctx.cfg.kind == "encoder" else "next token",
            highlight=int(np.flatnonzero(shown == token)[0]),
        ),
        width="stretch",
    )
    st.caption(
        f"p({plain(ctx.piece(token))}) {result.before[token]:.4f} → {result.after[token]:.4f}; KL(as computed ‖ "
        f"ablated) = {result.kl:.4g} nats over the whole vocabulary."
    )


def corruption_hint(ctx: Explorer) -> str:
    """What to type as the corrupted prompt, for the model that is open."""
    hint = (
        f"Type a corrupted prompt to patch: this prompt with a word or two changed, keeping its {len(ctx.tokens)} "
        "tokens (tokens, not words: change a word into another word that is one token too)."
    )
    if ctx.model_key == "default":
        hint += (
            " A pair that works with this model: “Zoe had a frog. Zoe loved the” against “Zoe had a boat. Zoe "
            "loved the”, explaining “ frog” against “ boat”."
        )
    return hint


def patching_view(ctx: Explorer, token: int, wrong: int) -> None:
    st.subheader("Activation patching")
    if lacks(ctx):
        return
    st.markdown(
        f"Run a **corrupted** prompt of the same length ({len(ctx.tokens)} tokens), then run it again with "
        f"one activation taken from this prompt's run. The metric is logit({plain(ctx.piece(token))}) − "
        f"logit({plain(ctx.piece(wrong))}) at the last position; each cell says how much of this prompt's value "
        "one patch restores (1: all of it, 0: none)."
    )
    with st.form("explore_why_patch"):
        corrupt_text = st.text_input(
            "Corrupted prompt",
            key="explore_why_corrupt",
            persist_state="session",
            help="Change a word or two; the token count must stay the same",
        )
        labels = offered("explore_why_site", [label for label, site in SITES.items() if site in sites(ctx.cfg)])
        site_label = st.radio("Patch", labels, key="explore_why_site", persist_state="session", horizontal=True)
        st.form_submit_button("Patch")
    if not corrupt_text:
        st.info(plain(corruption_hint(ctx)))
        return
    corrupt = ctx.loaded.encode(corrupt_text)
    site = SITES[site_label]
    runs = ctx.cfg.n_layers * {"resid_pre": len(ctx.tokens), "head": ctx.cfg.n_heads}.get(site, 1)
    if runs * len(ctx.tokens) > PATCH_TOKENS:
        st.warning(
            plain(
                f"That is {runs:,} patched runs of {len(ctx.tokens)} tokens: too many for this server. Patch "
                "per block or per head, or use a shorter prompt."
            )
        )
        return
    st.caption(plain(limit_note(ctx.model, plans.patching(ctx.cfg, len(ctx.tokens), site))))
    result = patching(ctx, tuple(corrupt), token, wrong, site)
    if result is None:  # cancelled
        return
    columns = {"resid_pre": ctx.labels, "head": [head_label(h) for h in range(ctx.cfg.n_heads)]}.get(site, ["all positions"])
    rows = [block_label(b) for b in range(ctx.cfg.n_layers)]
    col_title = {"resid_pre": "position", "head": "head"}.get(site, "")
    name = {
        "resid_pre": "blocks.i.hook_resid_pre",
        "head": "blocks.i.attn.hook_z[h]",
        "attn_out": "blocks.i.hook_attn_out",
        "mlp_out": "blocks.i.hook_mlp_out",
    }[site]
    st.markdown(f"Metric on this prompt **{result.metric_clean:.4f}**, on the corrupted one **{result.metric_corrupt:.4f}**.")
    if result.metric_clean == result.metric_corrupt:
        st.warning("The two prompts give the same metric: there is no difference to restore.")
        return
    exact, estimate = st.columns(2)
    restored, estimated = result.restored(), result.restored(result.estimate)
    top = max(abs_max(restored), abs_max(estimated))  # one colour scale: the two are to be compared
    with exact:
        heatmap(
            restored,
            rows,
            columns,
            "Fraction restored: patched",
            name,
            row_title="block",
            col_title=col_title,
            width=450,
            zmax=top,
        )
    with estimate:
        heatmap(
            estimated,
            rows,
            columns,
            "Attribution patching's estimate",
            name,
            row_title="block",
            col_title=col_title,
            width=450,
            zmax=top,
        )
    r, largest = result.agreement()
    if r is not None and r < UNRELIABLE:
        st.warning(
            plain(
                f"Here attribution patching disagrees with patching (correlation {r:.2f}): its linear "
                "estimate is unreliable for this site and these prompts. Trust the patched runs on the left."
            )
        )
    st.caption(
        f"Attribution patching estimates every cell from one backward pass of the corrupted run (the metric's "
        f"gradient × the clean − corrupted difference, a first-order approximation). Agreement with the patched "
        f"runs: correlation {'undefined (no variation)' if r is None else f'{r:.3f}'}, largest difference "
        f"{largest:.3g} in the metric."
    )
