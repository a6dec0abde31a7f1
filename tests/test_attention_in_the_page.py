"""The explorer's Attention view draws a block's heads in the page (app/components/attention_head.js)
from what the server sends (attention_head.block_payload). Reference: the engine, with the page's
own script run by Node (tests/helpers.page_functions) on what it is sent:
- its masked scores are the trace's hook_scores_masked exactly (the model's own mask: causal, a
  3-position window on a local layer, none for an encoder);
- its dot product, scaled and soft-capped score equal ``attention_pair``'s (float64 on both sides,
  1e-12 relative: the page sums as numpy does, so they are usually identical), which equals the
  trace's own hook_scores (1e-5 relative: the float32 model) for every model here, QK-norm and
  clipping without RoPE included;
- its LaTeX lines equal the server's (``pair_latex``) character for character;
- its number format is Python's ``format(v, ".6g")``;
- for a prompt too long to send them, the scores and pattern it computes from the queries and
  keys alone are the trace's hook_scores (1e-5 of the head's largest |score|: float32 models;
  1e-12 for the float64 worked example) and hook_pattern (1e-5 absolute; 1e-12);
and what is sent decodes to the trace's own numbers."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest

from glassbox.app.components.attention_head import block_payload
from glassbox.app.explore.attention import pair_latex
from glassbox.app.explore.attention_sent import how_notes
from glassbox.model.analysis import attention_pair
from glassbox.model.engine import ModelConfig, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import build_random_model, page_functions

WINDOWED = ModelConfig(
    vocab_size=40,
    n_ctx=16,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=1,
    d_head=6,
    d_ff=24,
    norm="rmsnorm",
    gated_mlp=True,
    positional="rope",
    attn_bias=False,
    mlp_bias=False,
    qk_norm=True,
    attn_scale=0.3,
    attn_softcap=2.0,
    window=3,
    local_layers=[0],
)
ENCODER = ModelConfig(vocab_size=40, n_ctx=16, d_model=16, n_layers=1, n_heads=2, d_ff=24, causal=False)
NORMED = ModelConfig(vocab_size=40, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=24, qk_norm=True)  # no RoPE
CLIPPED = ModelConfig(vocab_size=40, n_ctx=16, d_model=16, n_layers=1, n_heads=2, d_ff=24, qk_norm=True, clip_qkv=0.4)


def models():
    worked = load("worked-example")
    default = load("default")
    yield "worked example (float64)", worked.model, worked.cfg, worked.encode("the cat sat on the")
    yield "default (float32)", default.model, default.cfg, default.encode("Tom had a big hat. Max gave the hat to")
    for name, cfg in (
        ("windowed, soft-capped, shared keys", WINDOWED),
        ("encoder", ENCODER),
        ("QK-norm without RoPE", NORMED),
        ("QK-norm and clipped", CLIPPED),
    ):
        yield name, build_random_model(cfg), cfg, list(range(3, 12))


def sent_floats(payload: dict, text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=f"<f{payload['bytes']}").astype(np.float64)


@pytest.mark.parametrize("name, model, cfg, tokens", list(models()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_pages_head_is_the_engines(name, model, cfg, tokens, tmp_path):
    trace = run_trace(model, tokens)
    T = len(tokens)
    labels = [f"{i}:t{t}" for i, t in enumerate(tokens)]
    calls = {"maskedScores": [], "pair": [], "pairLines": []}
    expected = {"maskedScores": [], "pair": [], "pairLines": []}
    for layer in range(cfg.n_layers):
        payload = block_payload(trace, cfg, layer, labels, [how_notes(cfg, layer, h) for h in range(cfg.n_heads)])
        block = {k: payload[k] for k in ("labels", "d_head", "scale", "softcap", "causal", "window")}
        p = f"blocks.{layer}.attn."
        for h, head in enumerate(payload["heads"]):
            scores = sent_floats(payload, head["scores"])
            assert np.array_equal(scores, trace[p + "hook_scores"][h].double().numpy().ravel())  # sent exactly
            assert np.array_equal(sent_floats(payload, head["pattern"]), trace[p + "hook_pattern"][h].double().numpy().ravel())
            calls["maskedScores"].append([block, {"f64": scores.tolist()}])
            masked = (
                trace[p + "hook_scores_masked"][h] if p + "hook_scores_masked" in trace.names() else trace[p + "hook_scores"][h]
            )  # an encoder's scores are not masked
            expected["maskedScores"].append(masked.double().numpy().ravel())
            page_head = {
                "qs": {"f64": sent_floats(payload, head["q"]).tolist()},
                "ks": {"f64": sent_floats(payload, head["k"]).tolist()},
            }
            for query, key in {(T - 1, 0), (T - 1, T - 1), (2, 1), (1, 3), (T - 1, T - 4)}:
                calls["pair"].append([block, page_head, query, key])
                calls["pairLines"].append([block, page_head, query, key])
                written = attention_pair(trace, cfg, layer, h, query, key)
                # the vectors written are the ones the scores multiply: the engine's own score, recomputed
                assert written.score == pytest.approx(written.recorded, rel=1e-5, abs=1e-6), (name, layer, h, query, key)
                expected["pair"].append(written)
                expected["pairLines"].append(pair_latex(cfg, written, query, key))
    page = {name: page_functions(tmp_path, name, args) for name, args in calls.items()}
    for got, want in zip(page["maskedScores"], expected["maskedScores"]):
        got = np.array([-math.inf if v is None else v for v in got])  # JSON has no −∞: null
        assert np.array_equal(got, want), name
    assert any(np.isinf(m).any() for m in expected["maskedScores"]) == (cfg.causal or cfg.window is not None)
    for got, want in zip(page["pair"], expected["pair"]):
        assert got["dot"] == pytest.approx(float(want.products.sum()), rel=1e-12, abs=1e-300)
        assert got["uncapped"] == pytest.approx(want.uncapped, rel=1e-12, abs=1e-300)
        assert got["score"] == pytest.approx(want.score, rel=1e-12, abs=1e-300)
    assert page["pairLines"] == expected["pairLines"]


def test_the_pages_numbers_are_written_as_python_writes_them(tmp_path):
    values = [
        0.0,
        1.0,
        -1.0,
        0.125,
        1 / 3,
        -2 / 3,
        123456.7,
        1234567.0,
        1e-5,
        -1.5e-5,
        0.0001,
        9.9999995,
        0.00012345678,
        3.08349e7,
        2.5,
        0.5,
        1e21,
        -0.0,
        7.0,
        1.125,
        0.3125,
        1.015625,
        -1.125,
        1.375,
        0.0625,
        2.25,
        1.000244140625,
        1234.5,
    ]  # exact ties: to the even digit
    calls = [[v, p] for v in values for p in (3, 4, 6, 9)]
    got = page_functions(tmp_path, "g", calls)
    assert got == [format(v, f".{p}g") for v, p in calls]


@pytest.mark.parametrize("name, model, cfg, tokens", list(models()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_scores_the_page_computes_from_q_and_k_are_the_engines(name, model, cfg, tokens, tmp_path):
    """Where a prompt is too long to send every head's scores (attention_head.fits_computed), the
    page computes them from the sent q and k (computeHead): against the trace's own."""
    trace = run_trace(model, tokens)
    labels = [f"{i}:t{t}" for i, t in enumerate(tokens)]
    calls, expected = [], []
    for layer in range(cfg.n_layers):
        payload = block_payload(trace, cfg, layer, labels, [how_notes(cfg, layer, h) for h in range(cfg.n_heads)], computed=True)
        assert payload["computed"] and not any("scores" in h or "pattern" in h for h in payload["heads"])
        block = {k: payload[k] for k in ("labels", "d_head", "scale", "softcap", "causal", "window")}
        p = f"blocks.{layer}.attn."
        for h, head in enumerate(payload["heads"]):
            calls.append(
                [
                    block,
                    {
                        "qs": {"f64": sent_floats(payload, head["q"]).tolist()},
                        "ks": {"f64": sent_floats(payload, head["k"]).tolist()},
                    },
                ]
            )
            expected.append(
                (trace[p + "hook_scores"][h].double().numpy().ravel(), trace[p + "hook_pattern"][h].double().numpy().ravel())
            )
    exact = payload["bytes"] == 8  # the float64 worked example: the same arithmetic, rounding apart
    for got, (scores, pattern) in zip(page_functions(tmp_path, "computeHead", calls), expected):
        largest = float(np.abs(scores).max())
        assert np.allclose(got["s"], scores, rtol=0, atol=(1e-12 if exact else 1e-5) * max(largest, 1e-3)), name
        assert np.allclose(got["p"], pattern, rtol=0, atol=1e-12 if exact else 1e-5), name
        assert np.allclose(np.sum(np.reshape(got["p"], (len(tokens), -1)), axis=1), 1.0, atol=1e-12)
        assert got["zmax"] == pytest.approx(largest, rel=1e-12 if exact else 1e-5)  # the colour scale, as abs_max sets it


