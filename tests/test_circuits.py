"""Circuits (model/analysis/circuits.py). Reference: the engine's own forward pass on a model built
so that the framing is exact: RMSNorm with ε = 1e-30 (1 + ε is 1 in float64) and γ = 1 over embeddings of root mean square 1
(the norm is then the identity), no biases, no position rows (W_pos = 0). Its hook_scores are the
QK circuit's entries for the prompt's token pairs; on a one-token prompt a head attends only to
that token, so its hook_result times W_U is the OV circuit's row (float64, ≤1e-12). Head scores:
recomputed here from run_trace's patterns with plain loops."""

import dataclasses

import numpy as np
import pytest
import torch

from glassbox.model.analysis.circuits import bigram, head_scores, ov_circuit, qk_circuit
from glassbox.model.engine import GlassboxError, ModelConfig, run_trace
from tests.helpers import build_random_model

EXACT = ModelConfig(
    vocab_size=12,
    n_ctx=16,
    d_model=16,
    n_layers=2,
    n_heads=2,
    d_ff=32,
    norm="rmsnorm",
    norm_eps=1e-30,
    attn_bias=False,
    mlp_bias=False,
)


@pytest.fixture(scope="module", params=["multi-head", "grouped-query"])
def exact(request):
    """Also with 4 query heads sharing 2 key/value heads: the circuits must read the right one."""
    model = build_random_model(EXACT if request.param == "multi-head" else dataclasses.replace(EXACT, n_heads=4, n_kv_heads=2))
    with torch.no_grad():
        model.embed.W_E /= model.embed.W_E.pow(2).mean(-1, keepdim=True).sqrt()
        model.pos_embed.W_pos.zero_()
        model.blocks[0].ln1.w.fill_(1.0)
    return model


def test_qk_circuit_is_the_heads_scores_on_embeddings(exact):
    tokens = [3, 7, 1, 7, 10]
    trace = run_trace(exact, tokens, names=["blocks.0.attn.hook_scores"])
    for head in range(exact.cfg.n_heads):
        circuit = qk_circuit(exact, 0, head, tokens, tokens)
        np.testing.assert_allclose(circuit.matrix, trace["blocks.0.attn.hook_scores"][head].numpy(), atol=1e-12)


def test_ov_circuit_is_what_the_head_writes_when_it_reads_one_token(exact):
    inputs = [0, 5, 11]
    head = exact.cfg.n_heads - 1
    circuit = ov_circuit(exact, 0, head, inputs)
    for row, token in enumerate(inputs):
        written = run_trace(exact, [token], names=["blocks.0.attn.hook_result"])["blocks.0.attn.hook_result"][head, 0]
        np.testing.assert_allclose(circuit.matrix[row], (written @ exact.W_U.detach()).numpy(), atol=1e-12)
    assert circuit.matrix.shape == (3, EXACT.vocab_size)


def test_bigram_and_top_pairs(exact):
    table = bigram(exact, [2, 4], [0, 1, 2])
    np.testing.assert_allclose(table.matrix, (exact.embed.W_E[[2, 4]] @ exact.W_U[:, [0, 1, 2]]).detach().numpy())
    pairs = table.top_pairs(3)
    assert [v for _, _, v in pairs] == sorted(table.matrix.ravel(), reverse=True)[:3]
    i, j = np.unravel_index(np.argmax(table.matrix), table.matrix.shape)
    assert pairs[0][:2] == ([2, 4][i], [0, 1, 2][j])


@pytest.mark.parametrize("prefix", [[], [0]])
def test_head_scores_by_hand(prefix):
    """With and without a BOS-like first token, the positions shifted past it."""
    model = build_random_model(ModelConfig(vocab_size=20, n_ctx=32, d_model=16, n_layers=2, n_heads=2, d_ff=32))
    half = [4, 9, 2, 13, 7, 1]
    induction, previous = head_scores(model, half, prefix)
    trace = run_trace(model, prefix + half + half, names=["blocks.*.attn.hook_pattern"])
    n, s = len(half), len(prefix)
    for layer in range(2):
        pattern = trace[f"blocks.{layer}.attn.hook_pattern"].numpy()
        for h in range(2):
            assert induction[layer, h] == pytest.approx(np.mean([pattern[h, t, t - n + 1] for t in range(s + n, s + 2 * n)]))
            assert previous[layer, h] == pytest.approx(np.mean([pattern[h, t, t - 1] for t in range(s + 1, s + 2 * n)]))
    assert induction.max() < 0.5  # a random model has no induction head


