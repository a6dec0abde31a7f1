"""Glassbox, imported: ``import glassbox as gb``.

Installed from the repository's folders: this one (model/api/) is the ``glassbox`` package,
model/ is ``glassbox.model`` (the engine and everything without a UI), app/ is ``glassbox.app``
(the Streamlit app), assets/ is ``glassbox.assets`` (the shipped models)."""