def test_the_page_draws_the_lines_the_server_draws(tmp_path):
    """Where a query looks, as lines: the page's choice of keys (lineKeys) is the server's
    (attention.lines: a line per key), on long rows nearly even (no key over 1%: the five
    strongest are drawn), peaked, and with ties. Reference: the server's figure, exactly."""
    from types import SimpleNamespace

    from glassbox.app.explore.attention import GAP, line_rows, lines

    T = 200  # an even row: 0.005 a key, none over 1%
    rng = np.random.default_rng(0)
    rows = {
        "even": np.full(T, 1 / T) + rng.normal(0, 1e-4, T),
        "peaked": rng.dirichlet(np.full(T, 0.05)),
        "ties": np.full(T, 1 / T),
    }
    ctx = SimpleNamespace(cfg=SimpleNamespace(causal=False), labels=[f"{i}:t" for i in range(T)])
    calls, expected, rows_written = [], [], []
    for row in rows.values():
        pattern = np.tile(row / row.sum(), (T, 1))
        figure = lines(ctx, pattern, 7)
        expected.append([trace.y[1] for trace in figure.data if trace.mode == "lines"])  # the row each line ends on
        written = [trace for trace in figure.data if trace.mode == "text"][1].text  # "label  weight", or the gap
        rows_written.append([None if t == GAP else int(t.split(":")[0]) for t in written])
        calls.append([{"labels": ctx.labels, "causal": False}, {"f64": pattern.ravel().tolist()}, 7])
    got = page_functions(tmp_path, "lineKeys", calls)
    assert got == [[shown_rows[y] for y in ys] for ys, shown_rows in zip(expected, rows_written)]
    assert len(got[0]) == 5 and got[2] == [0, 1, 2, 3, 4]  # an even row: the five strongest (ties: the first)
    # the positions written beside them: past 40 apart, the query and the keys drawn alone, gaps between
    rows = page_functions(tmp_path, "lineRows", [[keys, 7] for keys in got])
    assert rows == [line_rows(keys, 7) for keys in got] == rows_written
    assert None in rows[1] and rows[2] == list(range(8))  # the peaked row's keys are far apart; ties: 0–4 and 7
