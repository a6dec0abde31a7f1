"""What every explorer view shares: the prompt in context, traces from one bounded cache, the
block/head/position pickers, the pipeline strip and a heatmap that stays fast at 512 tokens."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from glassbox.app.components.charts import show
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import cell_text, plain
from glassbox.app.components.pipeline import pipeline_strip
from glassbox.app.resources import check_cost, model_pass, same_request_waits, trace_budget, trace_cache
from glassbox.model.analysis import downsample, parts
from glassbox.model.analysis.architecture import missing
from glassbox.model.analysis.experts import SHARED, expert_label, units
from glassbox.model.engine import Target, Trace, block_label, head_label, to_numpy
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.plot.grid import unit_axis
from glassbox.model.plot.heatmap import ClickLayer, abs_max, fits_text, heatmap_figure
from glassbox.model.plot.labels import token_text
from glassbox.model.serving import Needs, capture_plan, trace_cost, working_bytes
from glassbox.model.serving.limits import FULL_TRACE_BYTES

MAX_ROWS, MAX_COLS = 160, 256  # a heatmap larger than this is drawn as block means, with a zoom
TEXT_ROWS = 24  # up to this many rows, values are written in the cells where they fit across


T = TypeVar("T")
_derived: dict[int, dict] = {}  # by the trace's id, dropped when the trace is (a Trace is not hashable)
_deriving = threading.Lock()


def derived(trace: Trace, key: tuple, compute: Callable[[], T]) -> T:
    """What a view computes from a (shared, unchanging) trace, such as block means or norms,
    kept as long as the trace is: a view reopened, by anyone, does not compute it again."""
    with _deriving:
        if id(trace) not in _derived:
            _derived[id(trace)] = {}
            weakref.finalize(trace, _derived.pop, id(trace), None)
        store = _derived[id(trace)]
        if key in store:
            return store[key]
    value = compute()
    with _deriving:
        return store.setdefault(key, value)


_drawn: weakref.WeakKeyDictionary[Tokenizer, list[str]] = weakref.WeakKeyDictionary()


def drawn_vocabulary(tokenizer: Tokenizer) -> list[str]:
    """Every token of a (shared, unchanging) tokenizer as drawn, once per server rather than per
    rerun (150k tokens take a tenth of a second), for as long as the tokenizer lives: the model
    cache's bound decides, not this."""
    with _deriving:
        if tokenizer in _drawn:
            return _drawn[tokenizer]
    drawn = [token_text(tokenizer.readable(i)) for i in range(len(tokenizer.pieces))]
    with _deriving:
        return _drawn.setdefault(tokenizer, drawn)


