"""Explore a prompt: its tokens, the next-token distribution and the attention patterns,
all from the engine's trace."""

import plotly.graph_objects as go
import streamlit as st

from app.shared import bar_label, shared_model, url_settings
from model.checkpoint import NAMED_MODELS
from model.errors import GlassboxError
from model.trace import run_trace

url_settings({"model": "default", "prompt": "the cat sat on the"}, choices={"model": list(NAMED_MODELS)},
             prefix="explore_")
st.title("Explore a prompt")
st.caption("Every number below is computed by the model at hand, from its own captured tensors.")

st.selectbox("Model", list(NAMED_MODELS), key="explore_model")
loaded = shared_model(st.session_state.explore_model)
st.info(f"Model: **{loaded.name}**, {loaded.about.get('source', '')}.")
with st.form("prompt_form"):
    prompt = st.text_input("Prompt", key="explore_prompt",
                           help=f"Words this model knows: {', '.join(loaded.tokenizer.pieces)}"
                           if loaded.tokenizer.word_level else "Any text: byte-level BPE")
    st.form_submit_button("Run")

try:
    tokens = loaded.encode(prompt)
    trace = run_trace(loaded.model, tokens, names=["*hook_pattern", "hook_probs"])
except GlassboxError as exc:
    st.error(str(exc))
    st.stop()

pieces = [loaded.tokenizer.pieces[t] for t in tokens]
labels = [f"{i}:{p}" for i, p in enumerate(pieces)]
st.subheader("Tokens")
st.dataframe({"": ["token", "id"], **{f"position {i}": [p, str(t)] for i, (p, t) in enumerate(zip(pieces, tokens))}},
             hide_index=True)

left, right = st.columns(2)
with left:
    st.subheader("Next-token distribution")
    probs = trace["hook_probs"][-1].float().cpu().numpy()
    order = probs.argsort()[::-1][:20]
    fig = go.Figure(go.Bar(x=[loaded.tokenizer.pieces[i] for i in order], y=probs[order].tolist(),
                           text=[bar_label(probs[i]) for i in order], textposition="outside"))
    fig.update_layout(xaxis_title=f"token after “{pieces[-1]}”", yaxis_title="probability (hook_probs)",
                      height=380, margin=dict(t=20))
    st.plotly_chart(fig, width="stretch")
with right:
    st.subheader("Attention pattern")
    n_layers, n_heads = loaded.cfg.n_layers, loaded.cfg.n_heads
    c1, c2 = st.columns(2)
    layer = c1.selectbox("Block", range(n_layers))
    head = c2.selectbox("Head", range(n_heads))
    name = f"blocks.{layer}.attn.hook_pattern"
    pattern = trace[name][head].float().cpu().numpy()
    fig = go.Figure(go.Heatmap(z=pattern, x=labels, y=labels, colorscale="Blues", zmin=0, zmax=1,
                               text=[[f"{v:.3f}" for v in row] for row in pattern], texttemplate="%{text}",
                               colorbar=dict(title="weight")))
    fig.update_layout(xaxis_title="key (attended-to token)", yaxis_title="query token", yaxis_autorange="reversed",
                      height=380, margin=dict(t=20))
    st.plotly_chart(fig, width="stretch")
    st.caption(f"`{name}`, head {head}: each row sums to 1; above the diagonal (the future) is exactly 0.")
