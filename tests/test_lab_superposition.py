"""The lab's superposition (model/lab/superposition.py, app/lab/superposition.py): WᵀW, the
pentagon's angles, feature dimensionality and the phases recomputed with numpy from the W that
run.json stores; the batched loop against a plain torch loop for one instance at a time; the
closed-form phase rule against a Monte Carlo estimate; the CLI, a tiny deterministic run, the
shipped run's headline, and the page."""

import json
import math

import numpy as np
import pytest
import torch

from glassbox.model.io.assets import asset
from glassbox.model.lab import superposition as lab
from glassbox.model.lab.runs import Run
from tests.helpers import cli, start


@pytest.fixture(scope="module")
def shipped() -> dict:
    return Run.shipped("superposition").figures


def columns(W) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W (m × n) as float64, each feature's length ‖W_i‖ and unit direction Ŵ_i (columns)."""
    W = np.asarray(W, dtype=np.float64)
    lengths = np.linalg.norm(W, axis=0)
    return W, lengths, W / np.maximum(lengths, 1e-6)


def test_wtw_norms_and_interference_recomputed_with_numpy(shipped):
    """The intro run: WᵀW, ‖W_i‖, Σ_{j≠i}(Ŵ_i·W_j)² and the represented count from the stored W
    (numpy, float64). W is stored at 5 decimals: 1e-4 on sums of a few products, 2e-3 on the
    interference of features of length ≥ 0.1 (dividing by the length magnifies the rounding)."""
    intro = shipped["intro"]
    assert len(intro["W"]) == len(intro["sparsity"])
    for k, stored in enumerate(intro["W"]):
        W, lengths, unit = columns(stored)
        assert W.shape == (intro["m"], intro["n"])
        assert np.allclose(W.T @ W, intro["WtW"][k], atol=1e-4)
        assert np.allclose(lengths, intro["norms"][k], atol=1e-4)
        dots = unit.T @ W
        long = lengths >= 0.1  # Ŵ_i of a near-zero column is mostly rounding: compare the others
        shared = (dots**2).sum(1) - np.diag(dots) ** 2
        assert np.allclose(shared[long], np.asarray(intro["interference"][k])[long], atol=2e-3)
        assert intro["represented"][k] == int((lengths >= lab.REPRESENTED).sum())


def test_angles_and_dimensionality_recomputed_with_numpy(shipped):
    """The pentagon's neighbour angles (arctan2 of the represented columns, sorted, cyclic gaps;
    0.01°) and D_i = ‖W_i‖² / Σ_j (Ŵ_i·W_j)² for the pentagon run (5 decimals: 1e-3) and the
    large run (4 decimals: 5e-3 for features of length ≥ 0.3, where rounding moves D_i least),
    and m / ‖W‖_F² (1e-3). The angles of a represented set go once round the circle: 360°."""
    pentagon = shipped["pentagon"]
    for k, stored in enumerate(pentagon["W"]):
        W, lengths, unit = columns(stored)
        on = lengths >= lab.REPRESENTED
        theta = np.sort(np.arctan2(W[1], W[0])[on])
        gaps = np.degrees(np.diff(np.append(theta, theta[0] + 2 * np.pi))) if on.sum() > 1 else np.array([])
        assert np.allclose(gaps, pentagon["angles"][k], atol=0.01)
        assert not len(gaps) or sum(pentagon["angles"][k]) == pytest.approx(360, abs=0.01)
        assert pentagon["represented"][k] == on.sum() and pentagon["fraction"][k] == pytest.approx(on.sum() / 5)
        D = lengths**2 / ((unit.T @ W) ** 2).sum(1)
        assert np.allclose(D, pentagon["dims"][k], atol=1e-3)
    dims = shipped["dimensionality"]
    for k, stored in enumerate(dims["W"]):
        W, lengths, unit = columns(stored)
        assert W.shape == (dims["m"], dims["n"])
        D = lengths**2 / ((unit.T @ W) ** 2).sum(1)
        long = lengths >= 0.3
        assert np.allclose(D[long], np.asarray(dims["D"][k])[long], atol=5e-3)
        assert dims["dims_per_feature"][k] == pytest.approx(dims["m"] / (W**2).sum(), abs=1e-3)
    assert dims["x"] == pytest.approx([1 / (1 - s) for s in dims["sparsity"]], rel=1e-3)


