"""Head catalog: what every attention head does over a set of texts, as block × head grids
(previous-token, self, duplicate-token, induction, mean entropy), and a finder for the heads whose
score is over a threshold. Computed by model/analysis/head_catalog.py through ``Model.heads``; the
UI chooses the texts and draws."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.long_task import limit_note, long_computation
from glassbox.app.explore.common import Explorer, heatmap, lacks
from glassbox.model.analysis import plans
from glassbox.model.analysis.head_catalog import PATTERNS
from glassbox.model.engine import GlassboxError, block_label, head_label
from glassbox.model.serving import trace_cost

# score → (title, what a cell is), in the order the grids are drawn
TITLES = {
    "induction": ("Induction", "Σ A[t, s + 1] over earlier s holding t's token"),
    "previous_token": ("Previous-token", "mean A[t, t − 1]"),
    "duplicate_token": ("Duplicate-token", "Σ A[t, s] over earlier s holding t's token"),
    "self": ("Self", "mean A[t, t]"),
    "entropy": ("Mean entropy (nats)", "mean −Σ A ln A over the keys"),
}
SOURCES = ("the bundled stories", "this prompt", "pasted text")
STORIES = (4, 8, 16, 32, 64)


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{i}.attn" for i in range(ctx.cfg.n_layers)}


MAX_TEXTS = 256  # pasted texts scored at once, at most (each one pass)


def catalog_plan(ctx: Explorer, texts: tuple[tuple[int, ...], ...] | None, n_stories: int) -> plans.Plan:
    """One pass per text; a story is counted at the whole context (it is cut there), a bound."""
    return plans.head_catalog([ctx.cfg.n_ctx] * n_stories if texts is None else [len(t) for t in texts])


def catalog(ctx: Explorer, texts: tuple[tuple[int, ...], ...] | None, n_stories: int):
    """``Model.heads`` per model and texts (None: the bundled stories), a long computation
    (long_task.py) admitted as one pattern capture of the longest text at a time (the engine runs
    one text at a time)."""
    longest = ctx.cfg.n_ctx if texts is None else max(len(t) for t in texts)  # stories are cut to the context
    memory = ctx.check_cost("Cataloguing the heads", lambda n: trace_cost(ctx.model, n, PATTERNS, False), longest)
    return long_computation(
        "The head catalog",
        (ctx.model_key, texts, n_stories),
        catalog_plan(ctx, texts, n_stories),
        ctx.model,
        lambda: ctx.loaded.heads(None if texts is None else [list(t) for t in texts], n_stories),
        memory,
    )


def chosen_texts(ctx: Explorer) -> tuple[tuple[tuple[int, ...], ...] | None, int] | None:
    """The texts the heads are scored over, as (token ids per text, or None for the stories; how
    many stories); None while there is nothing to score (a message says what is missing)."""
    left, right = st.columns([2, 1])
    source = left.radio(
        "Score the heads over",
        SOURCES,
        key="explore_heads_source",
        persist_state="session",
        horizontal=True,
        help="Scores are means over every query position of every text",
    )
    if source == SOURCES[0]:
        n = right.select_slider(
            "Stories",
            STORIES,
            value=16,
            key="explore_heads_stories",
            persist_state="session",
            help="The default model's training stories (seed 0), each cut to the context. A model "
            "whose vocabulary cannot spell them is scored on as many random sequences, each "
            "repeated once",
        )
        return None, n
    if source == SOURCES[1]:
        return (tuple(ctx.tokens),), 0
    with st.form("explore_heads_texts"):
        typed = st.text_area(
            "Texts",
            key="explore_heads_texts",
            persist_state="session",
            height=120,
            help=f"One text, or several (at most {MAX_TEXTS}) separated by an empty line; each at least "
            f"2 tokens and at most {ctx.cfg.n_ctx}",
        )
        st.form_submit_button("Score")
    texts = [t.strip() for t in typed.split("\n\n") if t.strip()]
    if not texts:
        st.info(plain(f"Paste a text (or several, at most {MAX_TEXTS}, separated by an empty line) and press Score."))
        return None
    if len(texts) > MAX_TEXTS:
        st.error(plain(f"That is {len(texts):,} texts: at most {MAX_TEXTS} are scored at once. Score fewer, or longer ones."))
        return None
    return tuple(tuple(ctx.loaded.encode(t)) for t in texts), 0


def head_name(block: int, head: int) -> str:
    return f"{block_label(block)}, {head_label(head)}"


def finder(ctx: Explorer, result) -> tuple[str, list[tuple[int, int, float]]]:
    """A score and a threshold: the heads over it (``HeadCatalog.find``), listed highest first."""
    left, right = st.columns(2)
    score = left.selectbox(
        "Find the heads whose",
        list(TITLES),
        key="explore_heads_find",
        persist_state="session",
        format_func=lambda s: TITLES[s][0].lower() + " score",
    )
    above = right.number_input("is over", value=0.5, step=0.05, key="explore_heads_above", persist_state="session", format="%.2f")
    found = result.find(score, above)
    if found:
        st.dataframe(
            pd.DataFrame({"head": [head_name(b, h) for b, h, _ in found], TITLES[score][0].lower(): [v for _, _, v in found]}),
            hide_index=True,
            height=min(38 + 35 * len(found), 320),
        )
    else:
        best = result.find(score, float("-inf"))[:1]  # the highest, for a threshold to try (none where all are NaN)
        st.info(
            plain(
                f"No head's {TITLES[score][0].lower()} score is over {above:g}"
                + (f"; the highest is {head_name(*best[0][:2])}'s, {best[0][2]:.3f}." if best else ".")
            )
        )
    return score, found


def render(ctx: Explorer) -> None:
    st.markdown(
        "What each attention head does, read from its attention pattern A over a set of texts: how much "
        "each query position t attends to the token before it (previous-token), to itself (self), to earlier "
        "copies of its own token (duplicate-token) and to the token that followed those copies (induction: "
        "what an induction head copies), and how spread its attention is (entropy)."
    )
    if lacks(ctx):
        return
    chosen = chosen_texts(ctx)
    if chosen is None:
        return
    texts, n_stories = chosen
    st.caption(plain(limit_note(ctx.model, catalog_plan(ctx, texts, n_stories))))
    try:
        result = catalog(ctx, texts, n_stories)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    if result is None:  # cancelled
        return
    stories = (
        (
            " (the bundled stories; a model whose vocabulary cannot spell them is scored on as many random "
            "sequences, each repeated once)"
        )
        if texts is None
        else ""
    )
    st.caption(
        f"{result.n_texts} text{'s' * (result.n_texts != 1)}{stories}, {result.n_queries:,} query positions; "
        f"{result.n_repeats:,} of them hold a token that came earlier, the ones duplicate-token and induction "
        "average over" + (" (none here: those two grids are empty)." if not result.n_repeats else ".")
    )
    score, found = finder(ctx, result)
    grids(ctx, result, score, found)


def grids(ctx: Explorer, result, chosen: str, found: list[tuple[int, int, float]]) -> None:
    """Every score as a block × head grid, two to a row; the finder's heads outlined on its score's."""
    rows = [block_label(i) for i in range(ctx.cfg.n_layers)]
    cols = [head_label(h) for h in range(ctx.cfg.n_heads)]
    names = list(TITLES)
    for pair in (names[i : i + 2] for i in range(0, len(names), 2)):
        for column, score in zip(st.columns(2), pair):
            title, formula = TITLES[score]
            with column:
                # attention weights sum to 1: the four shares on one 0–1 scale, comparable across grids
                heatmap(
                    result.scores[score],
                    rows,
                    cols,
                    f"{title} score" if score != "entropy" else title,
                    formula,
                    row_title="block",
                    col_title="head",
                    sequential=True,
                    width=450,
                    zmax=None if score == "entropy" else 1.0,
                    marks=[(b, h) for b, h, _ in found] if score == chosen else (),
                )
