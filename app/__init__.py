"""The Streamlit app: screens/ (one file per page), explore/ (the explorer's views),
components/ (shared widgets and charts), resources.py (what every session shares),
state.py (page state kept in the URL). Started by `glassbox app`."""
