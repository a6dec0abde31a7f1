"""The lab's induction (model/lab/induction.py, app/lab/induction.py): a checkpoint's in-context
learning score and head scores recomputed by hand from its logits and attention patterns; the jump's
steps recomputed from the stored curves; the ablation recomputed by zeroing weights instead of
activations; a few steps of the loop against a plain torch loop; the CLI; the page; the shipped
run's headline."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import glassbox
from glassbox.model.engine import Transformer
from glassbox.model.lab import induction as lab
from glassbox.model.lab.runs import Run, checkpoint_folder
from glassbox.model.micro import induction as micro
from tests.helpers import cli, start

TOL = 2e-3  # run.json keeps scores and losses at 4 decimals; float32 passes in a different order: 2e-3


@pytest.fixture(scope="module")
def run() -> Run:
    return Run.shipped("induction")


def position_losses(module, rows: list[list[int]]) -> np.ndarray:
    """Each position's next-token cross-entropy (torch's, on float64 logits), averaged over rows."""
    rows_t = torch.tensor(rows)
    with torch.no_grad():
        logits = module(rows_t[:, :-1]).logits.double()
    return F.cross_entropy(logits.transpose(1, 2), rows_t[:, 1:], reduction="none").mean(0).numpy()


def by_hand_scores(model, halves: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Induction score (attention from each token of the repeat to the token after its first
    occurrence) and previous-token score (attention to t − 1, from every position but the first),
    read from the trace's attention patterns and averaged over the halves, in float64."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    induction, previous = np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads))
    for half in halves:
        n = len(half)
        trace = model.trace(half + half, names=["blocks.*.attn.hook_pattern"])
        for b in range(n_layers):
            p = trace[f"blocks.{b}.attn.hook_pattern"].double().numpy()  # head × query × key
            induction[b] += np.mean([p[:, t, t - n + 1] for t in range(n, 2 * n)], axis=0)
            previous[b] += np.mean([p[:, t, t - 1] for t in range(1, 2 * n)], axis=0)
    return induction / len(halves), previous / len(halves)


def test_a_checkpoints_scores_recomputed_by_hand(run):
    """At the jump's step (a saved checkpoint), opened as "lab:induction@STEP": the in-context
    learning score from torch's cross-entropy on the model's logits, and each head's scores from
    its attention patterns, equal the run's figures (TOL)."""
    figures = run.figures
    step = figures["jump"]["heads_step"]
    assert step in run.checkpoint_steps
    model = glassbox.load(run.model_name(step))
    i = figures["measured"]["step"].index(step)
    losses = position_losses(model.module, figures["held_out"]["icl_rows"])
    assert losses[lab.LATE] - losses[lab.EARLY] == pytest.approx(figures["measured"]["icl"][i], abs=TOL)
    assert np.allclose(losses, figures["measured"]["position_loss"][i], atol=2e-3)  # stored at 3 decimals
    induction, previous = by_hand_scores(model, figures["held_out"]["score_halves"])
    assert np.allclose(induction, figures["measured"]["induction"][i], atol=TOL)
    assert np.allclose(previous, figures["measured"]["previous"][i], atol=TOL)


def test_the_ablation_recomputed_by_zeroing_weights(run):
    """Zeroing a head's rows of W_O removes exactly what zeroing its hook_z does (the run's way):
    the final model's in-context learning score with the induction heads, the control head and
    each head zeroed so, from torch's cross-entropy (TOL)."""
    figures = run.figures
    rows = figures["held_out"]["icl_rows"]
    model = glassbox.load(run.model_name(figures["steps"]))

    def icl(zeroed: list[list[int]]) -> float:
        module = Transformer(model.cfg)
        module.load_state_dict(model.module.state_dict())
        with torch.no_grad():
            for b, h in zeroed:
                module.blocks[b].attn.W_O[h] = 0.0
        losses = position_losses(module.eval(), rows)
        return losses[lab.LATE] - losses[lab.EARLY]

    ablation = figures["ablation"]
    assert icl([]) == pytest.approx(ablation["icl"], abs=TOL)
    for entry in (ablation["induction_heads"], ablation["control"], ablation["previous_token_head"], *ablation["each"]):
        assert icl(entry["heads"]) == pytest.approx(entry["icl"], abs=TOL)
        assert entry["removed"] == pytest.approx((ablation["icl"] - entry["icl"]) / ablation["icl"], abs=1e-3)
    last = figures["measured"]["ablation"][-1]  # the same, per head, in the curve's last measurement
    for entry in ablation["each"]:
        assert last[entry["block"]][entry["head"]] == pytest.approx(entry["icl"] - ablation["icl"], abs=TOL)


