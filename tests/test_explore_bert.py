"""The explorer on a tiny BERT (an encoder: attention both ways, post-norm blocks, token types, an
embedding norm, the MLM head), run in-process by AppTest: every view opens with no exception, no
error and no empty chart, and says what an encoder does, not what a decoder does.

The model is tests/test_encoder_families.py's (transformers' BertForMaskedLM, 3 blocks, norms and
biases perturbed, saved beside a tokenizer and opened from its directory). References: the model's
own parameters (the Overview's count, exact), run_trace on the same prompt (the logit lens's last
row against hook_probs, the LayerNorm view's input statistics, float32: 1e-6) and autograd's
gradients in that trace (each weight gradient rebuilt as a product of traced tensors, in float64
from float32 operands: 1e-6 relative to the gradient's largest entry).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

from glassbox.app.explore import VIEWS  # noqa: E402
from glassbox.model.analysis import backward_steps, logit_lens, norm_prefixes, norm_summary, parts  # noqa: E402
from glassbox.model.analysis.backward import recomputed_weight_gradient  # noqa: E402
from glassbox.model.analysis.dla import NO_DLA  # noqa: E402
from glassbox.model.engine import GRAD, run_trace  # noqa: E402
from tests.helpers import attention_sent, backward_sent, charts, page_functions, shown, start, step_in_page  # noqa: E402
from tests.test_families import SIZES, saved_family  # noqa: E402

PROMPT = "The cat sat on the mat; the dog sat on the log."
DECODER_WORDS = ("causal mask", "next token", "predicting the next", "after the last token", "says comes next")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """(directory, Glassbox's loaded model): a 3-block BertForMaskedLM with every switch on."""
    config = transformers.BertConfig(
        **{k: v for k, v in SIZES.items() if k not in ("bos_token_id", "eos_token_id")},
        num_attention_heads=4,
        intermediate_size=48,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
    )
    path = tmp_path_factory.mktemp("bert")
    _, _, loaded = saved_family(config, True, path, transformers.AutoModelForMaskedLM)
    return path, loaded


def said(at) -> str:
    """Everything the page writes, as a reader sees it: text, captions, alerts and chart titles."""
    texts = [shown(e.value) for kind in ("markdown", "caption", "info", "warning") for e in getattr(at, kind)]
    texts += [c["layout"].get("title", {}).get("text", "") for c in charts(at)]
    texts += [c["layout"].get("xaxis", {}).get("title", {}).get("text", "") or "" for c in charts(at)]
    return "\n".join(texts)


def test_every_view_opens_on_a_tiny_bert_and_speaks_of_an_encoder(bert):
    path, loaded = bert
    for view in VIEWS:
        at = start("screens/explore.py", model=str(path), prompt=PROMPT, view=view)
        assert not at.exception and not at.error, view
        assert all(chart["data"] for chart in charts(at)), view  # no empty chart
        text = said(at)
        assert not [w for w in DECODER_WORDS if w in text], (view, [w for w in DECODER_WORDS if w in text])
        if view == "Overview":  # every parameter counted: token types, the embedding norm, the MLM head, b_U
            total = sum(p.numel() for p in loaded.model.parameters())
            assert f"**{total:,} parameters.**" in at.markdown[0].value
            assert "an encoder" in text and "(post-norm)" in text and "the MLM head" in text
        elif view == "Attention":  # the page titles the masked scores "After the mask: none here, every key is seen"
            assert attention_sent(at)["causal"] is False
        elif view == "Ask why":  # no direct logit attribution through post-norm blocks and a GELU head
            assert NO_DLA in [shown(i.value) for i in at.info]
        elif view == "Export":
            assert len(at.get("download_button")) == 2
        elif view == "Compare":
            assert "prompt B" in at.info[-1].value
        elif view in ("Features", "Attribution graph"):
            assert "this model is an encoder" in at.info[-1].value
        elif view == "Backward":  # its first step's maps, drawn in the page
            assert backward_sent(at)["step"]["grids"], view
        else:
            assert charts(at), view


def test_parts_count_every_parameter_of_a_bert(bert):
    """Reference: the model's own parameters, name by name."""
    _, loaded = bert
    listed = sorted(name for part in parts(loaded.model) for name, _ in part.params)
    assert listed == sorted(name for name, _ in loaded.model.named_parameters())


def test_attention_lines_reach_the_keys_after_the_query(bert, tmp_path):
    """An encoder's query sees every key: the "where it looks" lines of query 0 go to later keys
    (reference: run_trace's pattern, whose row 0 has weight after position 0; the page's own
    choice of keys, attention_head.js's lineKeys, run by Node on what the page is sent)."""
    path, loaded = bert
    at = start("screens/explore.py", model=str(path), prompt=PROMPT, view="Attention", pos="0")
    assert not at.exception and not at.error
    sent = attention_sent(at)
    pattern = run_trace(loaded.model, loaded.encode(PROMPT))["blocks.0.attn.hook_pattern"][0, 0]
    assert pattern[1:].sum() > 0.5
    block = {"labels": sent["labels"], "causal": sent["causal"]}
    (keys,) = page_functions(tmp_path, "lineKeys", [(block, sent["heads"][0]["pattern"].ravel().tolist(), 0)])
    assert max(keys) > 0


def test_layernorm_view_reads_each_post_norm_from_its_sum(bert):
    """ln1 and ln2 of a post-norm block read hook_attn_sum and hook_mlp_sum; the MLM head's norm is
    listed too. Reference: run_trace's recorded mean and scale against the input's own statistics
    (1e-6); every norm opens in the view."""
    path, loaded = bert
    cfg = loaded.cfg
    prefixes = dict(norm_prefixes(cfg))
    assert prefixes["blocks.1.ln1."] == "blocks.1.hook_attn_sum" and prefixes["blocks.1.ln2."] == "blocks.1.hook_mlp_sum"
    assert prefixes["mlm.ln."] == "mlm.hook_act"
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    for prefix, source in prefixes.items():
        summary = norm_summary(trace, cfg, prefix, source)
        assert np.allclose(summary["input mean"], summary["mean (recorded)"], atol=1e-6), prefix
        scale = np.sqrt(summary["input std"] ** 2 + cfg.norm_eps)
        assert np.allclose(scale, summary["scale (recorded)"], rtol=1e-6), prefix
    at = start("screens/explore.py", model=str(path), prompt=PROMPT, view="LayerNorm")
    for prefix in prefixes:
        at.selectbox(key="explore_norm").set_value(prefix).run()
        assert not at.exception and not at.error, prefix
        assert prefixes[prefix] in said(at), prefix  # the input drawn is the norm's own


def test_the_logit_lens_applies_the_mlm_head(bert):
    """Reference: run_trace's hook_probs, which the lens's last row (the last block's output put through
    the MLM transform and the unembedding) must equal (1e-6)."""
    _, loaded = bert
    trace = run_trace(loaded.model, loaded.encode(PROMPT))
    lens = logit_lens(loaded.model, trace, token_id=5, k=3)
    assert np.allclose(lens.chosen[-1], trace["hook_probs"][:, 5].numpy(), atol=1e-6)
    assert np.allclose(lens.top_probs[-1], trace["hook_probs"].topk(3, dim=-1).values.numpy(), atol=1e-6)


def test_backward_steps_of_a_post_norm_encoder(bert):
    """Every step names gradients the trace has and every weight appears in one; each weight gradient
    rebuilt as Σ inputᵀ · ∂L/∂output (attention reading resid_pre, the MLP resid_mid, the head the MLM
    transform's output) is autograd's (reference: run_trace(backward=True), 1e-6 relative). Then every
    step opens in the view."""
    path, loaded = bert
    model = loaded.model
    trace = run_trace(model, loaded.encode(PROMPT), backward=True)
    steps = backward_steps(model)
    keys = {p.key for p in parts(model)}
    for step in steps:
        assert step.part in keys, step.key
        assert all(name in trace.grads for name in step.names), step.key
        assert all(GRAD + weight in trace.grads for weight in step.weights), step.key
    assert {w for s in steps for w in s.weights} == {n for n, _ in model.named_parameters()}
    rebuilt = 0
    for name, _ in model.named_parameters():
        mine = recomputed_weight_gradient(trace, model.cfg, name)
        if mine is not None:
            autograd = trace[GRAD + name].to(torch.float64)
            assert torch.allclose(mine, autograd, atol=1e-6 * float(autograd.abs().max())), name
            rebuilt += 1
    assert rebuilt == 6 * model.cfg.n_layers + 1  # W_Q, W_K, W_V, W_O, W_in, W_out per block, and mlm.W_dense
    at = start("screens/explore.py", model=str(path), prompt=PROMPT, view="Backward")
    for step in steps:
        step_in_page(at, step.key)
        assert not at.exception and not at.error, step.key
        # where one cell's arithmetic is written out, it arrives at autograd's value (6 digits shown)
        for line in [c.value for c in at.caption if c.value.startswith("Autograd's value")]:
            autograd, written = (float(x) for x in re.findall(r": (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)", line))
            assert written == pytest.approx(autograd, rel=1e-4, abs=1e-9), (step.key, line)
