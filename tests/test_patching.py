"""Per-call edits (model/engine/edits.py) and activation patching (model/analysis/patching.py).

References: transformers' own GPT2LMHeadModel (eager, fp32) with forward hooks doing the same
replacement, ≤1e-4 on the logit difference; a model whose weights are edited to the same effect
(zeroing a head); the arithmetic of patching itself (a patch of everything that differs restores
the clean run exactly). Attribution patching's estimate is a first-order approximation: checked
against finite differences of the patched metric along the same direction (float64, ≤1e-6)."""

import threading

import numpy as np
import pytest
import torch

from glassbox.model.analysis.patching import SITE_NAMES, SITES, activation_patching, logit_difference
from glassbox.model.engine import GlassboxError, ModelConfig, editing, replaced
from glassbox.model.engine.capture import capture
from glassbox.model.io.checkpoint import load

CLEAN, CORRUPT = "The cat sat on the mat; the dog", "The dog sat on the log; the cat"


@pytest.fixture(scope="module")
def both(gpt2_dir):
    from transformers import GPT2LMHeadModel

    loaded = load(str(gpt2_dir), dtype="float32")
    reference = GPT2LMHeadModel.from_pretrained(gpt2_dir, attn_implementation="eager").float().eval()
    clean, corrupt = loaded.encode(CLEAN), loaded.encode(CORRUPT)
    assert len(clean) == len(corrupt)
    return loaded, reference, clean, corrupt


def reference_patching(hf, clean, corrupt, answer, wrong, site):
    """The same experiment in transformers, with its own modules' forward hooks."""
    blocks, n_heads = hf.transformer.h, hf.config.n_head
    d_head = hf.config.n_embd // n_heads
    module = {
        "resid_pre": lambda b: blocks[b],
        "attn_out": lambda b: blocks[b].attn,
        "mlp_out": lambda b: blocks[b].mlp,
        "head": lambda b: blocks[b].attn.c_proj,
    }[site]
    pre = site in ("resid_pre", "head")  # these patch a module's input, the others its output
    seen = {}

    def run(ids, patch=None):
        handles = []
        for b in range(len(blocks)):

            def hook(mod, args, out=None, b=b):
                x = args[0] if pre else (out[0] if isinstance(out, tuple) else out)
                if patch is None:
                    seen[b] = x.detach().clone()
                    return None
                block, j = patch
                if block != b:
                    return None
                x = x.clone()
                if site == "resid_pre":
                    x[0, j] = seen[b][0, j]
                elif site == "head":
                    x[0, :, j * d_head : (j + 1) * d_head] = seen[b][0, :, j * d_head : (j + 1) * d_head]
                else:
                    x = seen[b]
                if pre:
                    return (x, *args[1:])
                return (x, *out[1:]) if isinstance(out, tuple) else x

            m = module(b)
            handles.append(m.register_forward_pre_hook(hook) if pre else m.register_forward_hook(hook))
        try:
            with torch.no_grad():
                logits = hf(torch.tensor([ids])).logits
        finally:
            for h in handles:
                h.remove()
        return float(logits[0, -1, answer] - logits[0, -1, wrong])

    clean_metric = run(clean)  # fills `seen` with the clean activations
    width = {"resid_pre": len(clean), "head": n_heads}.get(site, 1)
    grid = np.array([[run(corrupt, (b, j)) for j in range(width)] for b in range(len(blocks))])
    return clean_metric, run(corrupt), grid


@pytest.mark.parametrize("site", SITES)
def test_patching_matches_transformers_with_forward_hooks(both, site):
    loaded, hf, clean, corrupt = both
    answer, wrong = loaded.tokenizer.token_id(" dog"), loaded.tokenizer.token_id(" sat")
    result = activation_patching(loaded.model, clean, corrupt, answer, wrong, site)
    clean_metric, corrupt_metric, grid = reference_patching(hf, clean, corrupt, answer, wrong, site)
    assert result.metric_clean == pytest.approx(clean_metric, abs=1e-4)
    assert result.metric_corrupt == pytest.approx(corrupt_metric, abs=1e-4)
    assert np.abs(grid).max() > 0.1 and not np.allclose(grid, corrupt_metric, atol=1e-3)  # the patches do something
    np.testing.assert_allclose(result.metric, grid, atol=1e-4)
    rows = result.results()
    assert len(rows) == grid.size and all(
        set(r) == {"block", "metric"} | ({result.column} if result.column else set()) for r in rows
    )


