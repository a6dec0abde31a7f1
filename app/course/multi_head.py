"""The lesson on many heads, on the course's model: the reshape into heads with one position's numbers,
each head's pattern, the concatenation and W_O against the sum of the heads' slices, and what one
head alone, and all heads but one, do to the prediction. Computed by model/course/multi_head.py."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number, plain
from glassbox.model.course.multi_head import PROMPT, Split, head_effects, split_heads
from glassbox.model.engine import GlassboxError, block_label, check_prompt
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import token_text

HEAD_COLOURS = ("#1f6feb", "#d9480f", "#2b8a3e", "#ae3ec9", "#f08c00", "#0c8599", "#e03131", "#5c940d")


@st.cache_data(max_entries=32, show_spinner=False)
def worked(prompt: str, block: int, _loaded: LoadedModel) -> Split:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    with lesson_pass("one block's heads", _loaded, len(tokens)):
        return split_heads(_loaded, tokens, block)


@st.cache_data(max_entries=32, show_spinner="Running the model with heads zeroed…")
def effects(prompt: str, block: int, _loaded: LoadedModel) -> list[dict]:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    with lesson_pass("the model with heads zeroed", _loaded, len(tokens), passes=1 + 2 * _loaded.cfg.n_heads):
        return head_effects(_loaded, tokens, block)


def head_bands(fig: go.Figure, heads: int, d_head: int, axis: str) -> None:
    """Lines between the heads' slices of a d_model axis."""
    for h in range(1, heads):
        edge = h * d_head - 0.5
        (fig.add_vline if axis == "x" else fig.add_hline)(edge, line=dict(color="#222", width=2))


def reshape(split: Split, loaded: LoadedModel, labels: list[str]) -> None:
    cfg = loaded.cfg
    H, T, dh, D = cfg.n_heads, len(labels), cfg.d_head, cfg.d_model
    st.subheader("One product, then a reshape")
    st.markdown(
        f"The heads do not run {H} separate projections one after the other. The block computes all their queries "
        f"in one product, x · W_Q, with W_Q of shape {D} × {D}; then it cuts each row of {D} numbers into {H} pieces "
        f"of {dh} and moves the head axis forward, so the {H} heads become a batch the rest of attention runs on at "
        "once. The same for the keys and the values."
    )
    lines = [
        ("x", f"[1, {T}, {D}]", "batch, seq, d_model"),
        ("q = x @ W_Q + b_Q", f"[1, {T}, {D}]", ""),
        (f"q.view(1, {T}, {H}, {dh})", f"[1, {T}, {H}, {dh}]", "split d_model into heads × d_head"),
        ("  .transpose(1, 2)", f"[1, {H}, {T}, {dh}]", "batch, heads, seq, d_head"),
    ]
    st.code("\n".join(f"{code:<24}{shape:<18}" + (f"# {note}" if note else "") for code, shape, note in lines), language="text")
    query_numbers(split, labels, H, dh, D)


@fragment
def query_numbers(split: Split, labels: list[str], H: int, dh: int, D: int) -> None:
    """One position's query as a row of d_model and as heads × d_head: a fragment, so moving the
    position redraws only these two charts."""
    T = len(labels)
    st.session_state.setdefault("heads_position", T - 1)
    if not 0 <= st.session_state["heads_position"] < T:  # a shorter prompt than the last one
        st.session_state["heads_position"] = T - 1
    position = st.select_slider("Position", list(range(T)), format_func=lambda i: labels[i], key="heads_position")
    row = split.q_flat[position]
    one = heatmap_figure(
        row[None, :],
        [labels[position]],
        [str(i) for i in range(D)],
        f"q at {labels[position]}: one row of {D}",
        "x @ W_Q + b_Q",
        row_title="position",
        col_title="feature of d_model",
        colorbar="value",
        gaps=False,
        height=170,
    )
    head_bands(one, H, dh, "x")
    show(one, config={"displayModeBar": False})
    split_rows = split.q_heads[:, position]
    text = [[f"{v:.2f}" for v in r] for r in split_rows] if dh <= 32 else None
    parts = heatmap_figure(
        split_rows,
        [f"head {h + 1}" for h in range(H)],
        [str(i) for i in range(dh)],
        f"the same {D} numbers as {H} rows of {dh}",
        "hook_q[:, position]",
        row_title="head",
        col_title="feature of d_head",
        colorbar="value",
        text=text,
        text_size=8,
        height=120 + 40 * H,
    )
    show(parts, config={"displayModeBar": False})
    st.caption(
        f"Largest difference between this reshape and the engine's own per-head queries (hook_q, which "
        f"stores W_Q per head): {number(split.reshape_difference, 3)}, float32 rounding. Head h's queries are "
        f"features h·{dh} to h·{dh} + {dh - 1} of the row: nothing else is split."
    )


def patterns(split: Split, loaded: LoadedModel, labels: list[str], block: int) -> None:
    st.subheader("Each head attends on its own")
    st.markdown(
        f"With its own {loaded.cfg.d_head}-wide queries and keys, each head of {block_label(block)} makes its "
        "own pattern over the same tokens: one row per query position, its weights summing to 1."
    )
    columns = st.columns(2)
    for h in range(loaded.cfg.n_heads):
        fig = heatmap_figure(
            split.patterns[h],
            labels,
            labels,
            f"head {h + 1}",
            f"blocks.{block}.attn.hook_pattern[{h}]",
            row_title="query (the token that looks)",
            col_title="key (the token looked at)",
            colour="sequential",
            zmax=1.0,
            colorbar="weight",
            fixed=True,
            hover="query %{y}<br>key %{x}<br>%{z:.4f}<extra></extra>",
        )
        fig.update_layout(height=min(200 + 22 * len(labels), 520))
        show(fig, columns[h % 2], config={"displayModeBar": False})