def test_phases_recomputed_and_the_rule_against_monte_carlo(shipped):
    """Each cell's phase from its stored W = (w_1, w_2) (numpy); and the closed-form losses behind
    lab.theory_phase against a Monte Carlo estimate of the three configurations run through the
    toy model itself (numpy, 400k samples: within 4 standard errors)."""
    phase = shipped["phase"]
    grid = len(phase["density"])
    w = np.abs(np.asarray(phase["W"]))
    on = w >= lab.REPRESENTED
    expected = np.where(on[:, 0] & on[:, 1], 2, on[:, 1].astype(int)).reshape(grid, grid)
    assert (expected == np.asarray(phase["phase"])).all()
    assert phase["agreement"] == pytest.approx((expected == np.asarray(phase["theory"])).mean(), abs=1e-4)

    rng = np.random.default_rng(0)
    for importance, density in ((0.3, 1.0), (3.0, 0.5), (1.0, 0.1)):
        x = rng.random((400_000, 2)) * (rng.random((400_000, 2)) < density)
        configs = (
            (np.array([[1.0, 0.0]]), [0, density / 2]),
            (np.array([[0.0, 1.0]]), [density / 2, 0]),
            (np.array([[1.0, -1.0]]), [0, 0]),
        )
        weights = np.array([1.0, importance])
        per_sample = [((x - np.maximum(x @ W.T @ W + b, 0)) ** 2 * weights).sum(1) for W, b in configs]
        p = density
        closed = (importance * (p / 3 - p * p / 4), p / 3 - p * p / 4, (1 + importance) * p * p / 6)
        for sample, value in zip(per_sample, closed, strict=True):
            assert abs(sample.mean() - value) < 4 * sample.std() / math.sqrt(len(sample)) + 1e-9
        assert lab.theory_phase(importance, density) == int(np.argmin([s.mean() for s in per_sample]))


