"""Lessons 2 (why divide by √d_k) and 3 (positions): each figure against a computation written
here, in numpy or with the standard library, or by finite differences."""

import copy
import json
import math

import numpy as np
import pytest
import torch

from glassbox.model.course import dot_product_scale as scale
from glassbox.model.course import positional_signals as positions
from glassbox.model.engine import editing
from glassbox.model.io.checkpoint import load
from tests.helpers import page_functions, start


@pytest.fixture(scope="module")
def loaded():
    return load("default")


def test_the_variance_of_a_dot_product_is_d_k():
    """Reference: numpy's own sampling (another generator and seed). With x_i = q_i·k_i: E[x_i²] = 1
    and E[x_i⁴] = 9, so S = q·k has E[S⁴] = 9d + 3d(d − 1) and Var(S²) = 2d² + 6d: the sample
    variance of n pairs has a standard error of sqrt((2d² + 6d)/n). Allowed: 5 of them."""
    n = 20_000
    ours = scale.sampled_variances(pairs=n)
    rng = np.random.default_rng(7)
    for row in ours:
        d = row["d_k"]
        error = math.sqrt((2 * d * d + 6 * d) / n)
        dots = (rng.standard_normal((n, d)) * rng.standard_normal((n, d))).sum(1)
        for value in (row["variance"], dots.var()):
            assert abs(value - d) < 5 * error, (d, value)
        assert abs(row["scaled_variance"] - 1) < 5 * error / d


def test_the_course_softmaxes_exactly():
    """Reference: math.exp written here (1e-12); the course's printed first row is off by more
    than its rounding (0.0002 printed, 0.00037 exact)."""

    def by_hand(scores):
        e = [math.exp(s) for s in scores]
        return [x / sum(e) for x in e]

    assert scale.softmax([8.0, 0.1, -0.3]) == pytest.approx(by_hand([8.0, 0.1, -0.3]), abs=1e-12)
    assert scale.softmax([1.0, 0.0125, -0.0375]) == pytest.approx(by_hand([1.0, 0.0125, -0.0375]), abs=1e-12)
    exact = scale.softmax([8.0, 0.1, -0.3])
    assert exact == pytest.approx([0.99938, 0.00037, 0.00025], abs=5e-6)
    assert abs(exact[1] - scale.COURSE_SOFTMAX["raw"][1]) > 0.00005


def test_the_jacobian_norm_vanishes_as_the_scores_grow():
    """Reference: torch.autograd.functional.jacobian of softmax (float64, 1e-12), its Frobenius norm by numpy."""
    base = torch.tensor([1.0, 0.0125, -0.0375], dtype=torch.float64)
    for c in (0.25, 1.0, 8.0, 16.0):
        jac = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, 0), c * base).numpy()
        assert scale.jacobian_norm(base.tolist(), c) == pytest.approx(np.linalg.norm(jac), abs=1e-12)
    assert scale.jacobian_norm(base.tolist(), 8.0) < 0.01 * scale.jacobian_norm(base.tolist(), 1.0)


def test_each_heads_entropy_and_score_gradient_with_and_without_the_scale(loaded):
    """References: numpy's entropy of the captured pattern (1e-6, float32); the gradient of the loss for one
    score by central finite differences on a float64 copy of the model, an edit adding ±ε at that
    score (relative 1e-5)."""
    tokens = loaded.encode(scale.PROMPT)
    rows = scale.head_table(loaded.model, tokens)
    from glassbox.model.engine import run_trace, variant

    for kind, model in (("scaled", loaded.model), ("unscaled", variant(loaded.model, attn_scale=1.0))):
        pattern = run_trace(model, tokens, names=["blocks.2.attn.hook_pattern"])["blocks.2.attn.hook_pattern"]
        p = pattern[1].double().numpy()
        entropy = float(np.mean([-sum(x * math.log(x) for x in row if x > 0) for row in p]))
        assert rows[2 * 4 + 1][f"entropy_{kind}"] == pytest.approx(entropy, abs=1e-6)  # float32 patterns
    assert all(r["entropy_unscaled"] < r["entropy_scaled"] for r in rows[:4])

    double = copy.deepcopy(loaded.model).double()
    unscaled = variant(double, attn_scale=1.0)
    ids = torch.tensor([tokens])
    targets = torch.full_like(ids, -1)
    targets[0, :-1] = ids[0, 1:]
    block, head, query, key, eps = 1, 2, 4, 1, 1e-5

    def loss(shift: float) -> float:
        def edit(s):
            out = s.clone()
            out[0, head, query, key] += shift
            return out

        with torch.no_grad(), editing({f"blocks.{block}.attn.hook_scores": edit}):
            return unscaled(ids, targets).loss.item()

    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    trace = run_trace(unscaled, tokens, names=[f"blocks.{block}.attn.hook_scores"], backward=True)
    analytic = trace[f"grad:blocks.{block}.attn.hook_scores"][head, query, key].item()
    assert analytic == pytest.approx(numeric, rel=1e-5)