def test_the_jump_recomputed_from_the_curves(run):
    """The three steps and the window, by their stated rules, recomputed with plain Python from
    the stored curves; the moving average recomputed as a mean of slices."""
    figures = run.figures
    m, found, width = figures["measured"], figures["jump"], figures["setup"]["smooth"]
    loss = figures["loss"]
    smooth = [float(np.mean(loss[max(0, i - width // 2) : i + width // 2 + 1])) for i in range(len(loss))]
    assert np.allclose(smooth, figures["smoothed_loss"], atol=1e-3)

    def first_past(values: list[float], fraction: float) -> int:
        goal = values[0] + fraction * (values[-1] - values[0])
        up = values[-1] >= values[0]
        return next(s for s, v in zip(m["step"], values) if (v >= goal if up else v <= goal))

    best = [max(scores[-1]) for scores in m["induction"]]
    assert found["heads_step"] == first_past(best, 0.5)
    assert found["icl_step"] == first_past(m["icl"], 0.5)
    assert found["window"] == [first_past(m["icl"], f) for f in lab.WINDOW]
    slope = np.gradient(np.asarray(figures["smoothed_loss"]))
    assert found["loss_step"] == lab.WARMUP + int(np.argmin(slope[lab.WARMUP :]))


def test_a_few_steps_equal_a_plain_torch_loop(tmp_path, monkeypatch):
    """5 steps of the lab's loop (with a 2-step warm-up, so that the cosine is used too) against
    the same written out: the engine's forward, torch's cross-entropy and AdamW, the warm-up and
    cosine by hand, gradients clipped at norm 1. The weights saved at the last step equal the
    plain loop's to 1e-6; the stored losses (4 decimals) to 1e-4."""
    steps, seed, warmup, floor = 5, 3, 2, 0.1
    monkeypatch.setattr(lab, "WARMUP", warmup)
    monkeypatch.setattr(lab, "ICL_SEQUENCES", 16)  # fewer held-out sequences: the measurements are not compared here
    monkeypatch.setattr(lab, "SCORE_HALVES", 2)
    figures = lab.train(tmp_path, steps=steps, seed=seed)

    vocab = figures["setup"]["vocab"]
    torch.manual_seed(seed)
    model = Transformer(micro.config(vocab)).init_weights(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=micro.LR, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        if step < warmup:
            lr = micro.LR * (step + 1) / warmup
        else:
            t = (step - warmup) / (steps - warmup)
            lr = micro.LR * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = micro.sequences(micro.BATCH, vocab, gen)
        loss = F.cross_entropy(model(x).logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    assert np.allclose(figures["loss"], losses, atol=1e-4)
    saved = load_file(str(checkpoint_folder(tmp_path, steps) / "model.safetensors"))
    for name, value in model.state_dict().items():
        assert torch.allclose(saved[name], value, atol=1e-6), name
    assert figures["checkpoints"] == [0, steps] and figures["measured"]["step"] == [0, steps]
    assert json.loads((tmp_path / "run.json").read_text())["loss"] == figures["loss"]


def test_the_cli_prints_the_shipped_figures(run):
    result = cli("lab", "induction", "--shipped", "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == run.figures
    assert {r["what"] for r in printed["comparison"]} == {r["what"] for r in lab.compare(run.figures)}


def test_the_shipped_runs_headline(run):
    """The in-context learning score is near 0 before the window (under a tenth of the final
    score) and strongly negative after it; the heads, the score and the loss's steepest fall are
    within two measurements of each other; zeroing the induction heads removes most of the score,
    the control head under a quarter of that; checkpoints before, during and after the window."""
    f = run.figures
    before, after, found = f["phase"]["before"], f["phase"]["after"], f["jump"]
    assert after["icl"] < -1.0 and abs(before["icl"]) < 0.1 * abs(after["icl"])
    assert found["max_gap"] <= 2 * f["setup"]["every"]
    assert after["induction"] > 0.5 and before["induction"] < 0.1
    removed = f["ablation"]["induction_heads"]["removed"]
    assert removed > 0.7 and abs(f["ablation"]["control"]["removed"]) < min(0.25, removed / 4)
    start_, end = found["window"]
    saved = run.checkpoint_steps
    assert saved == f["checkpoints"] and 8 <= len(saved) <= 12
    assert min(saved) < start_ and any(start_ <= s <= end for s in saved) and max(saved) == f["steps"] > end
    assert before["step"] in saved and found["heads_step"] in saved
    assert f["experiment"] == "induction" and f["live"] is False and f["steps"] == lab.STEPS


def test_the_page_shows_the_shipped_run(run):
    at = start("lab/induction.py")
    assert not at.exception
    text = " ".join(m.value for m in at.markdown) + " ".join(s.value for s in at.subheader)
    assert "The phase change, on one step axis" in text
    assert "Zeroing heads after training" in text
    assert f"{run.figures['ablation']['induction_heads']['removed']:.0%}" in text
    assert at.metric[0].value == f"{run.figures['measured']['icl'][-1]:+.3f} nats"
