"""docs/three-tasks.md's code, run: the blocks marked ``# Glassbox`` on the bundled default model,
the blocks marked ``# TransformerLens`` on the same weights (a HookedTransformer built from them),
each library's blocks in page order in one namespace of their own. The nnsight blocks are not
run (nnsight is not installed); the page says so in each one's first line.

References: torch's cross-entropy on the module's logits (the loss), the forward pass's own
logit (the attribution's sum), Glassbox's batched activation patching (the hand-written head
patch), and TransformerLens's numbers on the same weights (pattern, gradient, patch, per-head
attribution): all within 1e-4."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.helpers import ROOT, hooked_transformer, require

PAGE = ROOT / "docs" / "three-tasks.md"
LIBRARIES = ("# Glassbox", "# TransformerLens", "# nnsight (not run here)")
TOLERANCE = 1e-4


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def blocks(label: str) -> list[str]:
    """The page's ```python blocks whose first line is ``label``, in page order."""
    return [block for block in python_blocks() if block.splitlines()[0] == label]


def run(label: str, scope: dict) -> dict:
    for number, block in enumerate(blocks(label)):
        exec(compile(block, f"three-tasks.md ({label[2:]} block {number + 1})", "exec"), scope)
    return scope


@pytest.fixture(scope="module")
def glassbox():
    return run("# Glassbox", {})


@pytest.fixture(scope="module")
def transformer_lens(glassbox):
    require("transformer_lens", "transformer-lens")  # a test-only reference in the dev extras
    from transformer_lens import HookedTransformer

    hooked = hooked_transformer(glassbox["model"])

    def pretrained(name, **options):  # the page loads GPT-2 from the hub; the suite, the same weights as Glassbox
        assert name == "gpt2"
        return hooked

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HookedTransformer, "from_pretrained_no_processing", pretrained)
        return run("# TransformerLens", {})


def test_every_block_on_the_page_says_its_library():
    assert [block.splitlines()[0] for block in python_blocks() if block.splitlines()[0] not in LIBRARIES] == []
    assert [len(blocks(label)) for label in LIBRARIES] == [4, 4, 4]  # the setup and three tasks each


def test_cache_everything(glassbox):
    model, trace = glassbox["model"], glassbox["trace"]
    ids = torch.tensor([trace.tokens])
    with torch.no_grad():
        logits = model.module(ids).logits[0]
    assert glassbox["loss"] == pytest.approx(F.cross_entropy(logits[:-1], ids[0, 1:]).item(), abs=TOLERANCE)
    pattern = glassbox["pattern"]
    assert pattern.shape == (model.cfg.n_heads, len(trace.tokens), len(trace.tokens))
    assert torch.allclose(pattern.sum(-1), torch.ones(()), atol=1e-6) and not pattern.triu(1).any()
    assert glassbox["resid_grad"].shape == (len(trace.tokens), model.cfg.d_model)
    assert len(glassbox["names"]) == len(trace) and {"blocks.1.attn.hook_pattern", "grad:blocks.0.hook_resid_pre"} <= set(
        glassbox["names"]
    )


def test_patch_one_head(glassbox):
    every_head = glassbox["every_head"]
    block, head = glassbox["block"], glassbox["head"]
    assert glassbox["patched_diff"] == pytest.approx(every_head.metric[block, head], abs=TOLERANCE)
    # the head chosen matters here: patching it moves the corrupted run towards the clean one
    assert every_head.metric_corrupt + 1 < glassbox["patched_diff"] < every_head.metric_clean


def test_attribute_a_logit_to_heads(glassbox):
    model = glassbox["model"]
    logits = model.trace(glassbox["clean"], names=["hook_logits"])["hook_logits"]
    assert glassbox["total"] == pytest.approx(logits[-1, model.token_id(glassbox["answer"])].item(), abs=TOLERANCE)
    assert glassbox["per_head"].shape == (model.cfg.n_layers, model.cfg.n_heads)
    assert np.abs(glassbox["per_head"]).max() > 0.1  # the heads write into this logit: a table worth checking


def test_transformer_lens_gives_the_same_numbers(glassbox, transformer_lens):
    tl = transformer_lens
    assert tl["loss"] == pytest.approx(glassbox["loss"], abs=TOLERANCE)
    assert torch.allclose(tl["pattern"], glassbox["pattern"], atol=TOLERANCE)
    assert torch.allclose(tl["resid_grad"], glassbox["resid_grad"], atol=TOLERANCE)
    assert tl["patched_diff"] == pytest.approx(glassbox["patched_diff"], abs=TOLERANCE)
    assert np.allclose(tl["per_head"].detach().numpy(), glassbox["per_head"], atol=TOLERANCE)
