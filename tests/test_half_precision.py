"""Half precision (bfloat16, float16): Glassbox is as close to float32 as transformers is.

Reference: each model is saved once in float32 and opened three ways from that directory, as a
user would: transformers' float32 model (the truth), transformers' half-precision model
(``from_pretrained(dtype=...)``, eager attention) and Glassbox's (``load(dtype=...)``). Half
precision is not exact on either side (transformers' own bfloat16 logits are ~2-4% of the logits'
scale away from float32 on these models), so the checks are relative to transformers' own error:
- logits: Glassbox's largest error against float32, over the largest |logit|, is at most 1.5×
  transformers' own plus 1e-3, and below an absolute bound per precision (bfloat16 6e-2,
  float16 8e-3: about 8 rounding steps of each at the logits' scale);
- the loss (one number, whose error is as much luck as method): within one rounding step of the
  precision at the loss's value (eps × loss);
- every parameter's gradient of the loss, all of them as one vector: the relative error of its
  norm against float32's at most 1.5× transformers' own plus 1e-3.
Measured on this machine (``python -m pytest tests/test_half_precision.py -s`` prints each
line): Glassbox's logit error is 0.7-1.35× transformers' on every family.
The same runs on CUDA where there is one.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import require

transformers = require("transformers")

from glassbox.model.engine import GRAD, run_trace  # noqa: E402
from glassbox.model.engine.names import is_norm_parameter  # noqa: E402
from glassbox.model.io.checkpoint import load  # noqa: E402
from glassbox.model.io.convert import CONVERTERS  # noqa: E402
from tests.test_families import DEVICES, FAMILIES, PROMPT, _tokenizer  # noqa: E402

LOGIT_BOUND = {"bfloat16": 6e-2, "float16": 8e-3}
RATIO, SLACK = 1.5, 1e-3
CHOSEN = ["gpt_neox", "llama", "gemma2", "gemma3", "qwen3"]  # parallel blocks, RoPE scaling, soft-caps, QK-norm
CASES = [name for name in FAMILIES if name.split()[0] in CHOSEN]


@pytest.fixture(scope="module", params=["gpt2"] + CASES)
def saved(request, gpt2_dir, tmp_path_factory):
    """A float32 model directory (weights pushed off their initial values), and its name."""
    if request.param == "gpt2":
        return gpt2_dir, "gpt2"
    make_config, bos = FAMILIES[request.param]
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(make_config(), attn_implementation="eager").float()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(request.param.split()[0] + "-half")
    hf.save_pretrained(str(path))
    _tokenizer(bos).save_pretrained(str(path))
    return path, request.param.split()[0]


def _transformers_run(path, dtype: torch.dtype, device: str, ids: torch.Tensor):
    """(logits, loss, parameter gradients under transformers' names) of transformers' model."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="eager")
    hf = hf.to(device).eval()
    logits = hf(ids).logits[0]
    loss = torch.nn.functional.cross_entropy(logits[:-1].float(), ids[0, 1:])
    loss.backward()
    return logits.double(), loss.item(), {n: p.grad.double() for n, p in hf.named_parameters()}


def _flat(grads: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([grads[n].reshape(-1).double().cpu() for n in names])


def _converted(converter, cfg, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' gradients under Glassbox's names. Gemma's converter stores a norm weight
    w as 1 + w: a constant shift, so the gradient is the same and the shift is taken back."""
    offset = getattr(converter, "NORM_OFFSET", 0.0)
    return {n: g - offset if is_norm_parameter(n) else g for n, g in converter.state_dict(cfg, grads).items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_half_precision_is_as_close_to_float32_as_transformers(saved, precision, device):
    path, family = saved
    loaded = load(str(path), dtype=precision, device=device)
    assert loaded.model.embed.W_E.dtype == getattr(torch, precision)
    tokens = loaded.encode(PROMPT + " " + PROMPT)[:60]  # far positions: RoPE's angles must stay float32
    ids = torch.tensor([tokens], device=device)
    ref_logits, ref_loss, ref_grads = _transformers_run(path, torch.float32, device, ids)
    hf_logits, hf_loss, hf_grads = _transformers_run(path, getattr(torch, precision), device, ids)

    trace = run_trace(loaded.model, tokens, backward=True)
    assert trace["hook_logits"].dtype == getattr(torch, precision)
    scale = ref_logits.abs().max().item()
    hf_error = (hf_logits - ref_logits).abs().max().item() / scale
    our_error = (trace["hook_logits"].double() - ref_logits).abs().max().item() / scale

    # gradients under Glassbox's names, from each transformers run through the family's converter
    converter = CONVERTERS[transformers.AutoConfig.from_pretrained(str(path)).model_type]
    names = [n for n, _ in loaded.model.named_parameters()]
    ref = _flat(_converted(converter, loaded.cfg, ref_grads), names)
    hf_grad_error = ((_flat(_converted(converter, loaded.cfg, hf_grads), names) - ref).norm() / ref.norm()).item()
    our_grad_error = ((_flat({n: trace[GRAD + n] for n in names}, names) - ref).norm() / ref.norm()).item()
    print(
        f"\n{family:9} {precision:9} {device:4}  logits: transformers {hf_error:.2e}, Glassbox {our_error:.2e}"
        f"   loss: {abs(hf_loss - ref_loss):.1e}, {abs(trace.loss - ref_loss):.1e}"
        f"   gradients: {hf_grad_error:.2e}, {our_grad_error:.2e}"
    )

    assert our_error <= RATIO * hf_error + SLACK and our_error <= LOGIT_BOUND[precision]
    assert abs(trace.loss - ref_loss) <= torch.finfo(getattr(torch, precision)).eps * ref_loss  # one rounding step
    assert our_grad_error <= RATIO * hf_grad_error + SLACK


def test_the_cli_offers_every_precision_the_engine_loads():
    """Reference: model.engine.DTYPES; the CLI writes the names out so as not to import torch early."""
    from glassbox.cli import parser
    from glassbox.model.engine import DTYPES

    trace = parser()._subparsers._group_actions[0].choices["trace"]
    (dtype,) = [a for a in trace._actions if a.dest == "dtype"]
    assert list(dtype.choices) == list(DTYPES)
