"""The model card above the playground's prompt: config.json's ``about.card`` as a list, the loss
curve from training.json beside the weights, and the sample continuations. A model folder is
anyone's, so every piece of it is shown as text (``plain``) and the curve is read by the guarded reader."""

from __future__ import annotations

from numbers import Real
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.labels import plain
from glassbox.model.engine import GlassboxError
from glassbox.model.io.guard import SIDE_FILE_BYTES, read_json

CURVES = ("step", "train_loss", "val_step", "val_loss")  # training.json's lists (model/tools/train_default.py)


@st.cache_data(max_entries=8, show_spinner=False)
def training_curve(path: str) -> dict | None:
    """A model's loss curve (training.json beside its weights), read once; None when it has
    none. A model folder is anyone's: the file is read by the guarded reader (a FIFO or
    /dev/zero in its place is refused, not waited on) and its content checked."""
    curve_path = Path(path) / "training.json"
    if not curve_path.exists():
        return None
    curve = read_json(curve_path, SIDE_FILE_BYTES)
    if not all(isinstance(curve.get(key), list) and all(isinstance(v, Real) for v in curve[key]) for key in CURVES):
        raise GlassboxError(f"{curve_path} is not a loss curve (lists of numbers {', '.join(CURVES)})")
    return curve


def value_text(value: object) -> str:
    """A model card's value as written: whole numbers with thousands separators, anything else
    (a card is the model folder's, not ours: "1.2M", a list) as its text."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def card_lines(card: dict, within: str = "") -> list[tuple[str, str]]:
    """A model card as (name, value) lines: nested sections flattened ("training · steps"),
    whole numbers with thousands separators."""
    lines = []
    for name, value in card.items():
        name = f"{within} · {name.replace('_', ' ')}" if within else name.replace("_", " ").capitalize()
        if isinstance(value, dict):
            lines += card_lines(value, name)
        else:
            lines.append((name, value_text(value)))
    return lines


def card_title(card: dict) -> str:
    """The model card's expander label, from what the card has (every value shown as text)."""
    parts = []
    if "parameters" in card:
        parts.append(f"{plain(value_text(card['parameters']))} parameters")
    if "validation_loss" in card:
        parts.append(f"validation loss {plain(value_text(card['validation_loss']))}")
    return "Model card" + (": " + ", ".join(parts) if parts else "")


def model_card(loaded) -> None:
    """config.json's about.card, the loss curve and the sample continuations: the model folder's
    text, every piece of it shown as text (``plain``)."""
    card = loaded.about.get("card")
    if not card:
        return
    card = card if isinstance(card, dict) else {"card": card}
    with st.expander(card_title(card)):
        st.markdown("\n".join(f"- **{plain(name)}**: {plain(value)}" for name, value in card_lines(card)))
        try:
            curve = training_curve(str(loaded.path))
        except GlassboxError as exc:
            st.warning(plain(f"No loss curve: {exc}"))
            curve = None
        if curve:
            fig = go.Figure(
                [
                    go.Scatter(x=curve["step"], y=curve["train_loss"], name="training batch", mode="lines", line=dict(width=1)),
                    go.Scatter(x=curve["val_step"], y=curve["val_loss"], name="validation", mode="lines+markers"),
                ]
            )
            fig.update_layout(
                title="Loss while training",
                xaxis_title="step",
                height=300,
                margin=dict(t=40, b=10),
                yaxis=log_axis(curve["train_loss"] + curve["val_loss"], "cross-entropy (nats, log scale)"),
            )
            show(fig)
        samples = loaded.about.get("samples")
        for sample in samples if isinstance(samples, list) else []:
            if isinstance(sample, dict):
                st.markdown(
                    f"- **{plain(sample.get('prompt', ''))}** {plain(sample.get('completion', ''))} "
                    f"({plain(sample.get('settings', ''))})"
                )
