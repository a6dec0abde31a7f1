"""Glassbox: the app's entry point (`glassbox app`, or `streamlit run app/main.py`). One small
file per page under pages/; the explorer's views under explore/; shared widgets and charts
under components/; the models and the trace cache every session shares in resources.py; the
state kept in the URL in state.py."""

import streamlit as st

st.set_page_config(page_title="Glassbox", layout="wide")
st.navigation([
    st.Page("pages/worked_example.py", title="Worked example", icon=":material/school:", url_path="worked-example",
            default=True),
    st.Page("pages/playground.py", title="Playground", icon=":material/chat:", url_path="playground"),
    st.Page("pages/train_live.py", title="Train it live", icon=":material/model_training:", url_path="train"),
    st.Page("pages/explore.py", title="Explore a prompt", icon=":material/search:", url_path="explore"),
]).run()
