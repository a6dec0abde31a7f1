"""`glassbox verify --dtype float64` on the mixture-of-experts families (Mixtral, Qwen2-MoE,
OLMoE). transformers 5's default experts kernel (grouped_mm) refuses float64, so the reference is
loaded with its eager experts (a loop over the experts); before that, verify ended in an
"internal error".

Reference: transformers' own causal-LM class for each family (tiny models from
tests/test_moe_families.py, saved with ``save_pretrained``). Tolerance 1e-5 on the logits, the
residual streams and the gradients, 1e-6 on the loss: not float64's 1e-12, because transformers
computes RoPE's angles (and these families' router probabilities) in float32 whatever the model's
dtype, and rounds them back, so its float64 pass carries float32 rounding (~1e-6 here, the same as
a dense Mistral's). A changed expert weight moves the differences far past those bounds, so the
check compares two passes, not one pass with itself.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

import glassbox as gb  # noqa: E402
from tests.helpers import cli  # noqa: E402
from tests.test_families import saved_family  # noqa: E402
from tests.test_moe_families import FAMILIES  # noqa: E402

TOL = 1e-5  # logits, residuals, gradients: transformers' float32 RoPE and router probabilities
LOSS_TOL = 1e-6
PROMPT = "The cat sat on the mat; the dog sat on the log."
MOE_FAMILIES = [name for name in FAMILIES if name.split()[0] in ("mixtral", "qwen2_moe", "olmoe")]


@pytest.fixture(scope="module", params=MOE_FAMILIES, ids=lambda name: name.split()[0])
def folder(request, tmp_path_factory):
    make_config, bos = FAMILIES[request.param]
    path = tmp_path_factory.mktemp(request.param.split()[0])
    saved_family(make_config(), bos, path)
    return path


def test_float64_verify_of_a_mixture_of_experts_is_within_float32_rope(folder):
    model = gb.load(str(folder), dtype="float64", device="cpu")
    assert model.cfg.n_experts is not None
    result = model.verify(PROMPT, gradients=True)
    assert result.dtype == "float64" and "ForCausalLM" in result.reference
    assert result.logits < TOL and result.residual < TOL and result.gradient < TOL and result.loss < LOSS_TOL
    assert result.logits_scale > 0.1 and result.gradient_scale > 1e-3  # the compared numbers are not all ~0
    sparse = next(i for i in range(model.cfg.n_layers) if model.cfg.is_moe(i))
    with torch.no_grad():
        model.module.blocks[sparse].mlp.experts.W_out[:, 0] += 0.5  # every expert (whichever is routed to), this copy only
    changed = model.verify(PROMPT)
    assert changed.logits > 1e-3 and changed.residual > 1e-3


def test_the_verify_command_in_float64_exits_0(folder):
    run = cli("verify", "--model", str(folder), "--dtype", "float64", "--prompt", PROMPT, "--json")
    assert run.returncode == 0 and "internal error" not in run.stderr, run.stderr
    out = json.loads(run.stdout)
    assert out["dtype"] == "float64" and out["logits"] < TOL
