"""Lessons 7 (the MLP), 8 (LayerNorm) and 9 (the residual stream), on the bundled story model.

References and tolerances:
- ``hand_forward`` below: the story model's pass written out in float64 from its state dict (numpy-
  style torch: LayerNorm as mean/var, attention as softmax(q·kᵀ/√d)·v with the causal mask, GELU's
  tanh form written out, tied unembedding), checked against the model's own logits (1e-4, float32).
- The MLP lesson: each firing neuron's activation against the hand forward's (1e-5); the
  prediction with a neuron removed against the hand forward with that neuron's activation set to 0
  (1e-5); what it reads against numpy's LayerNorm of W_E times W_in's column (1e-5); what it writes
  against a numpy matmul of the centred W_out row, γ and W_Eᵀ (1e-9).
- The LayerNorm lesson: the steps against torch.nn.functional.layer_norm and rms_norm (1e-12), the
  Jacobian from autograd against central finite differences (1e-8) and the closed form
  (1/s)(I − 11ᵀ/d − y·yᵀ/d) (1e-12); J·1 and J·(x − mean) against 0 (1e-12); with eps, the gradient's
  dot with the centred x against eps/(var + eps)/s · g·(x − mean) (1e-9 relative); γ and β against
  the state dict, exactly.
- The residual lesson: the write norms against the hand forward's writes (1e-5 relative); the
  shares' sum against the model's own logit (1e-5 in float32, 1e-10 with the model cast to float64);
  each writer's share against the hand forward's write through the final norm and W_Eᵀ (1e-4); the
  logit lens against the final norm and unembedding applied by hand to each point (1e-5).
- Exercises, seeds 0, 1, 2: each answer recomputed from its data (the hand forward for the model's,
  math/numpy for the rest), answered right and wrong.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassbox.model.course import layernorm, mlp, residual
from glassbox.model.io.checkpoint import load
from tests.helpers import shown, start

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def loaded():
    return load("default")


@pytest.fixture(scope="module")
def weights(loaded):
    return {k: v.detach().double() for k, v in loaded.model.state_dict().items()}


def norm(x, w, b, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt((centred**2).mean(-1, keepdim=True) + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def hand_forward(sd, cfg, tokens, zero=None) -> dict:
    """The pass by hand, in float64: every write, the stream after each block, the MLP activations,
    the logits. ``zero`` = (block, neuron): that neuron's activation set to 0 at every position."""
    T = len(tokens)
    x = sd["embed.W_E"][tokens] + sd["pos_embed.W_pos"][:T]
    out = {"writes": [x], "points": [x], "post": []}
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for b in range(cfg.n_layers):
        p = f"blocks.{b}."
        h = norm(x, sd[p + "ln1.w"], sd[p + "ln1.b"])
        q, k, v = (torch.einsum("td,hde->hte", h, sd[p + f"attn.W_{n}"]) + sd[p + f"attn.b_{n}"][:, None] for n in "QKV")
        scores = (q @ k.transpose(1, 2) / math.sqrt(cfg.d_head)).masked_fill(mask, -math.inf)
        z = scores.softmax(-1) @ v
        attn = torch.einsum("hte,hed->td", z, sd[p + "attn.W_O"]) + sd[p + "attn.b_O"]
        x = x + attn
        post = gelu_tanh(norm(x, sd[p + "ln2.w"], sd[p + "ln2.b"]) @ sd[p + "mlp.W_in"] + sd[p + "mlp.b_in"])
        if zero is not None and zero[0] == b:
            post = post.clone()
            post[:, zero[1]] = 0
        write = post @ sd[p + "mlp.W_out"] + sd[p + "mlp.b_out"]
        x = x + write
        out["writes"] += [attn, write]
        out["points"].append(x)
        out["post"].append(post)
    out["logits"] = norm(x, sd["ln_final.w"], sd["ln_final.b"]) @ sd["embed.W_E"].T
    return out


def test_the_hand_forward_is_the_model(loaded, weights):
    tokens = loaded.encode(mlp.PROMPT)
    with torch.no_grad():
        logits = loaded.model(torch.tensor([tokens])).logits[0].double()
    assert torch.allclose(hand_forward(weights, loaded.cfg, tokens)["logits"], logits, atol=1e-4)


# --- the MLP ---------------------------------------------------------------------------------------


