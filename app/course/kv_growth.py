"""The lesson on the KV cache: generation growing the cache on the bundled model; its size by the
formula and as measured; real models' caches; the serving arithmetic of the course's example."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain
from glassbox.app.components.latex import thousands
from glassbox.model.course.kv_growth import (
    GB,
    PROMPT,
    CacheStep,
    Serving,
    cache_bytes,
    course_table,
    grow,
    serving_combinations,
    within_context,
)
from glassbox.model.course.real_model_configs import BYTES, MODEL
from glassbox.model.engine import GlassboxError, block_label
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.labels import token_text

MOST_NEW = 20  # tokens a learner may add here


def size_text(n: int) -> str:
    """Exact bytes, then in the unit that reads best (binary units, named as such)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:,.2f} {unit})"
    return f"{n:,} bytes"


@st.cache_data(max_entries=32, show_spinner=False)
def steps_for(prompt: str, new_tokens: int, _loaded: LoadedModel) -> list[CacheStep]:
    tokens = _loaded.encode(prompt)
    with lesson_pass("generation with a KV cache", _loaded, len(tokens) + new_tokens):
        return grow(_loaded, tokens, new_tokens)


def cache_picture(steps: list[CacheStep], labels: list[str], layers: int) -> go.Figure:
    """Each layer's cached positions: the ones kept from before in blue, this step's in orange."""
    last = steps[-1]
    kept = last.cached - last.fed
    z = [[0 if position < kept else 1 for position in range(last.cached)] for _ in range(layers)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(last.cached)),
            y=[block_label(i) for i in range(layers)],
            colorscale=[[0, "#1f6feb"], [1, "#f08c00"]],
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="%{y}, position %{x}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis=dict(
            title="position in the cache (its token)",
            tickmode="array",
            tickvals=list(range(last.cached)),
            ticktext=labels,
            tickangle=-45,
        ),
        yaxis=dict(title="block", autorange="reversed"),
        height=120 + 34 * layers,
        margin=dict(t=10, b=10, l=10, r=10),
    )
    return fig