def output_projection(split: Split, loaded: LoadedModel, labels: list[str]) -> None:
    cfg = loaded.cfg
    H, dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
    st.subheader("Concatenate, then W_O")
    st.markdown(
        f"Each head's output z (its pattern times its values) is {dh} numbers a position. Transposed back and flattened, "
        f"the {H} heads sit side by side again, {H * dh} numbers a position, and one product with W_O "
        f"({H * dh} × {D}) mixes them into the block's output. Cut W_O into {H} slices of {dh} rows: head h's "
        "slice only ever meets head h's z, so the product is also the sum over heads of z_h · W_O[h]: what each head "
        "writes into the residual stream, the reading the explorer uses."
    )
    left, right = st.columns([3, 2])
    concat = heatmap_figure(
        split.concat,
        labels,
        [str(i) for i in range(H * dh)],
        "concat(z_1 … z_H)",
        "z.transpose(1, 2).reshape(seq, heads·d_head)",
        row_title="position:token",
        col_title="heads × d_head (a line between heads)",
        colorbar="value",
        gaps=False,
        height=min(200 + 18 * len(labels), 520),
    )
    head_bands(concat, H, dh, "x")
    show(concat, left, config={"displayModeBar": False})
    w_o = heatmap_figure(
        split.W_O,
        [str(i) for i in range(H * dh)],
        [str(i) for i in range(D)],
        "W_O",
        "attn.W_O",
        row_title="heads × d_head",
        col_title="feature of d_model",
        colorbar="weight",
        gaps=False,
        height=min(200 + 18 * len(labels), 520),
        image=True,
    )  # 16,384 weights: sent as a picture
    head_bands(w_o, H, dh, "y")
    show(w_o, right, config={"displayModeBar": False})
    cells = st.columns(2)
    cells[0].metric(
        "largest |concat · W_O − Σ_h z_h · W_O[h]|",
        number(split.concat_difference, 3),
        help="Both in float64, from the traced z and the stored W_O: only the order of the additions differs.",
    )
    cells[1].metric(
        "largest |concat · W_O − the engine's attention output|",
        number(split.engine_difference, 3),
        help="The engine computes in float32 (hook_attn_out).",
    )


def single_heads(loaded: LoadedModel, prompt: str, block: int) -> None:
    st.subheader("One head alone, all heads but one")
    st.markdown(
        f"What does each head of {block_label(block)} do for the prediction? Zero the other heads' z (their writes "
        "vanish; W_O's bias stays) and keep one; or zero one and keep the others. The engine edits the pass as it "
        "runs; the model itself is not changed."
    )
    rows = effects(prompt, block, loaded)
    top = rows[0]["top"][0]
    labels = {"all heads": "the model, all heads"}
    table = []
    for r in rows:
        name = labels.get(r["kind"]) or (
            f"head {r['head'] + 1} alone" if r["kind"] == "alone" else f"all heads but {r['head'] + 1}"
        )
        table.append(
            {
                "setting": name,
                f"p({token_text(top['token'])})": round(r["p_top"], 4),
                "top next tokens": " · ".join(f"{token_text(t['token'])} {t['p']:.2f}" for t in r["top"]),
            }
        )
    st.dataframe(table, hide_index=True)
    fig = go.Figure(
        go.Bar(
            x=[t["setting"] for t in table],
            y=[r["p_top"] for r in rows],
            marker_color=["#868e96"] + [HEAD_COLOURS[r["head"] % len(HEAD_COLOURS)] for r in rows[1:]],
        )
    )
    fig.update_layout(
        xaxis_title="setting",
        yaxis=dict(title=f"p({plain(token_text(top['token']))}), the model's top token", range=[0, 1]),
        height=300,
        margin=dict(t=10, b=10),
    )
    show(fig, config={"displayModeBar": False})
    drops = [rows[0]["p_top"] - r["p_top"] for r in rows if r["kind"] == "zeroed"]
    needed = int(np.argmax(drops))
    word = plain(token_text(top["token"]))
    if drops[needed] <= 0:
        st.caption(f"No single head's removal lowers the probability of the model's top token “{word}”.")
        return
    st.caption(
        f"Without head {needed + 1} the model's top token “{word}” loses the most: "
        f"{rows[0]['p_top']:.3f} → {rows[0]['p_top'] - drops[needed]:.3f}."
    )


@fragment
def on_the_model(loaded: LoadedModel) -> None:
    prompt = prompt_box(loaded, "heads_prompt", PROMPT)
    block = st.radio("Block", list(range(loaded.cfg.n_layers)), format_func=block_label, horizontal=True, key="heads_block")
    try:
        split = worked(prompt, int(block), loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    # byte fragments as <0xNN>: two fragments never share a label
    labels = [f"{i}:{token_text(loaded.tokenizer.readable(t))}" for i, t in enumerate(loaded.encode(prompt))]
    reshape(split, loaded, labels)
    patterns(split, loaded, labels, int(block))
    output_projection(split, loaded, labels)
    single_heads(loaded, prompt, int(block))


lesson = lesson_page("multi-head")
on_the_model(course_model())
lesson_end(lesson)