def test_the_firing_neurons_and_their_removal_by_hand(loaded, weights):
    tokens = loaded.encode(mlp.PROMPT)
    hand = hand_forward(weights, loaded.cfg, tokens)
    rows = mlp.firing(loaded, tokens)
    assert len(rows) == mlp.TOP_NEURONS * loaded.cfg.n_layers
    for b in range(loaded.cfg.n_layers):
        mine = [r for r in rows if r["block"] == b]
        expected = np.argsort(-hand["post"][b][-1].numpy(), kind="stable")[: mlp.TOP_NEURONS]
        assert [r["neuron"] for r in mine] == expected.tolist()
        for r in mine:
            assert r["post"] == pytest.approx(float(hand["post"][b][-1, r["neuron"]]), abs=1e-5)
    for r in rows[:: mlp.TOP_NEURONS]:  # each block's strongest
        gone = mlp.removed(loaded, tokens, r["block"], r["neuron"])
        after = hand_forward(weights, loaded.cfg, tokens, zero=(r["block"], r["neuron"]))["logits"][-1].softmax(-1)
        assert np.allclose(gone["after"], after.numpy(), atol=1e-5)
        assert gone["p_after"] == pytest.approx(float(after[gone["top"]]), abs=1e-5)


def test_what_a_neuron_reads_and_writes_by_numpy(loaded, weights):
    w = {k: v.numpy() for k, v in weights.items()}
    block, neuron = 2, int(mlp.firing(loaded, loaded.encode(mlp.PROMPT))[8]["neuron"])
    p = f"blocks.{block}."
    E = w["embed.W_E"]
    centred = E - E.mean(1, keepdims=True)
    normed = centred / np.sqrt((centred**2).mean(1, keepdims=True) + 1e-5) * w[p + "ln2.w"] + w[p + "ln2.b"]
    pre = normed @ w[p + "mlp.W_in"][:, neuron] + w[p + "mlp.b_in"][neuron]
    reads = mlp.reads(loaded, block, neuron)
    assert [r["token"] for r in reads] == np.argsort(-pre, kind="stable")[: mlp.TOP_TOKENS].tolist()
    assert [r["pre"] for r in reads] == pytest.approx(np.sort(pre)[::-1][: mlp.TOP_TOKENS], abs=1e-5)
    row = w[p + "mlp.W_out"][neuron]
    direction = ((row - row.mean()) * w["ln_final.w"]) @ E.T
    assert np.allclose(mlp.write_direction(loaded, block, neuron), direction, atol=1e-9)
    written = mlp.writes(loaded, block, neuron)
    assert [x["token"] for x in written["promotes"]] == np.argsort(-direction, kind="stable")[: mlp.TOP_TOKENS].tolist()
    assert written["suppresses"][0]["token"] == int(np.argmin(direction))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_mlp_exercises_recomputed(loaded, weights, seed):
    which, count, gelu = mlp.exercises(seed, loaded)
    d = which.data
    tokens = loaded.encode(d["prompt"])
    hand = hand_forward(weights, loaded.cfg, tokens)
    assert d["top"] == int(hand["logits"][-1].argmax())
    after = [
        float(hand_forward(weights, loaded.cfg, tokens, zero=(d["block"], n))["logits"][-1].softmax(-1)[d["top"]])
        for n in d["neurons"]
    ]
    assert after == pytest.approx(d["p_after"], abs=1e-5)
    right = f"neuron {d['neurons'][int(np.argmin(after))]}"
    assert which.answer == right and which.check(right).right
    assert not which.check(next(c for c in which.choices if c != right)).right

    D, Fw = count.data["d_model"], count.data["d_ff"]
    by_hand = D * Fw + Fw + Fw * D + D  # W_in, b_in, W_out, b_out
    assert count.answer == by_hand and count.check(f"{by_hand:,}").right and not count.check(by_hand - Fw).right

    x = gelu.data["x"]
    value = x * statistics.NormalDist().cdf(x)
    assert gelu.check(f"{value:.3f}").right and not gelu.check(f"{value + 0.01:.3f}").right


# --- LayerNorm -------------------------------------------------------------------------------------


def test_the_steps_against_torch_layer_norm_and_rms_norm():
    rng = np.random.default_rng(0)
    for d in (2, 3, 16):
        x = rng.normal(size=d) * 3 + 1
        t = torch.tensor(x)
        assert np.allclose(layernorm.centre_and_scale(x, 1e-5)["out"], F.layer_norm(t, (d,), eps=1e-5).numpy(), atol=1e-12)
        assert np.allclose(layernorm.rms_norm(x, 1e-6)["out"], F.rms_norm(t, (d,), eps=1e-6).numpy(), atol=1e-12)
        steps = layernorm.centre_and_scale(x)
        assert steps["centred"].sum() == pytest.approx(0, abs=1e-12)  # in the plane ⟂ 1
        assert np.linalg.norm(steps["out"]) == pytest.approx(math.sqrt(d), abs=1e-12)  # on the sphere of radius √d


