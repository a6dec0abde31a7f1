"""The Lab's first page: the four experiments, each with its paper and what its shipped run took here."""

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.model.engine import GlassboxError
from glassbox.model.lab import EXPERIMENTS
from glassbox.model.lab.runs import Run

st.title("The lab")
st.markdown(
    "The field's best-known training phenomena, trained here: each page shows the shipped run at once, or trains "
    "one on the spot, puts the paper's own numbers beside ours, and opens the model at any saved step in the explorer."
)
for exp in EXPERIMENTS:
    with st.container(border=True):
        st.page_link(f"lab/{exp.name}.py", label=exp.title, icon=":material/science:")
        try:
            figures = Run.shipped(exp.name).figures
            threads = figures["threads"]
            took = f"Shipped run: {figures['steps']:,} steps, trained in {figures['seconds']:.0f} s here on {threads} CPU thread{'s' * (threads != 1)}."
        except (GlassboxError, KeyError):
            took = "No shipped run in this install."
        st.caption(plain(f"{exp.paper}. {took}"))
