"""The engine against transformers' GPT2LMHeadModel on the same GPT-2 checkpoint.

Reference: transformers' own GPT2LMHeadModel (eager attention, eval mode, float32) and its
GPT2 tokenizer, reading the directory built by the ``gpt2_dir`` fixture (conftest.py).
The engine reads the same files with ``model.checkpoint.load``. Both run in float32 on the
CPU, with differently ordered arithmetic, so agreement is to float32 rounding:

- token ids: identical;
- logits, residual stream, final LayerNorm output: <= 1e-4 absolute;
- attention patterns, loss: <= 1e-5 absolute (transformers masks the future with
  finfo.min, the engine with -inf: both give exact zeros after the softmax);
- gradients of the loss w.r.t. residuals and every parameter: <= 1e-5 absolute.
"""

import pytest
import torch

from glassbox.model.engine import GRAD, Target, run_trace
from glassbox.model.io.checkpoint import load

LOGITS_TOL = 1e-4
RESID_TOL = 1e-4
PATTERN_TOL = 1e-5
LOSS_TOL = 1e-5
GRAD_TOL = 1e-5

# ~30 tokens with the fixture's tokenizer; words from its corpus and some it has not seen.
PROMPT = 'The quick fox said: "Attention!" and the cat sat on 42 mats.'

TEXTS = [
    "Hello world",
    " leading space",
    "   three leading spaces and trailing ones   ",
    "line one\nline two\n\nline four\r\n",
    "tabs\tand\tcontrol\x07chars",
    "emoji 🤖🧠 and a flag 🇫🇷",
    "日本語のテキスト, Ελληνικά, русский, عربى",
    "naïve café — “quotes” … and accents: Ångström",
    "The quick brown fox jumps over the lazy dog.",
    "It's 3.14159, isn't it? Yes: it's π!",
]


