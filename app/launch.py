"""The server process of `glassbox app`: Streamlit's own command line (`python -m app.launch run
app/main.py …` takes the options `streamlit run` takes), run once the libraries and the engine are
imported. Streamlit imports a page's modules only when the first visitor's script runs, so without
this the first visitor waits on torch, pandas and plotly (about 1.5 s on 2 cores); with it the
server answers its health check that much later and the first page that much sooner."""

import sys

from streamlit.web.cli import main

import glassbox.app  # pandas and plotly, as every session's first import would (app/__init__.py)
import glassbox.model.engine  # torch and the engine
import glassbox.model.io.checkpoint
import glassbox.model.worked_example.steps  # noqa: F401  the worked example's steps

if __name__ == "__main__":
    sys.exit(main())
