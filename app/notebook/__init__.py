"""The app's in-page components in a notebook (``gb.widgets``): the same scripts
(app/components/*.js) fed the same payloads the app sends them, in one HTML fragment that runs by
itself, offline (no server, no kernel round trip, nothing fetched): JupyterLab and VS Code show it
as a cell's output, and ``.save(path)`` writes it as a standalone page (for a paper or a course).

    trace.show("attention", block=1)        # the explorer's attention head view
    trace.show("grid", "blocks.0.hook_resid_post")   # any tensor as the explorer draws it
    model.show_playground("Lily had a")     # the sampling controls, and a generation as a tree
    gb.show_worked_example()                # the article's worked example, step by step
    gb.widgets.attention_patterns(tokens, attention)  # circuitsvis's call, same arguments

What needs the kernel (a new generation, another prompt) is a new call from Python: the widget
holds what it was given and answers every click in the page from that."""

from glassbox.app.notebook.widgets import (
    Widget,
    attention,
    attention_patterns,
    grid,
    playground,
    show_worked_example,
)

__all__ = ["Widget", "attention", "attention_patterns", "grid", "playground", "show_worked_example"]