@dataclass
class Explorer:
    model_key: str
    loaded: LoadedModel
    tokens: list[int]
    target: Target | None  # None: the mean next-token loss
    source: list[int] | None = None  # an encoder-decoder's source (``tokens`` are then what its decoder reads)

    @property
    def model(self):
        return self.loaded.model

    @property
    def cfg(self):
        return self.loaded.cfg

    @cached_property
    def pieces(self) -> list[str]:
        """The prompt's tokens as drawn (``token_text``: ␣ for a space, <0xE4> for a byte fragment)."""
        return [self.piece(t) for t in self.tokens]

    @cached_property
    def labels(self) -> list[str]:
        """Unique axis labels: position and token (a token can occur twice)."""
        return [f"{i}:{p}" for i, p in enumerate(self.pieces)]

    @cached_property
    def source_labels(self) -> list[str]:
        """An encoder-decoder's source positions, labelled as ``labels`` are."""
        return [f"{i}:{self.piece(t)}" for i, t in enumerate(self.source or [])]

    @cached_property
    def vocab_pieces(self) -> list[str]:
        """Every id as drawn; a model may have more rows than its tokenizer has tokens (#id)."""
        drawn = drawn_vocabulary(self.loaded.tokenizer)
        return drawn + [f"#{i}" for i in range(len(drawn), self.cfg.vocab_size)]

    def piece(self, token_id: int) -> str:
        return self.vocab_pieces[token_id]

    def can_backward(self) -> bool:
        return self.target is not None or len(self.tokens) > 1

    def plan(self, needs: Needs) -> tuple[tuple[str, ...] | None, bool]:
        """What to capture: everything (forward and backward) when a full trace fits in 2 GiB and
        in a third of the server's trace budget (computing it takes 1.5 × its bytes), else what
        ``needs`` names."""
        names, backward = capture_plan(self.model, len(self.tokens), needs, min(FULL_TRACE_BYTES, trace_budget() // 3))
        return names, backward and self.can_backward()

    def check_cost(self, what: str, cost: Callable[[int], int], n_tokens: int | None = None) -> int:
        """``cost`` (bytes, of a length in tokens) of this prompt (or of ``n_tokens``), or a
        GlassboxError when it is over the server's whole trace budget, naming the longest prompt
        that fits."""
        return check_cost(what, cost, len(self.tokens) if n_tokens is None else n_tokens, self.cfg.n_ctx)

    def pass_cost(self, what: str, backward: bool, batch: Callable[[int], int] = lambda n: 1, n_tokens: int | None = None) -> int:
        """A pass of ``batch(length)`` sequences of this prompt's length (an analysis), checked."""
        return self.check_cost(what, lambda n: working_bytes(self.model, n, backward, batch(n)), n_tokens)

    def trace(self, needs: Needs) -> Trace:
        """Everything (forward and backward) when it fits (``plan``), else what ``needs`` names;
        admitted against the server's budget, refused when even what ``needs`` names is over it."""
        view = (needs.names, needs.backward and self.can_backward())
        self.check_cost("A trace for this view", lambda n: trace_cost(self.model, n, *view))
        names, backward = self.plan(needs)
        key = (self.model_key, tuple(self.tokens), self.target if backward else None, names, backward)
        cost = trace_cost(self.model, len(self.tokens), names, backward)

        def compute() -> Trace:
            with model_pass("trace", cost):
                return self.loaded.trace(self.tokens, names=names, backward=backward, target=self.target)

        with st.spinner("Tracing the prompt…"), same_request_waits("the same trace") as waiting:
            return trace_cache().get(key, compute, waiting)


def probs_at(trace: Trace, position: int) -> torch.Tensor:
    """hook_probs at one position, kept with the trace: the whole of hook_probs is derived from
    the logits each time it is read (T × vocabulary)."""
    return derived(trace, ("hook_probs at", position), lambda: trace["hook_probs"][position])


def array(tensor: torch.Tensor) -> np.ndarray:
    return to_numpy(tensor.float())  # float32 for drawing, whatever the model's precision


def lacks(ctx: Explorer, mlp: bool = False) -> bool:
    """Whether the model lacks what a view (or a part of one) reads: its blocks, or with ``mlp``
    their MLPs; where it does, says so in one sentence (model/analysis/architecture.py's)."""
    why = missing(ctx.cfg, mlp)
    if why:
        st.info(plain(why))
    return why is not None


def not_a_decoder(ctx: Explorer, why: str) -> bool:
    """Whether the model is not decoder-only, for a view that needs one; where it is not, says
    ``why`` and what the model is, in one sentence."""
    if ctx.cfg.kind == "decoder":
        return False
    st.info(plain(f"{why}; this model is an {ctx.cfg.kind}."))
    return True


def offered(key: str, options: list[str], default: str | None = None) -> list[str]:
    """``options`` for a choice kept in ``st.session_state[key]``: a value this model does not
    offer (kept from another model, such as an MLP's tensor on an attention-only one) becomes
    ``default``, where it is offered, else the first option."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = default if default in options else options[0]
    return options


def choose_layer(ctx: Explorer, label: str = "Block") -> int:
    return st.selectbox(label, range(ctx.cfg.n_layers), key="explore_block", persist_state="session", format_func=block_label)


def choose_head(ctx: Explorer) -> int:
    return st.selectbox("Head", range(ctx.cfg.n_heads), key="explore_head", persist_state="session", format_func=head_label)


def choose_position(ctx: Explorer, label: str = "Position", key: str = "explore_pos", help: str | None = None) -> int:
    return st.selectbox(
        label, range(len(ctx.tokens)), key=key, persist_state="session", format_func=lambda i: ctx.labels[i], help=help
    )


def has_heads(name: str) -> bool:
    """Whether a tensor holds every head (or key/value head) of a block, that axis first (hook_q, hook_k …)."""
    return unit_axis(name) in ("head", "kv_head")


def has_experts(name: str) -> bool:
    """Whether a tensor holds every expert of a block, the expert axis first (experts.hook_pre, W_in …)."""
    return unit_axis(name) == "expert"


def expert_options(ctx: Explorer, shared: bool = True) -> list:
    """The model's routed experts (and its shared one, where it has one and ``shared``)."""
    options = units(ctx.cfg, next(i for i in range(ctx.cfg.n_layers) if ctx.cfg.is_moe(i)))
    return options if shared else [u for u in options if u != SHARED]


def choose_expert(
    ctx: Explorer,
    where=st,
    label: str = "Expert",
    key: str = "explore_expert",
    shared: bool = True,
    default: int | None = None,
    help: str | None = None,
) -> int | str:
    """A routed expert of the model (counted from 0, as its index in expert_weights[:, e]), or the
    shared expert where the model has one (and ``shared``); ``default`` where none is chosen yet."""
    options = offered(key, expert_options(ctx, shared), default)
    return where.selectbox(label, options, key=key, persist_state="session", format_func=expert_label, help=help)


COMPACT_BLOCKS = 4  # deeper models draw each block as one box


def pipeline(ctx: Explorer, lit: set[str] = frozenset()) -> None:
    """The model's parts in forward order, with their parameter counts; ``lit`` parts filled."""
    groups: list = []
    for part in parts(ctx.model):
        block = block_label(int(part.key.split(".")[1])) if part.key.startswith("blocks.") else None
        label = part.label.removeprefix(block + " ") if block else ("embedding" if part.key == "embed" else part.label)
        if not groups or groups[-1][0] != block or block is None:
            groups.append((block, []))
        groups[-1][1].append((label, part.key in lit, part.count, part.note))
    if ctx.cfg.n_layers > COMPACT_BLOCKS:  # one box per block
        groups = [
            (None, [(group, any(b[1] for b in boxes), sum(b[2] for b in boxes), "")]) if group else (group, boxes)
            for group, boxes in groups
        ]
    pipeline_strip(groups, "<b>tokens →</b>", "<b>→ softmax</b>")


def zoom_range(n: int, limit: int, chosen: tuple[int, int] | None) -> tuple[int, int]:
    """The rows (columns) ``first:past`` that a zoom slider's value ``chosen`` shows of ``n``: all
    where there are no more than ``limit`` (no slider then) or none is chosen; at least one."""
    if n <= limit or chosen is None:
        return 0, n
    low = min(max(int(chosen[0]), 0), n - 1)
    return low, min(max(int(chosen[1]), low + 1), n)


def zoom_span(n: int, limit: int, label: str, key: str | None) -> tuple[int, int]:
    """A zoom slider (under ``key``) over ``n`` rows (columns) where there are more than ``limit``:
    what it shows (``zoom_range``)."""
    if n <= limit or key is None:
        return 0, n
    chosen = st.slider(
        f"Zoom: {label} shown",
        0,
        n,
        (0, n),
        key=key,
        help=f"Narrow to at most {limit} to see every exact value; wider ranges show block means.",
    )
    return zoom_range(n, limit, chosen)


def mean_label(labels: list[str], start: int, stop: int) -> str:
    """The label of a block mean over ``labels[start:stop]``: numbered columns as their range
    ("72–73"), other labels (tokens) as the first one and an ellipsis."""
    first, last = labels[start], labels[stop - 1]
    if stop - start == 1:
        return first
    return f"{first}–{last}" if first.isdigit() and last.isdigit() else first + "…"


def window(
    values: np.ndarray, rows: list[str], cols: list[str], r0: int, r1: int, c0: int, c1: int
) -> tuple[np.ndarray, list[str], list[str], bool]:
    """The rows ``r0:r1`` and columns ``c0:c1`` of ``values`` as a heatmap draws them: exact up to
    MAX_ROWS × MAX_COLS, else block means (labelled by ``mean_label``). Returns them, their row and
    column labels, and whether they are exact."""
    shown, shown_rows, shown_cols = values[r0:r1, c0:c1], rows[r0:r1], cols[c0:c1]
    if shown.shape[0] <= MAX_ROWS and shown.shape[1] <= MAX_COLS:
        return shown, shown_rows, shown_cols, True
    shown, row_starts, col_starts = downsample(shown, MAX_ROWS, MAX_COLS)
    shown_rows = [mean_label(shown_rows, i, j) for i, j in zip(row_starts, [*row_starts[1:], len(shown_rows)])]
    shown_cols = [mean_label(shown_cols, i, j) for i, j in zip(col_starts, [*col_starts[1:], len(shown_cols)])]
    return shown, shown_rows, shown_cols, False


def heatmap(
    values: np.ndarray,
    rows: list[str],
    cols: list[str] | None,
    title: str,
    name: str,
    *,
    row_title: str = "position",
    col_title: str = "",
    sequential: bool = False,
    zoom_key: str | None = None,
    height: int | None = None,
    marks: list[tuple[int, int]] = (),
    width: int = 900,
    trace: Trace | None = None,
    zmax: float | None = None,
    on_click: Callable[[int, int], None] | None = None,
) -> None:
    """``heatmap_figure`` for an array of any size, in a column about ``width`` pixels wide.
    Values are written into the cells only where they fit (every exact value is on hover);
    large arrays are drawn as block means, and ``zoom_key`` adds sliders that narrow the rows
    and columns down to exact values. ``trace``: the trace the values come from; the figure is
    then kept with it (by name, labels and zoom), not built again on each rerun. ``zmax``: a
    colour scale shared with another chart. ``on_click(row, column)``: called (before the rerun)
    when a cell is clicked, where its exact values are drawn and there are at most CLICKABLE."""
    cols = cols if cols is not None else [str(i) for i in range(np.shape(values)[1])]
    # each slider says which chart it zooms: a view can have several of the same shape
    r0, r1 = zoom_span(values.shape[0], MAX_ROWS, f"{title}, {row_title} rows", zoom_key and zoom_key + ":rows")
    c0, c1 = zoom_span(values.shape[1], MAX_COLS, f"{title}, {col_title or 'column'} columns", zoom_key and zoom_key + ":cols")

    def build() -> go.Figure:
        shown, shown_rows, shown_cols, exact = window(values, rows, cols, r0, r1, c0, c1)
        size, text = f"{r1 - r0}×{c1 - c0}", None
        if not exact:
            size += f"  · <i>block means ({size} → {shown.shape[0]}×{shown.shape[1]}); zoom for exact values</i>"
        elif len(shown_rows) <= TEXT_ROWS:
            largest = abs_max(shown)
            text = [[cell_text(v, largest) for v in row] for row in shown]
            text = text if fits_text(text, len(shown_cols), width) else None
        clicks = click_layer(shown, shown_rows, shown_cols, r0, c0, row_title, col_title) if clickable and exact else None
        fig = heatmap_figure(
            shown,
            shown_rows,
            shown_cols,
            title,
            name,
            size=size,
            row_title=row_title,
            col_title=col_title,
            colour="sequential" if sequential else "diverging",
            text=text,
            gaps=exact,
            height=height,
            marks=[(r - r0, c - c0) for r, c in marks],
            image=not exact,
            zmax=zmax,
            clicks=clicks,
        )
        if clicks is not None:  # the markers would widen the axes (padding for their size): the map fills the plot
            fig.update_xaxes(range=[-0.5, shown.shape[1] - 0.5])
            fig.update_yaxes(range=[shown.shape[0] - 0.5, -0.5])
        return fig

    clickable = on_click is not None and zoom_key is not None and (r1 - r0) * (c1 - c0) <= CLICKABLE
    key = (
        "heatmap",
        name,
        title,
        tuple(rows),
        tuple(cols),
        r0,
        r1,
        c0,
        c1,
        row_title,
        col_title,
        sequential,
        height,
        tuple(marks),
        width,
        zmax,
        clickable,
    )
    fig = build() if trace is None else derived(trace, key, build)
    chart_key = None if zoom_key is None else zoom_key + ":chart"
    if clickable:
        show(
            fig,
            width="stretch",
            key=chart_key,
            on_select=lambda: clicked(chart_key, on_click, c1 - c0, r0, c0),
            selection_mode="points",
        )
    else:
        show(fig, width="stretch", key=chart_key)


CLICKABLE = 4096  # the most cells a heatmap makes clickable: one invisible marker each


def click_layer(
    values: np.ndarray, rows: list[str], cols: list[str], r0: int, c0: int, row_title: str, col_title: str
) -> ClickLayer:
    """One invisible marker per cell of a heatmap drawn at (r0, c0) of its tensor, row by row (the
    second trace), carrying the cell's row, column (in the tensor) and value for the hover: plotly
    reports clicks on markers, not on heatmaps."""
    rr, cc = np.mgrid[0 : values.shape[0], 0 : values.shape[1]]
    data = np.stack([rr.ravel() + r0, cc.ravel() + c0, values.ravel()], axis=1)
    return ClickLayer(
        [cols[c] for c in cc.ravel()],
        [rows[r] for r in rr.ravel()],
        f"{row_title} %{{y}}<br>{col_title} %{{x}}<br>value %{{customdata[2]:.6g}}<br>click: its arithmetic<extra></extra>",
        data,
        symbol="square",
        size=int(np.clip(800 / values.shape[1], 4, 14)),
    )  # no wider than a cell: a click finds its own


def clicked(chart_key: str, on_click: Callable[[int, int], None], n_cols: int, r0: int, c0: int) -> None:
    """A heatmap's cell clicked (on_select, before the rerun): ``on_click`` with its row and column
    in the tensor, from the marker's index (click_layer lays them row by row over the shown window,
    which starts at (r0, c0) and is ``n_cols`` wide)."""
    points = [p for p in st.session_state[chart_key].selection.points if p.get("curve_number") == 1]
    if points:
        row, col = divmod(int(points[0]["point_index"]), n_cols)
        on_click(r0 + row, c0 + col)


BAR_TEXT = 48  # the most bars that get their value written above them


def value_room(values: np.ndarray) -> list[float]:
    """An axis range for bars with their values written outside their ends: a fifth of the span
    beyond the longest bar on each side that has bars (on the low side, any negative one)."""
    low, high = min(0.0, float(np.min(values))), max(0.0, float(np.max(values)))
    pad = 0.2 * ((high - low) or 1.0)
    return [low - pad if low < 0 else 0.0, high + pad if high > 0 else 0.0]


def bar_chart(
    x: list[str],
    y: np.ndarray,
    title: str,
    y_title: str,
    x_title: str = "token",
    height: int = 300,
    text: list[str] | None = None,
) -> go.Figure:
    if len(x) > BAR_TEXT:
        text = None  # one label per bar would overlap; each value is on hover
    y = np.asarray(y, dtype=np.float64)
    fig = go.Figure(go.Bar(x=x, y=y, text=text, textposition="outside", cliponaxis=False))
    fig.update_layout(
        title=dict(text=title, font=dict(size=13), x=0),
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        xaxis=dict(title=x_title, type="category"),
        # room above (and below) the bars for the values written at their ends, which plotly
        # would otherwise drop where they do not fit
        yaxis=dict(title=y_title, range=value_room(y) if text is not None and len(y) else None),
    )
    return fig


def linked_tokens(loaded: LoadedModel, ids: str, prompt: str) -> list[int] | None:
    """The token ids a link gave (comma-separated: a generation's own tokens), if they are this
    model's and decode to ``prompt``; else None (the prompt is then encoded)."""
    try:
        tokens = [int(i) for i in ids.split(",")] if ids else []
    except ValueError:
        return None
    if not tokens or not all(0 <= t < loaded.cfg.vocab_size for t in tokens):
        return None
    return tokens if loaded.tokenizer.decode(tokens) == prompt else None


def positions_heatmap(ctx: Explorer, trace: Trace, name: str, title: str, zoom_key: str) -> None:
    """A traced position × d_model tensor (``name``) as a heatmap, a row per token of the prompt."""
    heatmap(array(trace[name]), ctx.labels, None, title, name, col_title="d_model", zoom_key=zoom_key, trace=trace)


@fragment
def lazy_tabs(parts: dict[str, Callable[[], None]], key: str) -> None:
    """A view's parts as lazy tabs, in a fragment: the open one alone is drawn (a view reopened
    draws one part's charts, not all of them), and choosing another reruns only this."""
    tabs = st.tabs(list(parts), key=key, on_change="rerun")
    for tab, draw in zip(tabs, parts.values()):
        if tab.open:
            with tab:
                draw()
