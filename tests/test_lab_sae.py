"""The lab's sae (model/lab/sae.py, app/lab/sae.py): the planted-feature match and L0 recomputed
with numpy from what run.json stores, train-sae's loop against a plain torch loop, the CLI, a tiny
deterministic run, the shipped run's headline, and the page."""

import json
from urllib.parse import parse_qs

import numpy as np
import pytest
import torch

from glassbox.model.io.assets import asset
from glassbox.model.lab import sae as lab
from glassbox.model.lab.runs import Run
from glassbox.model.tools.train_sae import fit
from tests.helpers import charts, cli, start


@pytest.fixture(scope="module")
def shipped() -> dict:
    return Run.shipped("sae").figures


def unit_rows(m) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_planted_match_recomputed_with_numpy(shipped):
    """Each planted direction's best cosine with a decoder row, from the stored directions and
    decoders (numpy, float64): run.json keeps both at 5 decimals, so 1e-3 on the cosines; a count
    of recovered features may differ only by features within that of the threshold."""
    planted = unit_rows(shipped["planted"]["directions"])
    assert planted.shape == (shipped["planted"]["n"], shipped["planted"]["d"])
    tol, threshold = 1e-3, shipped["threshold"]
    for entry in shipped["grid"]:
        best = (planted @ unit_rows(entry["W_dec"]).T).max(axis=1)
        assert np.allclose(best, entry["max_cos"], atol=tol)
        assert (best >= threshold + tol).sum() <= entry["recovered"] <= (best >= threshold - tol).sum()
        assert entry["mmcs"] == pytest.approx(best.mean(), abs=tol)
        assert len(entry["W_dec"]) == entry["d_sae"]
    # A decoder row within the threshold of two planted directions needs them within twice its angle:
    # cos ≥ 2·0.9² − 1 = 0.62. None are, so a dictionary recovers at most as many features as it has latents.
    pairs = planted @ planted.T - 2 * np.eye(len(planted))
    assert shipped["planted"]["max_pair_cos"] == pytest.approx(pairs.max(), abs=tol)
    assert pairs.max() < 2 * threshold**2 - 1


def test_data_and_l0_recomputed_with_numpy(shipped):
    """The planted data is what it says (x = codes · directions, each feature on with probability
    p, strengths in [0, 1]); the best SAE's L0, variance explained and dead latents on the held-out
    rows, recomputed with a numpy TopK encoder from its stored weights (5 decimals: 0.01 on L0,
    2e-3 on the variance explained, one latent on the dead count)."""
    planted = shipped["planted"]
    directions, _, x, codes = lab.datasets(shipped["seed"])
    assert np.allclose(directions.numpy(), planted["directions"], atol=1e-5)
    x, codes = x.numpy().astype(np.float64), codes.numpy().astype(np.float64)
    assert np.allclose(x, codes @ np.asarray(planted["directions"]), atol=1e-4)
    on = codes > 0
    sd = np.sqrt(planted["p"] * (1 - planted["p"]) / on.size)  # a binomial's standard error
    assert abs(on.mean() - planted["p"]) < 5 * sd and codes.max() <= 1
    assert planted["measured_l0"] == pytest.approx(on.sum(1).mean(), abs=1e-3)

    best = shipped["best"]
    entry = shipped["grid"][best["index"]]
    W_enc, b_enc, b_dec = (np.asarray(best[key]) for key in ("W_enc", "b_enc", "b_dec"))
    pre = (x - b_dec) @ W_enc + b_enc
    top = np.argpartition(-pre, entry["k"] - 1, axis=1)[:, : entry["k"]]
    acts = np.zeros_like(pre)
    np.put_along_axis(acts, top, np.maximum(np.take_along_axis(pre, top, axis=1), 0), axis=1)
    assert entry["l0"] == pytest.approx((acts > 0).sum(1).mean(), abs=0.01)
    rebuilt = acts @ np.asarray(entry["W_dec"]) + b_dec
    explained = 1 - ((x - rebuilt) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert entry["explained"] == pytest.approx(explained, abs=2e-3)
    assert abs(entry["dead"] - int(((acts > 0).sum(0) == 0).sum())) <= 1


def test_fit_is_a_plain_torch_loop():
    """train-sae's loop (model/tools/train_sae.fit) for a few steps against the same written out in
    plain torch: TopK of the pre-activations, summed squared error, Adam, decoder rows renormed (1e-6)."""
    x = torch.randn(300, 8, generator=torch.Generator().manual_seed(5)) + 0.5
    d_sae, k, steps, batch, lr, seed = 24, 3, 6, 40, 1e-2, 7
    sae, curve = fit(x, d_sae=d_sae, k=k, steps=steps, batch=batch, lr=lr, seed=seed, progress=False)

    g = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(d_sae, 8, generator=g)
    W_dec = (W_dec / W_dec.norm(dim=1, keepdim=True)).requires_grad_()
    W_enc = W_dec.detach().T.clone().requires_grad_()
    b_enc = torch.zeros(d_sae, requires_grad=True)
    b_dec = x.mean(0).clone().requires_grad_()
    opt = torch.optim.Adam([W_enc, b_enc, W_dec, b_dec], lr=lr)
    for _ in range(steps):
        rows = x[torch.randint(len(x), (batch,), generator=g)]
        pre = (rows - b_dec) @ W_enc + b_enc
        values, ids = pre.topk(k, dim=1)
        acts = torch.zeros_like(pre).scatter(1, ids, values.relu())
        loss = ((acts @ W_dec + b_dec - rows) ** 2).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=1, keepdim=True)
    for ours, plain in ((sae.W_enc, W_enc), (sae.b_enc, b_enc), (sae.W_dec, W_dec), (sae.b_dec, b_dec)):
        assert torch.allclose(ours, plain.detach(), atol=1e-6)
    assert curve[-1] == {"step": steps, "mse": pytest.approx(loss.item(), abs=1e-6)}


