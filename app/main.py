"""Glassbox: the app's entry point (`glassbox app`, or `streamlit run app/main.py`). One small
file per page under screens/; the explorer's views under explore/; shared widgets and charts
under components/; the models and the trace cache every session shares in resources.py; the
state kept in the URL in state.py.

The folder is not called pages/: next to the entry, that name puts Streamlit in its legacy
multipage mode until st.navigation first runs, and a first visit straight to a page would run
it without this file (and without its crash guard)."""

import streamlit as st

from glassbox.app.components.errors import crash_guard
from glassbox.app.components.timing import timed


def site() -> None:
    """Every session's script run: the page chosen, under the crash guard."""
    st.set_page_config(page_title="Glassbox", layout="wide")
    # No traceback, exception type or message in the browser, even for an error outside crash_guard
    # (.streamlit/config.toml says the same, but only applies when Streamlit starts in the checkout).
    st.set_option("client.showErrorDetails", "none")
    from glassbox.model.course import LESSONS  # after set_page_config

    pages = st.navigation(
        {
            "Glassbox": [
                st.Page("screens/welcome.py", title="Welcome", icon=":material/home:", default=True),
                st.Page("screens/worked_example.py", title="Worked example", icon=":material/school:", url_path="worked-example"),
                st.Page("screens/playground.py", title="Playground", icon=":material/chat:", url_path="playground"),
                st.Page("screens/train_live.py", title="Train it live", icon=":material/model_training:", url_path="train"),
                st.Page("screens/explore.py", title="Explore a prompt", icon=":material/search:", url_path="explore"),
            ],
            "Lab": [st.Page("lab/index.py", title="All experiments", icon=":material/science:", url_path="lab")]
            + [
                st.Page(f"lab/{name}.py", title=title, icon=":material/experiment:", url_path=f"lab-{name}")
                for name, title in (
                    ("induction", "Induction heads"),
                    ("grokking", "Grokking"),
                    ("superposition", "Superposition"),
                    ("sae", "Sparse autoencoders"),
                )
            ],
            "Course": [st.Page("course/index.py", title="All lessons", icon=":material/list:", url_path="course")]
            + [
                st.Page(lesson.page, title=f"{number}. {lesson.title}", icon=":material/menu_book:", url_path=lesson.url_path)
                for number, lesson in enumerate(LESSONS, 1)
            ],
        }
    )
    with timed("page"), crash_guard():
        pages.run()


if __name__ == "__main__":  # Streamlit runs this file as each session's script, named "__main__"
    site()
else:
    # `streamlit run app/main.py` (and `glassbox app`) find this st.App and serve it (Starlette, as
    # Streamlit's own server): this file is then first imported as the server's module, so torch,
    # pandas, plotly and the engine are imported, and the worked example traced, before the server
    # answers, not in the first visitor's run (about 1.4 s and 0.3 s on 2 cores).
    # Its routes: Streamlit's, and the data the page fetches itself (app/served.py).
    import glassbox.app.launch  # noqa: F401
    from glassbox.app import served
    from glassbox.app.components.worked_example import warm

    warm()
    app = st.App(__file__, routes=served.routes())