def test_patching_everything_that_differs_restores_the_clean_run(random_model):
    """Prompts differing in one position: patching block 0's residual stream there is the clean
    run itself, exactly; patching an identical position changes nothing (no attention looks ahead)."""
    model = random_model(ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32))
    clean, corrupt = [1, 2, 3, 4, 5], [1, 7, 3, 4, 5]
    result = activation_patching(model, clean, corrupt, 6, 8, "resid_pre")
    assert result.metric[0, 1] == pytest.approx(result.metric_clean, abs=1e-12)
    assert result.metric[0, 0] == pytest.approx(result.metric_corrupt, abs=1e-12)
    assert result.restored()[0, 1] == pytest.approx(1.0)


@pytest.mark.parametrize("site", SITES)
def test_attribution_patching_is_the_first_order_term(random_model, site):
    """Every site's estimate is metric(corrupt) + gradient · (clean − corrupt) over the patched
    entries: the derivative at ε = 0 of the metric when ε of that difference is added there, by
    central finite differences (float64, ≤1e-6). On a grouped-query, parallel-block model."""
    model = random_model(
        ModelConfig(
            vocab_size=20,
            n_ctx=16,
            d_model=16,
            n_layers=2,
            n_heads=4,
            n_kv_heads=2,
            d_ff=32,
            positional="rope",
            parallel_block=True,
        )
    )
    clean, corrupt = [1, 2, 3, 4, 5], [1, 7, 3, 9, 5]
    result = activation_patching(model, clean, corrupt, 6, 8, site)
    name = SITE_NAMES[site].format(1)
    index = {"resid_pre": (0, 3), "head": (0, 2)}.get(site, (0,))  # batch entry 0, then position or head
    with torch.no_grad(), capture([name]) as clean_run:
        model(torch.tensor([clean]))
    with torch.no_grad(), capture([name]) as corrupt_run:
        model(torch.tensor([corrupt]))
    difference = torch.zeros_like(corrupt_run.tensors[name])
    difference[index] = clean_run.tensors[name][index] - corrupt_run.tensors[name][index]

    def metric(eps):
        with torch.no_grad(), editing({name: lambda x: x + eps * difference}):
            return float(logit_difference(model(torch.tensor([corrupt])).logits, 6, 8)[0])

    h = 1e-5
    slope = (metric(h) - metric(-h)) / (2 * h)
    cell = (1, index[1] if len(index) > 1 else 0)
    assert result.estimate[cell] == pytest.approx(result.metric_corrupt + slope, abs=1e-6)
    assert abs(slope) > 1e-3  # the direction matters to the metric


def test_edits_of_names_no_pass_computes_are_errors(random_model):
    model = random_model(ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32))
    with pytest.raises(GlassboxError, match="No tensor named blocks.0.hook_resid_pri"):
        with torch.no_grad(), editing({"blocks.0.hook_resid_pri": lambda x: x}):
            model(torch.tensor([[1, 2]]))
    with pytest.raises(GlassboxError, match="display only"):
        with editing({"hook_probs": lambda x: x}):
            pass
    with pytest.raises(GlassboxError, match="outside the vocabulary"):
        activation_patching(model, [1, 2], [1, 3], 99, 5)


def test_zeroing_a_head_equals_zeroing_its_rows_of_W_O(random_model):
    """Ablation through an edit against a model whose weights are edited to the same effect."""
    model = random_model(ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad(), editing({"blocks.1.attn.hook_z": replaced((slice(None), 0), 0.0)}):
        edited = model(ids).logits
    weights = load_copy(model)
    with torch.no_grad():
        weights.blocks[1].attn.W_O[0] = 0.0
        expected = weights(ids).logits
    torch.testing.assert_close(edited, expected, atol=1e-12, rtol=0)
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, expected)  # the shared model kept no edit


def load_copy(model):
    import copy

    return copy.deepcopy(model)


def test_edits_stay_in_their_own_thread(random_model):
    """Two threads on one model, one editing: the other's logits are the plain ones."""
    model = random_model(ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        plain = model(ids).logits
    barrier, out = threading.Barrier(2), {}

    def edited():
        with torch.no_grad(), editing({"blocks.0.hook_resid_pre": lambda x: x * 0}):
            barrier.wait()
            out["edited"] = model(ids).logits

    def untouched():
        barrier.wait()
        with torch.no_grad():
            out["plain"] = model(ids).logits

    threads = [threading.Thread(target=edited), threading.Thread(target=untouched)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.testing.assert_close(out["plain"], plain, atol=0, rtol=0)
    assert not torch.allclose(out["edited"], plain)


def test_bad_patching_input_says_why(random_model):
    model = random_model(ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_ff=32))
    with pytest.raises(GlassboxError, match="equal length"):
        activation_patching(model, [1, 2, 3], [1, 2], 4, 5)
    with pytest.raises(GlassboxError, match="Unknown site"):
        activation_patching(model, [1, 2], [1, 3], 4, 5, "nowhere")
