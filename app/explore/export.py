"""Export: the whole trace as .npz, any one tensor as CSV, and the link that reopens this page."""

from collections.abc import Callable
from urllib.parse import urlencode

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer, offered
from glassbox.app.resources import admission, trace_budget
from glassbox.model.analysis import npz_bytes, to_csv
from glassbox.model.engine import GRAD, to_numpy
from glassbox.model.engine.names import axes as names_axes
from glassbox.model.serving import Needs, trace_bytes, trace_names
from glassbox.model.serving.sizing import size_text

CSV_BYTES_PER_VALUE = 60  # a row of indices and 17 digits, and its float64 copy on the way


def admitted(cost: int, make: Callable[[], bytes | str]) -> bytes | str:
    """A file built for download, admitted against the trace budget like a model pass: the npz
    holds a copy of every tensor and then its compressed bytes; a CSV's text is ~30 × its tensor."""
    with admission().admit(cost):
        return make()


def lit(ctx: Explorer) -> set[str]:
    return set()


def render(ctx: Explorer) -> None:
    names = offered("explore_tensor", trace_names(ctx.model), "blocks.0.attn.hook_pattern")
    name = st.selectbox(
        "Tensor",
        names,
        key="explore_tensor",
        persist_state="session",
        help="Every captured activation, and with grad: its gradient or a weight's gradient",
    )
    full, _ = ctx.plan(Needs(()))
    needs = Needs((name.removeprefix(GRAD),), backward=name.startswith(GRAD))
    trace = ctx.trace(needs)
    if name not in trace.names():
        st.info(f"{plain(name)} has no value for this prompt and loss (off the loss's path, or a one-token prompt).")
        return
    tensor = trace[name]
    axes = names_axes(name)
    st.markdown(f"`{name}`: shape {list(tensor.shape)} ({' × '.join(axes)}), {tensor.dtype}, {size_text(tensor.nbytes)}")
    slug = ctx.model_key.strip("/").replace("/", "_")
    a, b = st.columns(2)
    what = "every tensor and gradient" if full is None else "the tensors the open view captured (a full trace is too large here)"
    # built later, on the click, in a thread with no page: a file over the whole budget is refused here
    files = [
        (
            a,
            f"Download {name} as CSV",
            CSV_BYTES_PER_VALUE * tensor.numel(),
            lambda: to_csv(to_numpy(tensor), axes),
            f"{name}.csv",
            "text/csv",
            "One row per cell: its index on every axis, then the value",
        ),
        (
            b,
            "Download the trace as .npz",
            2 * trace_bytes(trace),
            lambda: npz_bytes(trace),
            f"glassbox-{slug}.npz",
            "application/octet-stream",
            f"numpy.load gives {what} under the engine's names, plus 'tokens'",
        ),
    ]
    for column, label, cost, make, file_name, mime, help in files:
        if cost > trace_budget():
            column.caption(
                plain(
                    f"{label}: building it takes {size_text(cost)}, over this server's "
                    f"{size_text(trace_budget())} for traces (GLASSBOX_TRACE_BUDGET_GB)."
                )
            )
            continue
        column.download_button(
            label, lambda cost=cost, make=make: admitted(cost, make), file_name=file_name, mime=mime, help=help, on_click="ignore"
        )
    st.subheader("This page's link")
    st.caption("Model, prompt, target, view and the chosen block, head and positions are kept in the URL:")
    st.code("/explore?" + urlencode(st.query_params.to_dict()), language=None, wrap_lines=True)  # all of it on screen