@pytest.fixture(scope="module")
def loaded(gpt2_dir):
    return load(str(gpt2_dir), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def hf_tokenizer(gpt2_dir):
    from transformers import GPT2TokenizerFast

    return GPT2TokenizerFast.from_pretrained(str(gpt2_dir))


@pytest.fixture
def hf_model(gpt2_dir):
    """A fresh transformers model per test: the gradient tests call backward on it."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(gpt2_dir), attn_implementation="eager", dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def prompt_ids(loaded):
    ids = loaded.tokenizer.encode(PROMPT)
    assert 20 <= len(ids) <= 40, len(ids)
    return ids


def hf_to_engine(hf: dict[str, torch.Tensor], n_layers: int, n_heads: int) -> dict[str, torch.Tensor]:
    """Map GPT2LMHeadModel tensors (parameters, or their gradients) to the engine's names and
    shapes, written out independently of model/checkpoint.py."""
    D = hf["transformer.wte.weight"].shape[1]
    H, dh = n_heads, D // n_heads
    out = {
        "embed.W_E": hf["transformer.wte.weight"],  # tied with lm_head: one tensor, one gradient
        "pos_embed.W_pos": hf["transformer.wpe.weight"],
        "ln_final.w": hf["transformer.ln_f.weight"],
        "ln_final.b": hf["transformer.ln_f.bias"],
    }
    for i in range(n_layers):
        s, e = f"transformer.h.{i}.", f"blocks.{i}."
        w, b = hf[s + "attn.c_attn.weight"], hf[s + "attn.c_attn.bias"]  # Conv1D: (D, 3D), (3D,)
        assert w.shape == (D, 3 * D)
        for j, qkv in enumerate("QKV"):
            out[f"{e}attn.W_{qkv}"] = w[:, j * D : (j + 1) * D].reshape(D, H, dh).permute(1, 0, 2)
            out[f"{e}attn.b_{qkv}"] = b[j * D : (j + 1) * D].reshape(H, dh)
        out[e + "attn.W_O"] = hf[s + "attn.c_proj.weight"].reshape(H, dh, D)
        out[e + "attn.b_O"] = hf[s + "attn.c_proj.bias"]
        for hf_ln, ln in (("ln_1", "ln1"), ("ln_2", "ln2")):
            out[f"{e}{ln}.w"] = hf[f"{s}{hf_ln}.weight"]
            out[f"{e}{ln}.b"] = hf[f"{s}{hf_ln}.bias"]
        out[e + "mlp.W_in"] = hf[s + "mlp.c_fc.weight"]
        out[e + "mlp.b_in"] = hf[s + "mlp.c_fc.bias"]
        out[e + "mlp.W_out"] = hf[s + "mlp.c_proj.weight"]
        out[e + "mlp.b_out"] = hf[s + "mlp.c_proj.bias"]
    return out


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.double() - b.double()).abs().max().item()


def assert_close(name: str, engine: torch.Tensor, reference: torch.Tensor, tol: float) -> float:
    diff = max_diff(engine, reference)
    assert diff <= tol, f"{name}: engine vs transformers max abs diff {diff:.3g} > {tol:g}"
    return diff


# --- tokenizer ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_token_ids_equal_transformers_tokenizer(loaded, hf_tokenizer, text):
    # Reference: GPT2TokenizerFast on the same vocab.json + merges.txt; exact equality.
    ids = loaded.tokenizer.encode(text)
    assert ids == hf_tokenizer(text)["input_ids"], "engine token ids differ from transformers' GPT-2 tokenizer"
    assert loaded.tokenizer.decode(ids) == text == hf_tokenizer.decode(ids)


# --- weights and forward pass -------------------------------------------------------------


def test_loaded_weights_are_transformers_weights(loaded, hf_model):
    # Reference: the transformers model's parameters, mapped by hand; exact equality.
    cfg = loaded.cfg
    assert (cfg.vocab_size, cfg.n_ctx, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff) == (
        hf_model.config.vocab_size,
        64,
        64,
        3,
        4,
        256,
    )
    assert hf_model.lm_head.weight.data_ptr() == hf_model.transformer.wte.weight.data_ptr()  # tied
    reference = hf_to_engine(dict(hf_model.named_parameters()), cfg.n_layers, cfg.n_heads)
    engine = dict(loaded.model.named_parameters())
    assert set(engine) == set(reference)
    for name, param in engine.items():
        assert torch.equal(param, reference[name]), name
    # The fixture perturbed norms and biases: a loader that ignored them would not pass.
    assert (engine["blocks.0.ln1.w"] - 1).abs().max() > 0.1 and engine["blocks.2.attn.b_K"].abs().max() > 0.1


def test_forward_equals_transformers(loaded, hf_model, prompt_ids):
    n_layers = loaded.cfg.n_layers
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        ref = hf_model(ids, labels=ids, output_attentions=True, output_hidden_states=True)
    trace = run_trace(loaded.model, prompt_ids)
    assert len(ref.attentions) == n_layers and len(ref.hidden_states) == n_layers + 1

    diffs = {"logits": assert_close("logits", trace["hook_logits"], ref.logits[0], LOGITS_TOL)}
    diffs["pattern"] = max(
        assert_close(f"blocks.{i}.attn.hook_pattern", trace[f"blocks.{i}.attn.hook_pattern"], ref.attentions[i][0], PATTERN_TOL)
        for i in range(n_layers)
    )
    # hidden_states[i] is the input of block i; the last one is the output of ln_f.
    diffs["resid"] = max(
        assert_close(f"blocks.{i}.hook_resid_pre", trace[f"blocks.{i}.hook_resid_pre"], ref.hidden_states[i][0], RESID_TOL)
        for i in range(n_layers)
    )
    diffs["ln_final"] = assert_close("ln_final.hook_out", trace["ln_final.hook_out"], ref.hidden_states[-1][0], RESID_TOL)
    # ln_final normalises the last block's output, as transformers' ln_f does.
    resid_post = trace[f"blocks.{n_layers - 1}.hook_resid_post"]
    assert_close("ln_f(resid_post)", hf_model.transformer.ln_f(resid_post).detach(), ref.hidden_states[-1][0], RESID_TOL)
    # Loss: transformers' mean next-token cross-entropy with labels = input ids.
    diffs["loss"] = abs(trace.loss - ref.loss.item())
    assert diffs["loss"] <= LOSS_TOL, f"loss: engine {trace.loss} vs transformers {ref.loss.item()}"
    print("forward max abs diffs:", {k: f"{v:.2e}" for k, v in diffs.items()})


# --- backward pass ------------------------------------------------------------------------


def hf_backward(hf_model, prompt_ids, target: Target | None):
    """Run transformers forward + backward; return the loss, dL/d(hidden_states) and
    dL/d(parameters) mapped to the engine's names."""
    ids = torch.tensor([prompt_ids])
    hf_model.zero_grad(set_to_none=True)
    if target is None:
        out = hf_model(ids, labels=ids, output_hidden_states=True)
        loss = out.loss
    else:  # cross-entropy of one token at one position, by hand from the logits
        out = hf_model(ids, output_hidden_states=True)
        loss = -out.logits[0, target.position].log_softmax(-1)[target.token_id]
    for h in out.hidden_states:
        h.retain_grad()
    loss.backward()
    hidden_grads = [h.grad[0] for h in out.hidden_states]
    cfg = hf_model.config
    param_grads = hf_to_engine({n: p.grad for n, p in hf_model.named_parameters()}, cfg.n_layer, cfg.n_head)
    return loss.item(), hidden_grads, param_grads


def compare_gradients(loaded, trace, loss, hidden_grads, param_grads) -> dict:
    n_layers = loaded.cfg.n_layers
    assert abs(trace.loss - loss) <= LOSS_TOL, f"loss: engine {trace.loss} vs transformers {loss}"
    resid = max(
        assert_close(f"grad:blocks.{i}.hook_resid_pre", trace[f"{GRAD}blocks.{i}.hook_resid_pre"], hidden_grads[i], GRAD_TOL)
        for i in range(n_layers)
    )
    resid = max(resid, assert_close("grad:ln_final.hook_out", trace[GRAD + "ln_final.hook_out"], hidden_grads[-1], GRAD_TOL))
    names = [n for n, _ in loaded.model.named_parameters()]
    assert set(names) == set(param_grads)
    params = max(assert_close(GRAD + n, trace[GRAD + n], param_grads[n], GRAD_TOL) for n in names)
    # The reference gradients are not trivially small: the comparison means something.
    assert param_grads["embed.W_E"].abs().max() > 1e-2 and hidden_grads[0].abs().max() > 1e-3
    return {"resid_grad": resid, "param_grad": params}


def test_gradients_of_next_token_loss_equal_transformers(loaded, hf_model, prompt_ids):
    # Reference: loss.backward() on transformers' model with labels = input ids; the
    # residual gradients via retain_grad() on its hidden states.
    trace = run_trace(loaded.model, prompt_ids, backward=True)
    diffs = compare_gradients(loaded, trace, *hf_backward(hf_model, prompt_ids, None))
    print("next-token loss gradient max abs diffs:", {k: f"{v:.2e}" for k, v in diffs.items()})


@pytest.mark.parametrize("position", [7, -1])
def test_gradients_of_chosen_target_equal_transformers(loaded, hf_model, prompt_ids, position):
    # Reference: -log_softmax(transformers logits[position])[token], backward on its model.
    target = Target(loaded.tokenizer.encode(" cat")[0], position)
    trace = run_trace(loaded.model, prompt_ids, backward=True, target=target)
    pos = position % len(prompt_ids)
    assert trace.loss_description == f"cross-entropy of token {target.token_id} at position {pos}"
    diffs = compare_gradients(loaded, trace, *hf_backward(hf_model, prompt_ids, target))
    # Positions after the target's do not influence the loss.
    if pos < len(prompt_ids) - 1:
        assert trace[GRAD + "blocks.0.hook_resid_pre"][pos + 1 :].abs().max() == 0
    print(f"target at {position} gradient max abs diffs:", {k: f"{v:.2e}" for k, v in diffs.items()})


def test_backward_trace_leaves_no_grad_on_engine_parameters(loaded, prompt_ids):
    for target in (None, Target(5, 3)):
        run_trace(loaded.model, prompt_ids, backward=True, target=target)
        with_grad = [n for n, p in loaded.model.named_parameters() if p.grad is not None]
        assert with_grad == [], f"run_trace left .grad on {with_grad}"