@fragment
def generation(loaded: LoadedModel) -> None:
    st.subheader("Generating, one token at a time")
    st.markdown(
        "A new token's query must meet the keys of every earlier position, and its output mixes their values. "
        "Those keys and values do not change once computed (a decoder never looks ahead), so generation keeps "
        "them: each step feeds only the newest token, computes its one query, key and value per head, and appends "
        "the key and value to every layer's cache. The work per step stays one token's; the memory grows by one "
        "row per layer."
    )
    prompt = prompt_box(loaded, "kv_prompt", PROMPT)
    if st.session_state.get("kv_for") != prompt:  # a new prompt starts again
        st.session_state.kv_for, st.session_state.kv_new = prompt, 0
    left, right, _ = st.columns([1, 1, 3])
    if left.button("Generate a token", key="kv_generate", disabled=st.session_state.kv_new >= MOST_NEW):
        st.session_state.kv_new += 1
    if right.button("Reset", key="kv_reset"):
        st.session_state.kv_new = 0
    try:
        steps = steps_for(prompt, st.session_state.kv_new, loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    cfg, last = loaded.cfg, steps[-1]
    ids = loaded.encode(prompt) + [s.next_id for s in steps[:-1]]
    labels = [f"{i} {token_text(loaded.pieces[t])}" for i, t in enumerate(ids)]
    show(cache_picture(steps, labels, cfg.n_layers), config={"displayModeBar": False})
    st.caption(
        "Orange: the positions this pass added to every layer's cache (and computed queries for); blue: the "
        "positions cached by earlier passes, read again without being recomputed."
    )
    fed = "the whole prompt" if len(steps) == 1 else f"one token, {token_text(loaded.pieces[last.token_id])}"
    st.markdown(
        f"This pass fed {plain(fed)}: its queries are {last.query_shape} (batch, heads, new positions, d_head). "
        f"Each layer's keys, and its values, are now {last.key_shapes[0]}: {last.cached} positions. Next, "
        f"greedily: {plain(token_text(loaded.pieces[last.next_id]))}."
    )
    element = BYTES["fp32"] if loaded.model.embed.W_E.element_size() == 4 else loaded.model.embed.W_E.element_size()
    st.latex(
        r"2 \times \text{layers} \times \text{tokens} \times \text{key/value heads} \times d_{head} \times "
        r"\text{bytes}"
    )
    st.latex(
        rf"= 2 \times {cfg.n_layers} \times {last.cached} \times {cfg.n_kv_heads} \times {cfg.d_head} \times "
        rf"{element} = {thousands(last.formula_bytes)}\ \text{{bytes}}"
    )
    st.metric("measured: the bytes of the engine's cache tensors", f"{last.measured_bytes:,}")
    if len(steps) > 1:
        fig = go.Figure(
            [
                go.Scatter(
                    x=[s.cached for s in steps],
                    y=[s.measured_bytes for s in steps],
                    mode="markers",
                    name="measured",
                    marker=dict(size=10),
                ),
                go.Scatter(x=[s.cached for s in steps], y=[s.formula_bytes for s in steps], mode="lines", name="formula"),
            ]
        )
        fig.update_layout(
            xaxis_title="tokens in the cache",
            yaxis_title="bytes",
            height=260,
            margin=dict(t=10, b=10),
            legend=dict(orientation="h", y=1.15),
        )
        show(fig, config={"displayModeBar": False})


@fragment
def calculator() -> None:
    st.subheader("At real scale")
    st.markdown(
        "The same formula with a real model's numbers, from its configuration alone. Models with grouped-query "
        "attention (Llama-2-70B, Llama-3, Qwen3, Gemma 3, Mixtral) keep fewer key/value heads than query heads, "
        "and the cache shrinks by that factor."
    )
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1.4])
    name = c1.selectbox("Model", list(MODEL), index=list(MODEL).index("Llama-3-70B"), key="kv_model")
    tokens = c2.number_input("Tokens", min_value=1, max_value=10_000_000, value=8192, step=1024, key="kv_tokens")
    dtype = c3.radio("Numbers", list(BYTES), index=1, key="kv_dtype", horizontal=True)
    shape = MODEL[name].shape
    every = c4.checkbox(
        "one key/value head per query head",
        key="kv_every_head",
        help=f"As if {name} had {shape.heads} key/value heads, as the course's table assumes.",
    )
    counted = within_context(name, int(tokens))
    if counted < int(tokens):
        st.warning(
            plain(
                f"{name} reads at most {shape.context:,} tokens (its context): a cache of {int(tokens):,} "
                f"tokens never exists. Computed at {counted:,}."
            ),
            icon=":material/warning:",
        )
    size = cache_bytes(name, counted, dtype, shape.heads if every else None)
    heads = shape.heads if every else shape.kv_heads
    st.markdown(
        f"2 × {shape.layers} layers × {counted:,} tokens × {heads} key/value heads × {shape.d_head} × "
        f"{BYTES[dtype]} bytes = **{size_text(size)}** for one sequence."
    )
    st.markdown(
        "**The course's table, recomputed** (fp16; GB = 10⁹ bytes, GiB = 2³⁰). The course multiplies by "
        "d_model, that is, by every query head: right for GPT-2 and GPT-3, 8 times too much for the "
        "Llamas, which keep 8 key/value heads for 64 query heads."
    )
    st.dataframe(
        [
            {
                "model": r["model"],
                "tokens": f"{r['tokens']:,}",
                "key/value heads": r["kv_heads"],
                "cache (its own heads)": size_text(r["bytes"]),
                "as if one per query head": size_text(r["bytes_as_if_every_head"]),
                "the course prints": r["course_prints"],
            }
            for r in course_table()
        ],
        hide_index=True,
    )
    st.caption(
        "GPT-2 small: 37,748,736 bytes is 37.7 MB or 36 MiB. GPT-3: 9.66 GB (9.0 GiB), where the course "
        "prints 9.4. Llama-2-70B as if it had 64 heads: 10.7 GB (10 GiB), printed 10.5. Llama-3-70B at "
        "128,000 tokens as if 64: 335.5 GB (312.5 GiB), printed ~328; with its own 8 heads, 41.9 GB. (128,000 "
        "tokens is Llama 3.1's context, as the course counts it; Llama-3-70B's own configuration says 8,192, "
        "and the calculator above stops there.)"
    )


