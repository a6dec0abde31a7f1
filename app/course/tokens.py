"""The lesson on tokens: one text through the course model's BPE tokenizer and through UTF-8 bytes, a
byte-pair encoder trained on the page merge by merge, and audio, an image and prices cut into
sequences and embedded. Computed by model/course/tokens.py."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import plain, plain_html
from glassbox.model.course.tokens import (
    AUDIO,
    D_MODEL,
    IMAGE,
    MAX_MERGES,
    PRICES,
    SAMPLE_RATE,
    TEXT,
    TRAIN_SENTENCES,
    Domain,
    alphabet,
    audio_clip,
    audio_domain,
    bpe_tokens,
    byte_tokens,
    image_domain,
    ms_to_samples,
    picture,
    price_domain,
    prices,
    return_tokens,
    text_embedding,
    tokenize,
    train_bpe,
    vocabulary,
)
from glassbox.model.engine import GlassboxError
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import token_text

CHIP_COLOURS = ("#dbe4ff", "#d3f9d8")  # neighbouring tokens alternate, so where one ends shows
NEW_COLOUR = "#ffe066"  # the token the chosen merge made


def chips(pieces: list[str], titles: list[str], new: str | None = None) -> str:
    """Tokens as chips, their text drawn visibly (a space as ␣), the id on hover."""
    spans = []
    for i, (piece, title) in enumerate(zip(pieces, titles)):
        colour = NEW_COLOUR if new is not None and piece == new else CHIP_COLOURS[i % 2]
        spans.append(
            f"<span title='{plain_html(title)}' style='background:{colour};border-radius:4px;"
            f"padding:1px 4px;margin:2px;display:inline-block'>{plain_html(token_text(piece))}</span>"
        )
    return f"<div style='font-family:monospace;line-height:2'>{''.join(spans)}</div>"


@fragment
def two_tokenizers(loaded: LoadedModel) -> None:
    st.subheader("One text, two tokenizers")
    st.markdown(
        "A model reads whole numbers, not letters. The simplest way to get them: the text's UTF-8 bytes, one token "
        "per byte, 256 ids. The course's model uses byte-pair encoding (BPE) instead: it starts from the bytes and "
        f"joins pieces that were frequent in its training stories, up to {loaded.cfg.vocab_size:,} ids. Fewer, "
        "longer tokens for the words it saw often; bytes again for what it never saw."
    )
    text = st.text_input("Text", TEXT, max_chars=300, key="tokens_text")
    try:
        bpe = bpe_tokens(loaded, text)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    raw = byte_tokens(text)
    cells = st.columns(3)
    cells[0].metric("characters", f"{len(text):,}")
    cells[1].metric("byte-level tokens", f"{len(raw):,}")
    cells[2].metric("the course model's BPE tokens", f"{len(bpe):,}")
    st.markdown(f"**BPE: {len(bpe)} tokens** (hover a token for its id)")
    st.html(chips([t["piece"] for t in bpe], [f"id {t['id']}" for t in bpe]))
    st.markdown(f"**Bytes: {len(raw)} tokens**")
    st.html(chips([t["piece"] for t in raw], [f"byte {t['id']}" for t in raw]))
    embedded = text_embedding(loaded, text)
    labels = [f"{i}:{token_text(t['piece'])}" for i, t in enumerate(bpe)]  # byte fragments as <0xNN>
    st.markdown(
        f"Each BPE id then picks a row of the model's embedding table W_E: {len(bpe)} ids become a "
        f"{len(bpe)} × {embedded.shape[1]} matrix, the sequence the blocks read."
    )
    show(
        heatmap_figure(
            embedded,
            labels,
            [str(i) for i in range(embedded.shape[1])],
            "The text, embedded",
            "embed.W_E[ids]",
            row_title="position:token",
            col_title="feature of d_model",
            colorbar="value",
            gaps=False,
            height=min(160 + 18 * len(bpe), 600),
        ),
        config={"displayModeBar": False},
    )
    st.caption(
        "Rows of ids the model rarely met in its stories (byte fragments, lone letters) look almost alike: "
        "training had little reason to tell them apart."
    )


@st.cache_data(max_entries=16, show_spinner=False)
def trained(sentences: tuple[str, ...]) -> list:
    return train_bpe(sentences, MAX_MERGES)


@fragment
def live_bpe() -> None:
    st.subheader("Byte-pair encoding, trained here")
    st.markdown(
        "Where does a BPE vocabulary come from? Start with every character as a token. Count each pair of "
        "neighbouring tokens over the corpus, join the most frequent pair into one new token, and repeat. Each merge "
        "adds one token to the vocabulary and shortens every word that held the pair. Below, a trainer written in "
        "plain Python (the same merges as the `tokenizers` library's trainer: a test checks it) on a few sentences: "
        "edit them, and move through the merges."
    )
    corpus = st.text_area(
        "Training sentences, one a line", "\n".join(TRAIN_SENTENCES), max_chars=1000, key="tokens_corpus", height=140
    )
    sentences = tuple(line for line in corpus.splitlines() if line.strip())
    if not sentences:
        st.info(plain("Type a sentence or two to train on."))
        return
    merges = trained(sentences)
    if not merges:
        st.info(plain("No word has two characters side by side: nothing to merge."))
        return
    k = st.slider("Merges learned", 0, len(merges), min(5, len(merges)), key="tokens_merges")
    first = alphabet(sentences)
    vocab = vocabulary(sentences, merges[:k])
    new = merges[k - 1].token if k else None
    if k:
        m = merges[k - 1]
        st.markdown(
            f"Merge {k}: “{plain(m.left)}” + “{plain(m.right)}” → “{plain(m.token)}”, "
            f"side by side {m.count} time{'s' * (m.count != 1)} in the corpus when it was chosen."
        )
    else:
        st.markdown("Before any merge: one token per character.")
    st.markdown(f"**Vocabulary: {len(vocab)} tokens** ({len(first)} characters + {len(vocab) - len(first)} merged)")
    st.html(chips(vocab, [f"token {i}" for i in range(len(vocab))], new))
    rows = []
    for sentence in sentences:
        words = tokenize(sentence, merges[:k])
        pieces = [p for w in words for p in w]
        rows.append(len(pieces))
        st.html(chips(pieces, [f"word {i + 1}" for i, w in enumerate(words) for _ in w], new))
    characters = sum(len("".join(s.split())) for s in sentences)
    st.caption(
        f"{sum(rows)} tokens for {characters} characters (spaces are not tokens here: each word is split on "
        f"its own). Every merge removes one token per place its pair occurs."
    )
    counts = [sum(len(p) for s in sentences for p in tokenize(s, merges[:j])) for j in range(len(merges) + 1)]
    fig = go.Figure(
        [
            go.Scatter(x=list(range(len(counts))), y=counts, mode="lines+markers", name="tokens"),
            go.Scatter(x=[k], y=[counts[k]], mode="markers", marker=dict(size=13), name="now"),
        ]
    )
    fig.update_layout(
        xaxis_title="merges learned", yaxis_title="tokens in the corpus", height=260, margin=dict(t=10, b=10), showlegend=False
    )
    show(fig, config={"displayModeBar": False})


def embedded_heatmap(domain: Domain, labels: list[str], axis: str) -> go.Figure:
    return heatmap_figure(
        domain.embedded.T,
        [str(i) for i in range(D_MODEL)],
        labels,
        f"{domain.name}: {domain.length} tokens × {D_MODEL}",
        "tokens @ W_embed",
        row_title="feature",
        col_title=axis,
        colorbar="value",
        gaps=False,
        height=300,
    )


def shapes(domain: Domain) -> None:
    st.markdown(
        f"{domain.raw} → **{domain.length} tokens**, each {plain(domain.tokens)}: "
        f"{' × '.join(map(str, domain.token_shape))} → embedded {domain.length} × {D_MODEL}."
    )


@st.cache_data(max_entries=32, show_spinner=False)
def audio(seconds: float, window_ms: int, hop_ms: int) -> Domain:
    return audio_domain(seconds, window_ms, hop_ms)


@fragment
def sound() -> None:
    st.markdown(
        "**Audio: samples → frames.** A clip is a long list of samples (16,000 a second here). Speech models "
        "cut it into short overlapping windows, one token each."
    )
    cells = st.columns(3)
    seconds = cells[0].select_slider("Clip length (s)", [0.25, 0.5, 1.0, 2.0, 3.0], AUDIO["seconds"], key="tokens_seconds")
    window = cells[1].select_slider("Window (ms)", [10, 20, 25, 30, 50], AUDIO["window_ms"], key="tokens_window")
    hop = cells[2].select_slider("Hop (ms)", [5, 10, 15, 20, 25], AUDIO["hop_ms"], key="tokens_hop")
    domain = audio(float(seconds), int(window), int(hop))
    shapes(domain)
    n, w, h = round(seconds * SAMPLE_RATE), ms_to_samples(window), ms_to_samples(hop)
    st.caption(f"Frames: 1 + ⌊(samples − window) / hop⌋ = 1 + ⌊({n:,} − {w}) / {h}⌋ = {domain.length}.")
    clip = audio_clip(float(seconds))
    shown = slice(0, min(len(clip), 3 * w + 2 * h))  # the first few frames, drawn over the samples
    fig = go.Figure(
        go.Scatter(
            x=np.arange(len(clip))[shown] / SAMPLE_RATE * 1000, y=clip[shown], mode="lines", line=dict(width=1), name="samples"
        )
    )
    for f in range(min(3, domain.length)):
        fig.add_vrect(
            x0=f * h / SAMPLE_RATE * 1000,
            x1=(f * h + w) / SAMPLE_RATE * 1000,
            opacity=0.12,
            fillcolor=("#1f6feb", "#d9480f", "#2b8a3e")[f],
            line_width=0,
            annotation_text=f"frame {f}",
            annotation_position="top left",
        )
    fig.update_layout(xaxis_title="time (ms)", yaxis_title="sample value", height=220, margin=dict(t=20, b=10), showlegend=False)
    show(fig, config={"displayModeBar": False})
    if domain.length:
        show(embedded_heatmap(domain, [str(i) for i in range(domain.length)], "frame"), config={"displayModeBar": False})


@st.cache_data(max_entries=16, show_spinner=False)
def image(height: int, width: int) -> Domain:
    return image_domain(height, width, IMAGE["patch"])


@fragment
def pictures() -> None:
    p = IMAGE["patch"]
    st.markdown(
        f"**Images: pixels → patches.** A vision transformer cuts a picture into {p}×{p} squares and "
        "flattens each (its pixels times 3 colours) into one token."
    )
    cells = st.columns(2)
    height = cells[0].select_slider("Height (pixels)", [32, 64, 96, 128, 224], IMAGE["height"], key="tokens_height")
    width = cells[1].select_slider("Width (pixels)", [32, 64, 96, 128, 224, 320], IMAGE["width"], key="tokens_width")
    domain = image(int(height), int(width))
    shapes(domain)
    st.caption(f"Patches: ({height} / {p}) × ({width} / {p}) = {height // p} × {width // p} = {domain.length}.")
    left, right = st.columns([2, 3])
    fig = go.Figure(go.Image(z=(picture(int(height), int(width)) * 255).astype(np.uint8)))
    for x in range(0, int(width) + 1, p):
        fig.add_vline(x=x - 0.5, line=dict(color="white", width=1))
    for y in range(0, int(height) + 1, p):
        fig.add_hline(y=y - 0.5, line=dict(color="white", width=1))
    fig.update_layout(xaxis_title="x (pixels)", yaxis_title="y (pixels)", height=300, margin=dict(t=10, b=10))
    show(fig, left, config={"displayModeBar": False})
    show(
        embedded_heatmap(domain, [str(i) for i in range(domain.length)], "patch (row by row)"),
        right,
        config={"displayModeBar": False},
    )


@fragment
def price_series() -> None:
    d = PRICES
    st.markdown(
        "**Prices: values → binned returns.** A price series becomes tokens by taking each day's return "
        f"(the log of today's price over yesterday's) and naming the bin it falls in: {d['bins']} equal bins "
        f"over ±{d['clip']:.0%}, 0 the lowest. Then it is a vocabulary like text's, and an embedding table "
        "turns each id into a vector."
    )
    bins = st.select_slider("Bins", [4, 8, 16, 32, 64], d["bins"], key="tokens_bins")
    series = prices()
    ids = return_tokens(series, int(bins))
    domain = price_domain(d["days"], int(bins))
    shapes(domain)
    fig = go.Figure(
        [
            go.Scatter(x=list(range(len(series))), y=series, mode="lines", name="price", yaxis="y"),
            go.Scatter(x=list(range(1, len(series))), y=ids, mode="markers", marker=dict(size=4), name="token id", yaxis="y2"),
        ]
    )
    fig.update_layout(
        xaxis_title="day",
        yaxis=dict(title="price"),
        height=260,
        margin=dict(t=10, b=10),
        yaxis2=dict(
            title="token id (return bin)",
            overlaying="y",
            side="right",
            range=[-1, int(bins)],
            dtick=max(1, int(bins) // 4),
            showgrid=False,
        ),
        legend=dict(orientation="h", y=1.12, x=0),
    )
    show(fig, config={"displayModeBar": False})
    show(embedded_heatmap(domain, [f"day {i + 1}: id {t}" for i, t in enumerate(ids)], "day"), config={"displayModeBar": False})


def other_domains() -> None:
    st.subheader("Tokenize any domain")
    st.markdown(
        "The architecture never asks what a token means: anything cut into a sequence of vectors will do. Below, a "
        f"tiny untrained model (a seeded linear embedding to {D_MODEL} numbers) embeds a synthetic sound, picture "
        "and price series. Each heatmap is the embedded sequence, one column per token."
    )
    sound()
    pictures()
    price_series()


lesson = lesson_page("tokens")
two_tokenizers(course_model())
live_bpe()
other_domains()
lesson_end(lesson)