def test_the_shipped_training_curves_are_reproducible():
    """Reference: the first 3 steps re-run here with the file's settings (1e-3), and an untrained
    model's loss, about ln(vocabulary) (within 0.5)."""
    shipped = json.loads(scale.TRAINING_FILE.read_text())
    settings = dict(shipped["settings"], steps=3)
    again = scale.training_curves(**settings)
    for kind in ("scaled", "unscaled"):
        assert again[kind][:2] == pytest.approx(shipped[kind][:2], abs=1e-3)
        assert abs(shipped[kind][0] - math.log(load("default").cfg.vocab_size)) < 0.5
    assert shipped["command"] == "glassbox course sqrt-dk --remeasure"


def numpy_table(positions_count: int, d: int) -> np.ndarray:
    table = np.zeros((positions_count, d))
    for pos in range(positions_count):
        for i in range(d // 2):
            table[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            table[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    return table


def test_the_sinusoidal_table_and_its_rotations():
    """References: the table from math.sin/cos here (1e-12); M_k built here from 2 × 2 rotations,
    and the shift it makes, below 1e-12 for every k up to 16."""
    assert np.abs(positions.sinusoidal_table(32, 16).numpy() - numpy_table(32, 16)).max() < 1e-12
    d = 16
    for k in (1, 5, 16):
        m = np.zeros((d, d))
        for i in range(d // 2):
            a = k / 10000 ** (2 * i / d)
            m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]]
        table = numpy_table(32 + k, d)
        assert np.abs(table[k:] - table[:32] @ m.T).max() < 1e-12
        assert positions.largest_shift_error(k, d) < 1e-12


def test_without_positions_and_mask_a_shuffle_only_permutes_the_patterns(loaded):
    """Reference: two passes captured here, the test permuting the first pattern itself: below 1e-5
    (float32) without positions and mask; with the mask, far above."""
    tokens = loaded.encode(positions.PROMPT)
    order = [3, 0, 5, 1, 4, 2]
    assert positions.permutation_error(loaded.model, tokens, order, False, False) < 1e-5
    assert positions.permutation_error(loaded.model, tokens, order, False, True) > 1e-3
    assert positions.permutation_error(loaded.model, tokens, order, True, False) > 1e-3
    from glassbox.model.engine import variant

    encoder = variant(loaded.model, causal=False)

    def pattern(ids):
        with torch.no_grad(), editing({"hook_pos_embed": torch.zeros_like}, keep=["blocks.0.attn.hook_pattern"]) as s:
            encoder(torch.tensor([ids]))
        return s.tensors["blocks.0.attn.hook_pattern"][0].numpy()

    a, b = pattern(tokens), pattern([tokens[i] for i in order])
    assert np.abs(b - a[:, order][:, :, order]).max() < 1e-5


def test_rope_scores_depend_on_the_offset_alone():
    """Reference: the rotation written here in numpy (float64, 1e-12): q·R(−mθ)ᵀ·R(−nθ)·k."""

    def rotate(v, angle):
        c, s = math.cos(angle), math.sin(angle)
        return np.array([v[0] * c - v[1] * s, v[1] * c + v[0] * s])

    pairs = [(0, 3), (5, 8), (20, 23), (3, 0)]
    ours = positions.rope_scores((1.0, 0.5), (0.8, -0.3), 0.3, pairs)
    for (m, n), score in zip(pairs, ours):
        assert score == pytest.approx(rotate((1.0, 0.5), m * 0.3) @ rotate((0.8, -0.3), n * 0.3), abs=1e-12)
    assert ours[0] == pytest.approx(ours[1], abs=1e-12) == pytest.approx(ours[2], abs=1e-12)


def test_both_pages_follow_their_sliders(tmp_path):
    """References: the Jacobian norm by numpy along the multiplier's curve (the page computes it at the
    learner's c itself: tests/test_course_in_page.py); the shift error the page computes at k = 9
    (its JavaScript run by Node) below 1e-12 at every width."""
    at = start("course/dot_product_scale.py")
    sent = next(d for d in (json.loads(c.proto.json) for c in at.get("bidi_component")) if d.get("kind") == "saturation")
    assert sent["scores"] == [1.0, 0.0125, -0.0375] and sent["slider"]["value"] == 1.0
    for c, norm in zip(sent["scales"], sent["curve"]):
        p = np.exp(c * np.array([1.0, 0.0125, -0.0375]))
        p /= p.sum()
        assert norm == pytest.approx(np.linalg.norm(np.diag(p) - np.outer(p, p)), abs=1e-12)
    at.switch_page("course/positional_signals.py").run()
    assert not at.exception
    sent = next(d for d in (json.loads(c.proto.json) for c in at.get("bidi_component")) if d.get("kind") == "positions")
    assert sent["k"]["min"] == 1 and sent["k"]["max"] == 16 and sent["positions"] == 32
    errors = page_functions(
        tmp_path, "largestShiftError", [[sent["base"], 9, d, 32] for d in sent["d"]["options"]], "lesson_controls.js"
    )
    assert max(errors) < 1e-12