@fragment
def serving() -> None:
    st.subheader("Serving: users × cache + weights, against the GPUs")
    st.markdown(
        "The course's question: Llama-3-70B for 100 users at 32,768 tokens each on 8 GPUs of 80 GB. Switch the "
        "remedies on one by one. The weights are counted once, at fp16; without tensor parallelism every GPU "
        "would need a whole copy, which does not fit on one GPU."
    )
    c1, c2, c3, c4 = st.columns(4)
    users = c1.number_input("Users", 1, 100_000, 100, key="kv_users")
    context = c2.number_input("Context (tokens)", 1, 1_000_000, 32_768, step=1024, key="kv_context")
    gpus = c3.number_input("GPUs", 1, 1024, 8, key="kv_gpus")
    gpu_gb = c4.number_input("GB per GPU", 1, 1000, 80, key="kv_gpu_gb")
    s1, s2, s3, s4 = st.columns(4)
    gqa = s1.toggle("GQA (8 key/value heads)", key="kv_gqa")
    int8 = s2.toggle("int8 cache", key="kv_int8")
    paged = s3.toggle("paged allocation", key="kv_paged")
    tp = s4.toggle("tensor parallelism", key="kv_tp")
    used = s3.number_input("tokens used on average", 1, 1_000_000, 4096, step=512, key="kv_used", disabled=not paged)
    result = Serving(
        users=int(users),
        context=int(context),
        gpus=int(gpus),
        gpu_gb=float(gpu_gb),
        gqa=gqa,
        int8=int8,
        paged_tokens=int(used) if paged else None,
        tensor_parallel=tp,
    ).result()
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("cache per user", f"{result['per_user_bytes'] / GB:,.2f} GB")
    m2.metric("needed: caches + weights", f"{result['need_bytes'] / GB:,.1f} GB")
    m3.metric("GPU memory", f"{result['memory_bytes'] / GB:,.0f} GB")
    m4.metric("needed ÷ memory", f"{result['times_over']:.2f}×")
    if result["fits"]:
        st.success(plain(f"It fits: room for {result['users_that_fit']:,} users' caches beside the weights."))
    else:
        problems = []
        if result["need_bytes"] > result["memory_bytes"]:
            problems.append(f"it needs {result['times_over']:.2f} times the GPUs' memory")
        if not result["weights_placeable"]:
            problems.append(
                f"the weights ({result['weights_bytes'] / GB:,.1f} GB) do not fit on one GPU: tensor parallelism splits them"
            )
        st.warning(plain("It does not fit: " + "; and ".join(problems) + "."))
    st.markdown("**The course's remedies, added one at a time** (its defaults):")
    st.dataframe(
        [
            {
                "switches": r["switches"],
                "cache per user (GB)": round(r["per_user_bytes"] / GB, 2),
                "needed (GB)": round(r["need_bytes"] / GB, 1),
                "needed ÷ 640 GB": round(r["times_over"], 2),
                "fits": "yes" if r["fits"] else "no",
            }
            for r in serving_combinations()
        ],
        hide_index=True,
    )
    st.caption(
        "The course gets 82 GB per user and 13× over; exactly it is 85.9 GB (80 GiB) and 13.6×, its 140 GB of "
        "weights being 141.1 GB. With GQA, 10.7 GB per user (the course: 10.25); with int8, 5.4 GB (5.1). "
        "The course's 3–5 GB per user for paged allocation does not follow from its own 2–4K tokens: 4,096 "
        "tokens with GQA and int8 are 0.67 GB."
    )


lesson = lesson_page("kv-cache")
generation(course_model())
calculator()
serving()
lesson_end(lesson)
