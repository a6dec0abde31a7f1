"""The lab's grokking (model/lab/grokking.py, app/lab/grokking.py): the fast training forward
against the engine's, the training loop against a plain torch loop, the Fourier spectrum against
numpy's FFT of a saved checkpoint's W_E, restricted and excluded loss against a numpy
recomputation, the CLI, the shipped run's grokking and the page."""

import json
import math
from urllib.parse import parse_qs

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassbox.model.io.checkpoint import load
from glassbox.model.lab import grokking as lab
from glassbox.model.lab.runs import Run
from tests.helpers import charts, cli, start

P = lab.P


@pytest.fixture(scope="module")
def run() -> Run:
    return Run.shipped("grokking")


def trained_a_little(steps: int = 3, n: int = 256, seed: int = 5):
    """A model after a few of fit's steps on ``n`` pairs (its weights no longer the initial ones)."""
    model = lab.new_model(seed)
    tokens, answers = lab.pairs()
    lab.fit(model, tokens[:n], answers[:n], steps, steps)
    return model


def test_fast_logits_equal_the_engine_forward():
    """Reference: the engine's own forward (Transformer.__call__), its logits at the last position
    (float32, tolerance 1e-5)."""
    model = trained_a_little()
    tokens, _ = lab.pairs()
    some = tokens[torch.randperm(P * P, generator=torch.Generator().manual_seed(0))[:300]]
    with torch.no_grad():
        ours = lab.fast_logits(dict(model.named_parameters()), some)
        engine = model(some).logits[:, -1]
    assert torch.allclose(ours, engine, rtol=0, atol=1e-5)


def test_fit_equals_a_plain_torch_loop():
    """Reference: the engine's forward, cross-entropy over the P numbers at the last position,
    torch's AdamW with the paper's settings and the warmup set by hand (float64, tolerance 1e-10:
    in float32 a pre-activation within rounding of 0 can fall on either side of ReLU's kink in
    the two sums, and Adam's first steps, about lr × the gradient's sign, amplify that)."""
    steps, n = 4, 200
    tokens, answers = lab.pairs()
    ours = lab.new_model(1).double()
    kept = lab.fit(ours, tokens[:n], answers[:n], steps, 2)
    assert [s for s, _ in kept] == [0, 2, 4]
    plain = lab.new_model(1).double()
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-3, weight_decay=1.0, betas=(0.9, 0.98))
    for t in range(steps):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * min((t + 1) / 10, 1.0)  # the paper's linear warmup over 10 steps
        logits = plain(tokens[:n]).logits[:, -1, :P]
        loss = F.cross_entropy(logits, answers[:n])
        opt.zero_grad()
        loss.backward()
        opt.step()
    for (name, a), b in zip(ours.named_parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-10), name
    assert torch.equal(kept[-1][1], torch.cat([p.detach().reshape(-1) for p in ours.parameters()]))


def test_spectrum_equals_numpy_fft_of_a_checkpoints_embedding(run):
    """Reference: numpy's FFT over the 113 number rows of W_E read back from the saved checkpoint:
    the cos and sin components' norm for frequency k is |FFT_k| · sqrt(2/P) (the basis vectors have
    norm sqrt(P/2)); tolerance 1e-3 (run.json rounds to 4 digits)."""
    figures = run.figures
    for step in (run.checkpoint_steps[0], run.checkpoint_steps[-1]):
        W_E = load(str(run.checkpoint(step))).model.embed.W_E.detach().double().numpy()[:P]
        expected = np.sqrt((np.abs(np.fft.fft(W_E, axis=0)[1 : P // 2 + 1]) ** 2).sum(-1) * 2 / P)
        stored = figures["curves"]["spectrum"][figures["curves"]["steps"].index(step)]
        assert np.allclose(stored, expected, rtol=0, atol=1e-3)
    assert figures["key_frequencies"] == figures["curves"]["key_frequencies"][-1]
    final = np.asarray(figures["final_spectrum"]) ** 2  # the rule: fewest frequencies, largest first, holding KEY_SHARE
    keys = np.asarray(figures["key_frequencies"]) - 1
    assert final[keys].sum() >= figures["key_share"] * final.sum()
    smallest = final[keys].min()
    assert final[keys].sum() - smallest < figures["key_share"] * final.sum()


def test_restricted_and_excluded_loss_recomputed_with_numpy():
    """Reference: the network's last position written in numpy (float64) from the weights, then
    the paper's code's definitions: restricted logits from the MLP activations' mean plus their
    projections on unit cos/sin(w_k(a+b)) over all pairs, through W_out W_U, shifted to the
    model's mean logits (test pairs); excluded: those projections removed, the rest of the stream
    kept (train pairs). Tolerance 1e-6 relative."""
    model = trained_a_little(steps=5)
    w = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    a, b = np.repeat(np.arange(P), P), np.tile(np.arange(P), P)
    x = np.stack([w["embed.W_E"][a], w["embed.W_E"][b], np.repeat(w["embed.W_E"][P][None], P * P, 0)], 1) + w["pos_embed.W_pos"]
    mid = x[:, 2].copy()
    for h in range(lab.N_HEADS):
        q = x[:, 2] @ w["blocks.0.attn.W_Q"][h]
        k, v = x @ w["blocks.0.attn.W_K"][h], x @ w["blocks.0.attn.W_V"][h]
        s = np.einsum("ne,nte->nt", q, k) / math.sqrt(q.shape[-1])
        pattern = np.exp(s - s.max(1, keepdims=True))
        pattern /= pattern.sum(1, keepdims=True)
        mid += np.einsum("nt,nte->ne", pattern, v) @ w["blocks.0.attn.W_O"][h]
    post = np.maximum(mid @ w["blocks.0.mlp.W_in"] + w["blocks.0.mlp.b_in"], 0)
    logits = (mid + post @ w["blocks.0.mlp.W_out"] + w["blocks.0.mlp.b_out"]) @ w["unembed.W_U"]
    keys, answers = [3, 17], (a + b) % P
    along = np.zeros_like(post)
    for k in keys:
        for f in (np.cos, np.sin):
            d = f(2 * np.pi * k * (a + b) / P)
            d /= np.linalg.norm(d)
            along += np.outer(d, d @ post)
    restricted = (post.mean(0) + along) @ w["blocks.0.mlp.W_out"] @ w["unembed.W_U"]
    restricted += logits.mean(0) - restricted.mean(0)
    excluded = (mid + (post - along) @ w["blocks.0.mlp.W_out"] + w["blocks.0.mlp.b_out"]) @ w["unembed.W_U"]

    def ce(z, rows):
        z = z[rows, :P]
        z = z - z.max(1, keepdims=True)
        return float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(rows)), answers[rows]]))

    train, test = lab.split(0, 0.3)
    tokens, targets = lab.pairs()
    with torch.no_grad():
        ours = lab.restricted_and_excluded(dict(model.named_parameters()), tokens, targets, train, test, keys)
    assert ours == pytest.approx((ce(restricted, test.numpy()), ce(excluded, train.numpy())), rel=1e-6)