def test_cli_prints_the_shipped_run(shipped):
    run = cli("lab", "sae", "--shipped", "--json")
    assert run.returncode == 0, run.stderr
    figures = json.loads(run.stdout)
    assert figures["experiment"] == "sae" and figures["grid"][0]["recovered"] == shipped["grid"][0]["recovered"]
    assert {"what", "paper", "ours", "note"} <= set(figures["comparison"][0])


def test_a_tiny_run_works_and_is_deterministic(tmp_path):
    """`glassbox lab sae --live --steps 4` and the same run in this process: equal figures, but the time."""
    run = cli("lab", "sae", "--live", "--steps", "4", "--seed", "3", "--out", str(tmp_path / "a"), "--json")
    assert run.returncode == 0, run.stderr
    first = json.loads(run.stdout)
    progress = []
    second = lab.train(tmp_path / "b", steps=4, seed=3, live=True, on_step=lambda done, total: progress.append((done, total)))
    assert json.loads((tmp_path / "b" / "run.json").read_text()) == second
    for figures in (first, second):
        figures.pop("seconds")
    assert first == second
    assert first["steps"] == 4 and first["live"] and first["checkpoints"] == []
    assert len(first["grid"]) == len(lab.LIVE_GRID["d_sae"]) * len(lab.LIVE_GRID["k"])
    assert first["grid"][0]["curve"]["step"] == lab.watch_steps(4) == [0, 1, 2, 3, 4]
    total = 4 * len(first["grid"])
    assert progress == [(i, total) for i in range(1, total + 1)]


def test_the_shipped_run_reproduces_the_headline(shipped):
    """At the k nearest the planted L0: every dictionary larger than the planted set recovers ≥ 90 %
    of it, one of the same size most of it, a smaller one cannot (at most one planted feature per
    latent, see above). k far above the planted L0 recovers little at any size. Recovery forms
    during training: the best SAE recovers none at step 0 (its decoder starts random)."""
    n, k = shipped["planted"]["n"], shipped["right_k"]
    assert k == lab.MEAN_ACTIVE and not shipped["live"] and shipped["steps"] == lab.STEPS
    at_k = {e["d_sae"]: e for e in shipped["grid"] if e["k"] == k}
    assert {d_sae / n for d_sae in at_k} == {0.5, 1, 2, 4}
    for d_sae, entry in at_k.items():
        if d_sae > n:
            assert entry["recovered"] >= 0.9 * n and entry["mmcs"] > 0.95
        elif d_sae == n:
            assert entry["recovered"] >= 0.75 * n
        else:
            assert entry["recovered"] <= d_sae < 0.9 * n
    assert all(e["recovered"] < 0.1 * n for e in shipped["grid"] if e["k"] >= 4 * k)
    curve = shipped["grid"][shipped["best"]["index"]]["curve"]
    assert curve["recovered"][0] == 0 and curve["recovered"][-1] == n == max(e["recovered"] for e in shipped["grid"])
    assert (asset("lab") / "sae" / "run.json").stat().st_size < 2_000_000


def test_the_default_sae_figures(shipped):
    """default-sae's numbers on the held-out stories agree with what train-sae measured on the
    same stories when it trained it (its training.json: an independent evaluation), 1e-4."""
    trained = json.loads((asset("default-sae") / "training.json").read_text())
    d = shipped["default_sae"]
    assert d["explained"] == pytest.approx(trained["variance_explained_held_out"], abs=1e-4)
    assert d["dead"] == trained["dead_features_held_out"] and d["positions"] == trained["held_out_positions"]
    assert d["k"] - 1 < d["l0"] <= d["k"] == trained["k"] and d["d_sae"] == trained["d_sae"]
    assert d["prompt"] and len(d["prompt"]) < 200


def test_the_page_renders_the_shipped_run(shipped):
    """The page on the shipped run: three charts with titles and axis titles, one line per
    dictionary size holding the stored counts; the step slider over the stored steps moves the
    step's figures; the link to the explorer carries the default model, the prompt and the view."""
    at = start("lab/sae.py")
    assert not at.exception
    figs = charts(at)
    assert len(figs) == 3
    for fig in figs:
        layout = fig["layout"]
        assert layout["title"]["text"] and layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
    lines = {t["name"]: t["y"] for t in figs[0]["data"]}
    sizes = sorted({e["d_sae"] for e in shipped["grid"]})
    assert len(lines) == len(sizes)
    for size, name in zip(sizes, lines, strict=True):
        assert name.startswith(f"{size} latents")
        assert sorted(lines[name]) == sorted(e["recovered"] for e in shipped["grid"] if e["d_sae"] == size)
    best = shipped["grid"][shipped["best"]["index"]]
    assert figs[1]["data"][0]["y"] == best["max_cos"]
    assert [s.label for s in at.select_slider] == ["Step"]
    assert at.select_slider[0].value == best["curve"]["step"][-1]
    at.select_slider[0].set_value(0).run()
    assert not at.exception
    assert at.metric[4].value == f"0 / {shipped['planted']['n']}"
    link = at.get("page_link")[0].proto
    assert link.page == "explore"
    assert parse_qs(link.query_string) == {
        "model": ["default"],
        "prompt": [shipped["default_sae"]["prompt"]],
        "view": ["Features"],
    }
