"""Glassbox: the app's entry point (`streamlit run app/main.py`). One small file per page
under views/; what pages share (the cached model, the grid drawing) is in shared.py."""

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `model` and `app` live side by side

st.set_page_config(page_title="Glassbox", layout="wide")
st.navigation([
    st.Page("views/worked_example.py", title="Worked example", icon=":material/school:", url_path="worked-example",
            default=True),
    st.Page("views/playground.py", title="Playground", icon=":material/chat:", url_path="playground"),
    st.Page("views/train_live.py", title="Train it live", icon=":material/model_training:", url_path="train"),
    st.Page("views/explore.py", title="Explore a prompt", icon=":material/search:", url_path="explore"),
]).run()