def test_cli_prints_the_shipped_run(run):
    out = cli("lab", "grokking", "--shipped", "--json")
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["experiment"] == "grokking" and figures["curves"]["steps"] == run.figures["curves"]["steps"]
    assert figures["checkpoints"] == run.checkpoint_steps
    assert {"what", "paper", "ours", "note"} <= set(figures["comparison"][0])


def test_a_tiny_live_run(tmp_path):
    """A live run of 2 steps: progress after every step, run.json as returned, the live settings,
    checkpoints at its first and last step as Glassbox model folders holding the kept weights."""
    progress = []
    figures = lab.train(tmp_path, steps=2, seed=2, live=True, on_step=lambda done, total: progress.append((done, total)))
    assert json.loads((tmp_path / "run.json").read_text()) == figures and progress == [(1, 2), (2, 2)]
    assert figures["fraction"] == lab.LIVE_FRACTION and figures["lr"] == lab.LIVE_LR and figures["curves"]["steps"] == [0, 2]
    assert Run.read(tmp_path).checkpoint_steps == figures["checkpoints"] == [0, 2]
    first = load(str(Run.read(tmp_path).checkpoint(0))).model.embed.W_E
    assert torch.equal(first, lab.new_model(2).embed.W_E)  # step 0: the seed's initial weights


def test_the_shipped_run_groks_through_the_three_phases(run):
    """The paper's setup (30% of the pairs, lr 1e-3): the model memorises, then the test loss
    falls to near zero; the phases come in order, and the progress measures move as the paper's:
    restricted loss falls and excluded loss rises from the end of memorisation to the cleanup."""
    f = run.figures
    c, bounds = f["curves"], f["phases"]
    assert f["fraction"] == lab.FRACTION and f["lr"] == lab.LR and f["steps"] == lab.STEPS
    assert f["final"]["test_accuracy"] > 0.99 and f["final"]["train_accuracy"] == 1.0
    assert 0 < bounds["memorisation_end"] < bounds["cleanup_start"] < bounds["cleanup_end"] <= f["steps"]
    at = {name: c["steps"].index(step) for name, step in bounds.items()}
    memorised, cleanup = at["memorisation_end"], at["cleanup_start"]
    assert c["train_loss"][memorised] < c["train_loss"][0] / 10  # memorised: train loss far below its start
    assert c["test_loss"][memorised] > c["test_loss"][0]  # while the test loss has risen
    assert c["test_loss"][at["cleanup_end"]] < c["test_loss"][cleanup] / 10 and c["test_loss"][-1] < 0.1
    assert c["restricted_loss"][cleanup] < c["restricted_loss"][memorised]
    assert c["excluded_loss"][cleanup] > c["excluded_loss"][memorised]
    assert c["weight_norm"][-1] < c["weight_norm"][cleanup]
    assert len(f["key_frequencies"]) < 10  # a few frequencies: the paper's model has 5
    assert set(run.checkpoint_steps) >= {0, f["steps"], *bounds.values()}
    size = sum(p.stat().st_size for p in run.path.rglob("*") if p.is_file())
    assert size < 8_500_000


def test_the_page_renders_the_shipped_run(run):
    """Three charts with titles and axis titles, the curves as run.json holds them; the step slider
    redraws the spectrum of the chosen step and links to its model in the explorer."""
    at = start("lab/grokking.py")
    assert not at.exception and not at.error
    figs = charts(at)
    assert len(figs) == 3
    for fig in figs:
        layout = fig["layout"]
        assert layout["title"]["text"] and layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
    c = run.figures["curves"]
    assert figs[0]["data"][1]["y"] == c["test_loss"]  # every measurement, step 0 too (a linear step axis)
    assert [s.label for s in at.select_slider if s.label == "Step"] == ["Step"]
    slider = next(s for s in at.select_slider if s.label == "Step")
    assert slider.value == run.checkpoint_steps[-1]
    assert charts(at)[2]["data"][0]["y"] == c["spectrum"][-1]
    slider.set_value(0).run()
    assert not at.exception
    assert charts(at)[2]["data"][0]["y"] == c["spectrum"][0]
    link = at.get("page_link")[0].proto
    assert parse_qs(link.query_string)["model"] == ["lab:grokking@0"]