def test_the_batched_loop_is_a_plain_torch_loop():
    """lab.fit trains instances as one tensor; here each instance alone in plain torch (its own W
    and b, its own AdamW, the loss a mean over samples and features), on the same draws: 1e-6."""
    n, m, batch, steps, seed = 5, 2, 64, 6, 11
    importance = torch.tensor([[1.0, 0.9, 0.81, 0.73, 0.66], [1.0] * 5, [2.0, 1, 1, 1, 0.5]])
    density = torch.tensor([[1.0] * 5, [0.2] * 5, [0.05, 0.5, 0.5, 0.9, 0.3]])
    toy = lab.Toy(n, m, importance, density, batch)
    W, b, seen = lab.fit(toy, steps, seed, watch_at={0, 3, steps})

    g = torch.Generator().manual_seed(seed)
    W0 = torch.randn(3, m, n, generator=g) * math.sqrt(2 / (n + m))
    draws = []
    for _ in range(steps):
        u = torch.rand(batch, 3, n, generator=g)  # present where u < p, then u / p is uniform on [0, 1]
        draws.append(torch.where(u < density, u / density, torch.zeros(())))
    for k in range(3):
        Wk = W0[k].clone().requires_grad_()
        bk = torch.zeros(n, requires_grad=True)
        opt = torch.optim.AdamW([Wk, bk], lr=1e-3)
        for step, x in enumerate(draws, 1):
            xk = x[:, k]
            out = torch.relu(xk @ Wk.T @ Wk + bk)
            loss = (importance[k] * (xk - out) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 3:
                assert torch.allclose(seen[3][k], Wk.detach(), atol=1e-6)
        assert torch.allclose(W[k], Wk.detach(), atol=1e-6) and torch.allclose(b[k], bk.detach(), atol=1e-6)
        assert torch.equal(seen[0][k], W0[k])


def test_cli_prints_the_shipped_run(shipped):
    run = cli("lab", "superposition", "--shipped", "--json")
    assert run.returncode == 0, run.stderr
    figures = json.loads(run.stdout)
    assert figures["experiment"] == "superposition" and figures["pentagon"]["angles"] == shipped["pentagon"]["angles"]
    assert {"intro", "pentagon", "dimensionality", "phase"} <= set(figures)
    assert {"what", "paper", "ours", "note"} <= set(figures["comparison"][0])


def test_a_tiny_run_works_and_is_deterministic(tmp_path):
    """`glassbox lab superposition --steps 20 --out DIR --json` and the same run in this process:
    equal figures, but the time; progress after every step of the four runs."""
    run = cli("lab", "superposition", "--steps", "20", "--seed", "3", "--out", str(tmp_path / "a"), "--json")
    assert run.returncode == 0, run.stderr
    first = json.loads(run.stdout)
    progress = []
    second = lab.train(tmp_path / "b", steps=20, seed=3, on_step=lambda done, total: progress.append((done, total)))
    assert json.loads((tmp_path / "b" / "run.json").read_text()) == second
    for figures in (first, second):
        figures.pop("seconds")
    assert first == second
    assert first["steps"] == 20 and not first["live"] and first["checkpoints"] == []
    assert first["pentagon"]["steps"] == lab.watch_steps(20) and len(first["pentagon"]["W_at"]) == len(lab.watch_steps(20))
    assert progress == [(i, 80) for i in range(1, 81)]


def test_the_shipped_run_reproduces_the_headline(shipped):
    """At the highest sparsity all five features form a pentagon: neighbours 72° apart (within 3°),
    each D_i near 2/5; dense, only two are represented. Dimensions per feature fall with sparsity
    (from 1), passing 1/2; the intro run represents more features sparse than dense; the phase
    diagram's corners are the paper's."""
    assert not shipped["live"] and shipped["steps"] == lab.STEPS
    pentagon = shipped["pentagon"]
    angles = pentagon["angles"][-1]
    assert len(angles) == 5 and max(abs(a - 72) for a in angles) < 3
    assert all(abs(d - 0.4) < 0.03 for d in pentagon["dims"][-1])
    assert pentagon["represented"][0] <= 3 < pentagon["represented"][-1] == 5
    dims = shipped["dimensionality"]["dims_per_feature"]
    assert dims[0] == pytest.approx(1, abs=0.03) and dims[-1] < 0.3
    assert all(later <= earlier + 0.03 for earlier, later in zip(dims, dims[1:]))
    assert any(abs(v - 0.5) < 0.03 for v in dims)
    intro = shipped["intro"]
    assert intro["represented"][0] <= intro["m"] + 1 < intro["represented"][-1]
    grid = shipped["phase"]["phase"]
    assert (grid[0][0], grid[0][-1], grid[-1][len(grid) // 2]) == (0, 1, 2)
    assert shipped["phase"]["pair_dims"] == pytest.approx(0.5, abs=0.02)
    assert (asset("lab") / "superposition" / "run.json").stat().st_size < 2_000_000


def test_the_page_renders_the_shipped_run(shipped):
    at = start("lab/superposition.py")
    assert not at.exception
    assert [s.label for s in at.select_slider] == ["Sparsity S", "Step"]
    pentagon = shipped["pentagon"]
    assert at.select_slider[1].value == pentagon["steps"][-1]
    assert at.metric[0].value == f"{pentagon['represented'][-1]} / 5"
    at.select_slider[1].set_value(0).run()
    assert not at.exception
    W0 = np.asarray(pentagon["W_at"][0][-1])
    assert at.metric[0].value == f"{int((np.linalg.norm(W0, axis=0) >= lab.REPRESENTED).sum())} / 5"
    assert len(at.get("plotly_chart")) == 6
