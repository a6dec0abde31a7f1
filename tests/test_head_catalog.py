"""The head catalog (model/analysis/head_catalog.py, gb.Model.heads). References: each score
written out here as loops over run_trace's hook_pattern (float64: 1e-12), and the Circuits
view's induction and previous-token scores (circuits.head_scores) on a sequence repeated."""

from __future__ import annotations

import math

import numpy as np
import pytest

import glassbox as gb
from glassbox.model.analysis.circuits import head_scores
from glassbox.model.engine import GlassboxError, run_trace

TEXTS = ["Zoe had a frog. Zoe loved the frog.", "Tom saw a dog and the dog saw Tom.", "Lily had a red ball."]


@pytest.fixture(scope="module")
def model():
    return gb.load("default", dtype="float64")


def by_hand(model, texts):
    """Each score's formula as loops, pooled over the texts' queries."""
    cfg = model.cfg
    sums = {
        k: np.zeros((cfg.n_layers, cfg.n_heads)) for k in ("previous_token", "self", "duplicate_token", "induction", "entropy")
    }
    queries = repeats = 0
    for text in texts:
        ids = model.tokens(text)
        trace = run_trace(model.module, ids, names=["*hook_pattern"])
        for b in range(cfg.n_layers):
            a = trace[f"blocks.{b}.attn.hook_pattern"].cpu().numpy()
            for h in range(cfg.n_heads):
                for t in range(1, len(ids)):
                    sums["previous_token"][b, h] += a[h, t, t - 1]
                    sums["self"][b, h] += a[h, t, t]
                    sums["entropy"][b, h] += -sum(x * math.log(x) for x in a[h, t, : t + 1] if x > 0)
                for t in range(len(ids)):
                    for s in [s for s in range(t) if ids[s] == ids[t]]:
                        sums["duplicate_token"][b, h] += a[h, t, s]
                        sums["induction"][b, h] += a[h, t, s + 1]
        queries += len(ids) - 1
        repeats += sum(1 for t in range(len(ids)) if ids[t] in ids[:t])
    return {k: v / (repeats if k in ("duplicate_token", "induction") else queries) for k, v in sums.items()}


def test_every_score_equals_its_formula_written_out(model):
    catalog = model.heads(TEXTS)
    want = by_hand(model, TEXTS)
    assert catalog.n_texts == 3 and catalog.n_repeats >= 4
    for name, grid in want.items():
        assert np.allclose(catalog.scores[name], grid, rtol=1e-12, atol=1e-12), name


def test_on_a_repeated_sequence_it_is_the_circuits_views_scores(model):
    half = list(range(40, 70))  # distinct tokens: each query of the repeat has one earlier occurrence
    catalog = model.heads([half + half])
    induction, previous = head_scores(model.module, half)
    assert np.allclose(catalog.scores["induction"], induction, rtol=1e-12, atol=1e-12)
    assert np.allclose(catalog.scores["previous_token"], previous, rtol=1e-12, atol=1e-12)
    found = catalog.find("induction", 0.3)
    assert found == sorted(found, key=lambda r: -r[2]) and all(induction[b, h] > 0.3 for b, h, _ in found)


def test_the_bundled_stories_and_bad_input(model):
    catalog = model.heads(n_stories=2)
    assert catalog.n_texts == 2 and all(np.isfinite(g).all() for g in catalog.scores.values())
    entropy = catalog.scores["entropy"]
    assert (entropy >= 0).all() and (entropy <= math.log(model.cfg.n_ctx)).all()
    with pytest.raises(GlassboxError, match="at least 2 tokens"):
        model.heads(["Zoe"])
    with pytest.raises(GlassboxError, match="score must be one of"):
        catalog.find("copying", 0.5)


def test_the_heads_command_prints_the_catalog(model):
    """`glassbox heads --json` on the same float64 model (in this process): the catalog's grids
    and the heads --find lists."""
    import json

    from tests.helpers import cli

    args = ["heads", "--dtype", "float64", *[a for text in TEXTS for a in ("--text", text)]]
    run = cli(*args, "--find", "previous_token=0.2", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    catalog = model.heads(TEXTS)
    for name, grid in catalog.scores.items():
        assert np.allclose(np.array(out["scores"][name], dtype=float), grid, rtol=1e-12, atol=1e-12), name
    assert len(out["found"]) == (by_hand(model, TEXTS)["previous_token"] > 0.2).sum() > 0
    assert [(f["block"], f["head"]) for f in out["found"]] == [(b, h) for b, h, _ in catalog.find("previous_token", 0.2)]
    for bad, message in ((["--find", "induction"], "SCORE=VALUE"), (["--find", "copying=0.5"], "score must be one of")):
        run = cli(*args, *bad)
        assert run.returncode == 2 and message in run.stderr and len(run.stderr.splitlines()) == 1


def test_a_model_that_cannot_spell_the_stories_is_scored_on_repeated_random_tokens():
    """micro-induction (a syllable vocabulary) has two induction heads in block 1; the catalog's
    fallback (random sequences, each repeated) finds them, and the Circuits view's own score on
    another random sequence agrees (> 0.5 both)."""
    model = gb.load("micro-induction", dtype="float64")
    catalog = model.heads(n_stories=4)
    found = {(b, h) for b, h, _ in catalog.find("induction", 0.5)}
    half = np.random.default_rng(1).integers(0, model.tokenizer.vocab_size, 20).tolist()
    induction, _ = head_scores(model.module, half, model.tokenizer.prefix())
    assert found and found == {(int(b), int(h)) for b, h in zip(*np.nonzero(induction > 0.5))}