def test_the_jacobian_against_finite_differences_and_its_closed_form():
    x = np.array([2.0, 0.5, -1.0, 0.3])
    d, h = len(x), 1e-6
    J = layernorm.jacobian(x)
    out = lambda v: layernorm.centre_and_scale(v)["out"]  # noqa: E731
    fd = np.stack([(out(x + h * e) - out(x - h * e)) / (2 * h) for e in np.eye(d)], axis=1)
    assert np.allclose(J, fd, atol=1e-8)
    steps = layernorm.centre_and_scale(x)
    y = steps["out"]
    closed = (np.eye(d) - np.ones((d, d)) / d - np.outer(y, y) / d) / steps["std"]
    assert np.allclose(J, closed, atol=1e-12)
    g = np.array([1.0, -2.0, 0.5, 0.7])
    seen = layernorm.gradient_through(x, g)
    assert np.allclose(seen["grad"], closed.T @ g, atol=1e-12)
    assert max(abs(seen["dot_ones"]), abs(seen["dot_centred"]), seen["J_ones"], seen["J_centred"]) < 1e-12
    assert seen["scale_ones"] > 1  # the dot products are small, the vectors are not


def test_with_eps_the_gradient_keeps_eps_share_along_the_centred_input(loaded, weights):
    seen = layernorm.on_the_model(loaded, layernorm.PROMPT, 0)
    hand = hand_forward(weights, loaded.cfg, loaded.encode(layernorm.PROMPT))
    x = hand["points"][0][-1].numpy()
    assert np.allclose(seen["x"], x, atol=1e-6)
    centred = x - x.mean()
    var, eps = (centred**2).mean(), loaded.cfg.norm_eps
    expected = eps / (var + eps) / math.sqrt(var + eps) * (seen["upstream"] @ centred)
    assert seen["dot_centred"] == pytest.approx(expected, rel=1e-6)
    assert abs(seen["dot_ones"]) < 1e-12 * seen["scale_ones"] + 1e-15
    assert seen["eps_share"] == pytest.approx(eps / (var + eps), rel=1e-6)
    assert np.abs(seen["upstream"]).max() > 0  # the loss's gradient reached the norm


def test_gamma_and_beta_are_the_state_dicts(loaded):
    rows = layernorm.gammas_betas(loaded)
    state = loaded.model.state_dict()
    assert [r["norm"] for r in rows] == [f"blocks.{b}.{n}" for b in range(4) for n in ("ln1", "ln2")] + ["ln_final"]
    for r in rows:
        assert r["gamma"] == state[r["norm"] + ".w"].double().tolist()
        assert r["beta"] == state[r["norm"] + ".b"].double().tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_layernorm_exercises_recomputed(seed):
    std, output, rms = layernorm.exercises(seed)
    x = np.array(std.data["x"], dtype=float)
    assert std.check(f"{np.std(x):.3f}").right and not std.check(f"{np.std(x, ddof=1) + 0.01:.3f}").right
    value = float(F.layer_norm(torch.tensor(x), (4,), eps=0.0)[output.data["entry"]])
    assert output.check(f"{value:.3f}").right and not output.check(f"{value + 0.01:.3f}").right
    z = np.array(rms.data["z"], dtype=float)
    value = z[rms.data["entry"]] / np.sqrt(np.mean(z**2))
    assert rms.check(f"{value:.3f}").right and not rms.check(f"{value + 0.01:.3f}").right


# --- the residual stream ---------------------------------------------------------------------------


def hand_shares(sd, cfg, tokens, token) -> list[float]:
    """Each writer's direct share of ``token``'s logit at the last position, from the hand forward:
    its write centred, over the final norm's scale there, times γ and W_E's row; then β's."""
    hand = hand_forward(sd, cfg, tokens)
    last = hand["points"][-1][-1]
    scale = torch.sqrt(((last - last.mean()) ** 2).mean() + 1e-5)
    u = sd["embed.W_E"][token]
    shares = [float(((w[-1] - w[-1].mean()) / scale * sd["ln_final.w"]) @ u) for w in hand["writes"]]
    return shares + [float(sd["ln_final.b"] @ u)]


def test_the_writes_sum_to_the_stream_and_match_the_hand_forward(loaded, weights):
    tokens = loaded.encode(residual.PROMPT)
    seen = residual.writes(loaded, tokens)
    hand = hand_forward(weights, loaded.cfg, tokens)
    assert seen["norms"] == pytest.approx([float(w[-1].norm()) for w in hand["writes"]], rel=1e-5)
    assert seen["sum_vs_stream"] < 1e-4


