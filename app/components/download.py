"""The one Download button for what the hub holds and this server has not fetched yet: a model
(the model picker) or a sparse autoencoder's folder (the Features view, the playground's feature
steering). Its size, when known before asking the hub (a curated entry), is checked first; the
bar moves as the bytes come, and Cancel, or leaving the page, stops the download."""

from __future__ import annotations

import threading

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.model.engine import GlassboxError
from glassbox.model.io.hub import MODEL_FILES, RETRIES, HubFiles, HubId, check_room, download, timeout


def offer_download(
    what: str, hub: HubId, key: str, files: HubFiles = MODEL_FILES, size: int | None = None, fetched: str = ""
) -> bool:
    """A Download button for ``what`` (``files`` of ``hub``), with a progress bar and a Cancel
    button while it runs; True once it is downloaded (the page goes on to open it). The bar is
    drawn as the bytes come: once the page is closed or reruns (Cancel is a rerun), Streamlit
    raises its StopException or RerunException from that draw, which stops the download
    (huggingface_hub then deletes the partial file). A known ``size`` this server has no room
    for is said at once, with no button."""
    if size is not None:
        try:
            check_room(what, size, size)
        except GlassboxError as exc:
            st.error(plain(exc))
            return False
    if st.session_state.get(key + "_cancel"):  # the click that stopped the download reran the page
        _wait_for_the_stopped_download(key)
        st.info("Download cancelled: nothing of it was kept.")
    shown = f" ({_bytes(size)})" if size else ""
    st.info(
        f"{plain(what)} is not downloaded yet{plain(shown)}. {plain(fetched or 'Only its files are fetched')}, "
        "into the Hugging Face cache on this server."
    )
    if not st.button("Download", key=key + "_download", type="primary"):
        return False
    bar = st.progress(0.0, text="Starting the download…")
    st.button("Cancel", key=key + "_cancel")  # a click reruns the page, and the next draw of the bar stops the download

    def progress(done: int, total: int) -> None:
        bar.progress(min(done / total, 1.0) if total else 1.0, text=f"{_bytes(done, total)} of {_bytes(total)}")

    ended = st.session_state[key + "_ended"] = threading.Event()
    try:
        download(hub, progress, files)
    except GlassboxError as exc:
        st.error(plain(exc))
        return False
    finally:
        ended.set()  # after huggingface_hub has removed its partial file
    bar.progress(1.0, text="Downloaded")
    return True


def _wait_for_the_stopped_download(key: str) -> None:
    """Streamlit's fast reruns start the Cancel click's run at once, while the stopped run is
    still in the download until it next draws its bar (as the next bytes come): wait for it to
    end, so that "nothing was kept" is true when it is said."""
    ended = st.session_state.get(key + "_ended")
    if ended is not None and not ended.is_set():
        with st.spinner("Stopping the download…"):
            ended.wait(timeout() * (RETRIES + 1))


def _bytes(n: int, unit_of: int | None = None) -> str:
    """``n`` bytes in the unit that suits ``unit_of`` (itself by default): GB from 0.1 GB, then MB, then kB."""
    scale = n if unit_of is None else unit_of
    if scale >= 1e8:
        return f"{n / 1e9:.2f} GB"
    if scale >= 1e6:
        return f"{n / 1e6:,.1f} MB"
    return f"{n / 1e3:,.1f} kB"
