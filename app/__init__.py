"""The Streamlit app: screens/ (one file per page), explore/ (the explorer's views),
components/ (shared widgets and charts), resources.py (what every session shares),
state.py (page state kept in the URL). Started by `glassbox app`."""

# The libraries the pages draw with, initialised here, once per server: every session's first
# `import app…` waits on this package's import lock until they are complete. Left to the pages,
# several sessions arriving at a fresh server imported pandas at the same moment (plotly imports
# it lazily) and some saw it partially initialised (AttributeError: ... 'pandas' has no attribute
# 'Series'). tests/test_browser.py opens several sessions at once on a fresh server.
import pandas  # noqa: F401
import plotly.express  # imports plotly.graph_objects and plotly.io too
import plotly.graph_objects  # noqa: F401