def test_bad_heads_and_tokens_say_why(exact):
    with pytest.raises(GlassboxError, match="No head"):
        qk_circuit(exact, 0, 5, [1], [1])
    with pytest.raises(GlassboxError, match="within the vocabulary"):
        bigram(exact, [99])


def induction_model():
    """Two one-head blocks built by hand to be a previous-token head and an induction head.
    The residual stream holds one-hot slots: the token (0–7), the position (8–23) and the
    previous token (24–31). RMSNorm over rows with a fixed number of ones is a fixed scale, and
    the MLPs are zero, so each head does exactly what its weights say:
    - block 0: the query at position t matches the key of position t − 1 (W_Q maps position p,
      W_K position p + 1 to the same feature) and writes that position's token into the
      previous-token slot;
    - block 1: the query of token i matches the key whose previous-token slot is i, so from
      the repeat it attends to the token after the earlier occurrence, and copies that token
      into the token slots, which the tied unembedding reads as its logit."""
    V, T = 8, 16
    cfg = ModelConfig(
        vocab_size=V,
        n_ctx=T,
        d_model=V + T + V,
        n_layers=2,
        n_heads=1,
        d_ff=4,
        norm="rmsnorm",
        norm_eps=1e-30,
        attn_bias=False,
        mlp_bias=False,
    )
    from glassbox.model.engine import Transformer

    model = Transformer(cfg).init_weights(0).double()
    tok, pos, prev = range(0, V), range(V, V + T), range(V + T, 2 * V + T)
    with torch.no_grad():
        for p in model.parameters():
            if not p.ndim or not (p.shape[-1] == cfg.d_model and p.ndim == 1):  # norms' γ stay 1
                p.zero_()
        model.embed.W_E[:, :V] = torch.eye(V)
        model.pos_embed.W_pos[:, V : V + T] = torch.eye(T)
        first, second = model.blocks[0].attn, model.blocks[1].attn
        for p in range(T - 1):
            first.W_Q[0, pos[p + 1], p] = 10.0  # the query of position p + 1 …
            first.W_K[0, pos[p], p] = 1.0  # … matches the key of position p
        for i in range(V):
            first.W_V[0, tok[i], i] = 1.0
            first.W_O[0, i, prev[i]] = 0.25  # the normed one-hot is 4: write exactly 1
            second.W_Q[0, tok[i], i] = 10.0
            second.W_K[0, prev[i], i] = 1.0
            second.W_V[0, tok[i], i] = 1.0
            second.W_O[0, i, tok[i]] = 1.0
    return model


def test_a_model_built_with_an_induction_head_scores_high_and_random_ones_low():
    model = induction_model()
    half = [5, 2, 7, 0, 3, 6, 1, 4]
    induction, previous = head_scores(model, half)
    # 7 of the 8 queries of the repeat put ≈1 on t − n + 1; the first puts ½ there and ½ on position 0, whose
    # previous-token slot holds its own token (position 0 can only attend to itself): 7.5 / 8 = 0.9375
    assert induction[1, 0] == pytest.approx(0.9375, abs=1e-6) and previous[0, 0] > 0.9
    assert induction[0, 0] < 0.05  # the previous-token head is not an induction head
    with torch.no_grad():  # and it predicts the repeat: each next token is the one after the earlier occurrence
        logits = model(torch.tensor([half + half])).logits[0]
    assert logits[len(half) + 1 : -1].argmax(-1).tolist() == half[2:]  # (the first query splits, as above)
    # its OV circuit copies: each token raises its own logit most
    ov = ov_circuit(model, 1, 0, list(range(8)))
    assert (ov.matrix.argmax(1) == np.arange(8)).all()
    for seed in range(3):
        random_model = build_random_model(
            ModelConfig(vocab_size=8, n_ctx=16, d_model=32, n_layers=2, n_heads=2, d_ff=8), seed=seed
        )
        assert head_scores(random_model, half)[0].max() < 0.5
