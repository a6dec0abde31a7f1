"""A model's parts as a row of boxes in forward order, the ones a page is about lit."""

from __future__ import annotations

import streamlit as st

PipelineBox = tuple[str, bool, int, str]  # label, lit, parameter count (0: none shown), hover note


def pipeline_strip(
    groups: list[tuple[str | None, list[PipelineBox]]], lead: str, tail: str = "", colour: str = "#1f6feb"
) -> None:
    """A model's parts as a row of boxes in forward order, those of a block grouped in a dashed
    frame (group label not None), the lit ones filled with ``colour``."""
    st.html(pipeline_html(groups, lead, tail, colour))


def pipeline_html(groups: list[tuple[str | None, list[PipelineBox]]], lead: str, tail: str = "", colour: str = "#1f6feb") -> str:
    """``pipeline_strip``'s markup (the worked example's player draws it in the page)."""

    def box(label: str, lit: bool, count: int, note: str) -> str:
        style = f"background:{colour};color:white;font-weight:600" if lit else ""
        number = f"<span class='gb-count'>{count:,}</span>" if count else ""
        return f"<span class='gb-box' style='{style}' title='{note}'>{label}{number}</span>"

    html = []
    for group, boxes in groups:
        inner = "".join(box(*b) for b in boxes)
        html.append(
            inner if group is None else f"<span class='gb-block'><span class='gb-block-label'>{group}</span>{inner}</span>"
        )
    return (
        "<style>.gb-pipe{display:flex;flex-wrap:wrap;gap:4px;align-items:center;font-size:12px;font-family:sans-serif}"
        ".gb-box{border:1px solid #bbb;border-radius:4px;padding:2px 6px;background:#f6f8fa}"
        ".gb-count{font-size:10px;opacity:.75;margin-left:4px}"
        ".gb-block{display:inline-flex;gap:3px;align-items:center;border:1px dashed #999;border-radius:6px;padding:2px 4px}"
        ".gb-block-label{color:#666;font-size:11px;margin-right:2px}</style>"
        f"<div class='gb-pipe'>{lead}{''.join(html)}{tail}</div>"
    )