def test_the_shares_sum_to_the_logit(loaded, weights):
    tokens = loaded.encode(residual.PROMPT)
    top = residual.top_token(loaded, tokens)
    seen = residual.attribution(loaded, tokens, top)
    hand = hand_forward(weights, loaded.cfg, tokens)
    assert seen["logit"] == pytest.approx(float(hand["logits"][-1, top]), abs=1e-4)
    assert abs(seen["sum"] - seen["logit"]) < 1e-5
    assert seen["writer_values"] == pytest.approx(hand_shares(weights, loaded.cfg, tokens, top), abs=1e-4)
    wide = dataclasses.replace(loaded, model=copy.deepcopy(loaded.model).in_precision(torch.float64))
    exact = residual.attribution(wide, tokens, top)
    assert abs(exact["sum"] - exact["logit"]) < 1e-10


def test_the_logit_lens_by_hand(loaded, weights):
    tokens = loaded.encode(residual.PROMPT)
    seen = residual.lens(loaded, tokens)
    hand = hand_forward(weights, loaded.cfg, tokens)
    assert len(seen["labels"]) == loaded.cfg.n_layers + 1
    for point, ids, probs, p_top in zip(hand["points"], seen["top_ids"], seen["top_probs"], seen["p_top"]):
        p = (norm(point[-1], weights["ln_final.w"], weights["ln_final.b"]) @ weights["embed.W_E"].T).softmax(-1)
        assert probs == pytest.approx(p[ids].tolist(), abs=1e-5)
        assert probs[0] == pytest.approx(float(p.max()), abs=1e-5)
        assert p_top == pytest.approx(float(p[seen["top"]]), abs=1e-5)
    assert seen["top_ids"][-1][0] == seen["top"]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_residual_exercises_recomputed(loaded, weights, seed):
    total, largest, width = residual.exercises(seed, loaded)
    assert total.check(f"{sum(total.data['values']):.3f}").right
    assert not total.check(f"{sum(total.data['values']) + 0.01:.3f}").right
    d = largest.data
    tokens = loaded.encode(d["prompt"])
    assert d["top"] == int(hand_forward(weights, loaded.cfg, tokens)["logits"][-1].argmax())
    everyone = dict(
        zip(residual.attribution(loaded, tokens, d["top"])["writers"], hand_shares(weights, loaded.cfg, tokens, d["top"]))
    )
    right = max(d["writers"], key=lambda name: everyone[name])
    assert largest.answer == right and largest.check(right).right
    assert not largest.check(next(c for c in largest.choices if c != right)).right
    assert width.check(str(width.data["d_model"])).right and not width.check(str(width.data["d_model"] * 2)).right


# --- the pages --------------------------------------------------------------------------------------


def test_the_mlp_page(loaded):
    at = start("course/mlp.py")
    assert not at.exception and not at.get("error")
    text = " ".join(m.value for m in at.markdown)
    assert "predicts **␣happy**" in text
    row = mlp.firing(loaded, loaded.encode(mlp.PROMPT))[0]
    assert at.dataframe[0].value.iloc[0]["activation"] == pytest.approx(row["post"], abs=1e-4)
    strongest = mlp.firing(loaded, loaded.encode(mlp.PROMPT))[-mlp.TOP_NEURONS]  # block 4's first
    at.selectbox(key="mlp_neuron").set_value(len(at.dataframe[0].value) - mlp.TOP_NEURONS).run()
    assert not at.exception
    assert any(
        f"block 4 (blocks.3), neuron {strongest['neuron']}: activation {strongest['post']:.4f}" in text
        for text in (shown(c.value) for c in at.caption)
    )


def test_the_layernorm_page_follows_its_sliders():
    at = start("course/layernorm.py")
    assert not at.exception and not at.get("error")
    at.slider(key="ln3_0").set_value(1.0).run()
    at.slider(key="ln3_2").set_value(1.0).run()
    at.slider(key="ln3_1").set_value(-2.0).run()
    steps = at.dataframe[0].value
    assert steps.iloc[1]["step"] == "mean = 0" and steps.iloc[4]["vector"] == "(0.707, -1.414, 0.707)"
    at.slider(key="ln3_1").set_value(1.0).run()  # x along 1: no output, said so
    assert "along 1" in at.warning[0].value


def test_the_residual_page(loaded):
    at = start("course/residual.py")
    assert not at.exception and not at.get("error")
    metrics = {m.label: m.value for m in at.get("metric")}
    assert float(metrics["difference"]) < 1e-5
    tokens = loaded.encode(residual.PROMPT)
    logit = residual.attribution(loaded, tokens, residual.top_token(loaded, tokens))["logit"]
    assert float(metrics["sum of the shares"]) == pytest.approx(logit, abs=1e-5)
    at.selectbox(key="residual_token").set_value(2).run()  # the third most likely token's logit
    metrics = {m.label: m.value for m in at.get("metric")}
    third = residual.lens(loaded, tokens)["top_ids"][-1][2]
    assert float(metrics["sum of the shares"]) == pytest.approx(residual.attribution(loaded, tokens, third)["logit"], abs=1e-5)
    assert float(metrics["difference"]) < 1e-5
