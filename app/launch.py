"""The libraries and the engine, imported once by the server's process before it serves: app/main.py
imports this module when Streamlit loads it as the server's st.App (`streamlit run app/main.py`,
`glassbox app`). Streamlit imports a page's modules only when the first visitor's script runs, so
without this the first visitor waits on torch, pandas and plotly (about 1.4 s on 2 cores).
`python -m glassbox.app.launch run app/main.py …` is Streamlit's own command line (`glassbox app`)."""

import sys

from streamlit.web.cli import main

import glassbox.app  # pandas and plotly, as every session's first import would (app/__init__.py)
import glassbox.model.engine  # torch and the engine
import glassbox.model.io.checkpoint
import glassbox.model.worked_example.steps  # noqa: F401  the worked example's steps

if __name__ == "__main__":
    sys.exit(main())
