"""`import glassbox as gb` (model/api/): one object for a loaded model's traces, edits,
generation and analyses, and one name builder. References: torch's own cross-entropy on the
module's logits (the loss), the engine's functions called directly with token ids (the
wrappers: exactly), a copy of the model whose weights do what an edit does (1e-12, float64),
TransformerLens's short names as its documentation gives them (the name builder), and a
process started in a folder that holds a nanoGPT-style model.py (the import from anywhere)."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import glassbox as gb
from glassbox.model.analysis.attribution import attribute
from glassbox.model.analysis.dla import direct_logit_attribution
from glassbox.model.engine import run_trace

PROMPT = "Zoe had a frog. Zoe loved the"


@pytest.fixture(scope="module")
def default():
    return gb.load("default")


def test_a_trace_by_prompt_is_the_engines_and_its_loss_is_torchs(default):
    trace = default.trace(PROMPT, backward=True)
    ids = default.tokens(PROMPT)
    assert trace.tokens == ids
    reference = run_trace(default.module, ids, backward=True)
    for name in ("blocks.1.attn.hook_pattern", "hook_logits", "grad:blocks.0.hook_resid_pre", "grad:embed.W_E"):
        assert torch.equal(trace[name], reference[name]), name
    with torch.no_grad():
        logits = default.module(torch.tensor([ids])).logits[0]
    assert trace.loss == pytest.approx(F.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item(), rel=1e-6)
    one = default.trace(PROMPT, backward=True, target=" frog")  # −log p(" frog") at the last position
    p = torch.softmax(logits[-1].double(), -1)[default.token_id(" frog")].item()
    assert one.loss == pytest.approx(-np.log(p), rel=1e-5)


@pytest.mark.parametrize(
    "short, block, norm, full",
    [
        ("pattern", 1, None, "blocks.1.attn.hook_pattern"),
        ("attn_scores", 0, None, "blocks.0.attn.hook_scores"),
        ("q", 2, None, "blocks.2.attn.hook_q"),
        ("z", 0, None, "blocks.0.attn.hook_z"),
        ("result", 3, None, "blocks.3.attn.hook_result"),
        ("resid_pre", 0, None, "blocks.0.hook_resid_pre"),
        ("resid_mid", 1, None, "blocks.1.hook_resid_mid"),
        ("resid_post", 3, None, "blocks.3.hook_resid_post"),
        ("attn_out", 2, None, "blocks.2.hook_attn_out"),
        ("mlp_out", 2, None, "blocks.2.hook_mlp_out"),
        ("pre", 1, None, "blocks.1.mlp.hook_pre"),
        ("post", 1, None, "blocks.1.mlp.hook_post"),
        ("scale", 0, "ln1", "blocks.0.ln1.hook_scale"),
        ("normalized", 2, "ln2", "blocks.2.ln2.hook_normalized"),
        ("scale", None, "ln_final", "ln_final.hook_scale"),
        ("embed", None, None, "hook_embed"),
        ("pos_embed", None, None, "hook_pos_embed"),
        ("attn.hook_scores_masked", 0, None, "blocks.0.attn.hook_scores_masked"),  # Glassbox's own tail
    ],
)
def test_the_name_builder_takes_transformer_lens_short_names(default, short, block, norm, full):
    assert gb.name(short, block=block, norm=norm) == full
    assert full in default.trace(PROMPT).names()  # a name the engine really computes


def test_the_name_builder_says_what_is_wrong():
    with pytest.raises(gb.GlassboxError, match="say which block"):
        gb.name("pattern")
    with pytest.raises(gb.GlassboxError, match="No tensor is named 'blocks.0.hook_patern'"):
        gb.name("patern", block=0)
    with pytest.raises(gb.GlassboxError, match="norm must be one of"):
        gb.name("scale", block=0, norm="ln3")


def test_an_edit_composes_with_a_trace_and_with_patching(default):
    """The model's own float32 weights in float64, head 2 of block 0 zeroed by the edit; the
    reference zeroes its W_O rows in a copy."""
    model = gb.load("default", dtype="float64")
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.module.blocks[0].attn.W_O[2].zero_()

    seen = []

    def zero_head(z):  # one sequence's z, as the trace holds it: head × position × d_head
        seen.append(z.shape)
        out = z.clone()
        out[2] = 0
        return out

    with model.edit({gb.name("z", block=0): zero_head}):
        edited = model.trace(PROMPT, backward=True)
        patched = model.patch(PROMPT, "Zoe had a boat. Zoe loved the", " frog", " boat")
        attributed = model.attribute(PROMPT, " frog", method="integrated_gradients", steps=4)  # 4 sequences a pass
    assert seen[0] == edited["blocks.0.attn.hook_z"].shape and len(seen) > 4
    reference = twin.trace(PROMPT, backward=True)
    for name in ("hook_logits", "blocks.3.hook_resid_post", "grad:blocks.1.attn.W_Q"):
        assert torch.allclose(edited[name], reference[name], rtol=1e-12, atol=1e-12), name
    twin_patched = twin.patch(PROMPT, "Zoe had a boat. Zoe loved the", " frog", " boat")
    assert np.allclose(patched.metric, twin_patched.metric, rtol=1e-12, atol=1e-12)
    twin_attributed = twin.attribute(PROMPT, " frog", method="integrated_gradients", steps=4)
    assert np.allclose(attributed.scores, twin_attributed.scores, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(model.trace(PROMPT)["hook_logits"], edited["hook_logits"])  # outside: the model as it is


def test_the_analyses_take_text_and_equal_the_engines_functions(default):
    ids, frog = default.tokens(PROMPT), default.token_id(" frog")
    got = default.attribute(PROMPT, " frog", method="integrated_gradients", steps=8)
    want = attribute(default.module, ids, frog, "integrated_gradients", 8)
    assert np.array_equal(got.scores, want.scores)
    got = default.dla(PROMPT, " frog", wrong=" boat")
    want = direct_logit_attribution(default.module, ids, frog, -1, default.token_id(" boat"))
    assert np.array_equal(got.values, want.values)
    tokens = default.generate("Zoe had a", 4, temperature=0)
    assert len(tokens) == 4 and all(t.token_id == int(t.before.argmax()) for t in tokens)  # greedy: the most likely


@pytest.mark.subprocess
def test_import_glassbox_works_from_a_folder_with_its_own_model_py(tmp_path):
    """The Done-when line of issue 28, run in a folder where `model` is someone else's module."""
    (tmp_path / "model.py").write_text("raise ImportError('the user\\'s own model.py was imported')\n")
    (tmp_path / "app.py").write_text("raise ImportError('the user\\'s own app.py was imported')\n")
    code = "import glassbox as gb; t = gb.load('default').trace('Zoe had a frog', backward=True); import model; print(t.loss)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "the user's own model.py was imported" in done.stderr  # theirs, not ours
    done = subprocess.run(
        [sys.executable, "-c", code.replace("import model; ", "")], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(gb.load("default").trace("Zoe had a frog", backward=True).loss, rel=1e-6)


def test_the_readmes_python_example_runs():
    """The README's first Python block (## In Python), run as written; its trace is held to the
    engine's (run_trace on the same ids: exactly)."""
    from tests.helpers import ROOT

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## In Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(compile(block, "README.md", "exec"), scope)
    ids = scope["model"].tokens("Zoe had a frog. Zoe loved the")
    assert torch.equal(scope["trace"]["hook_logits"], run_trace(scope["model"].module, ids, backward=True)["hook_logits"])
    assert scope["edited"]["blocks.0.attn.hook_z"].abs().max() == 0


@pytest.mark.parametrize(
    "kind, block, head, full",
    [
        ("attention", 1, 2, "blocks.1.attn.hook_pattern"),
        ("resid_post", 0, 0, "blocks.0.hook_resid_post"),
        ("blocks.2.attn.hook_z", None, 1, "blocks.2.attn.hook_z"),
        ("hook_logits", None, 0, "hook_logits"),
    ],
)
def test_a_trace_draws_any_tensor_as_the_app_does(default, kind, block, head, full):
    """trace.figure: the app's heatmap (app/components/heatmap.py) of the tensor's own values (a
    head's slice where it has heads), its rows labelled by the prompt's tokens."""
    trace = default.trace(PROMPT)
    figure = trace.figure(kind, block=block, head=head)
    values = trace[full][head] if trace[full].dim() == 3 else trace[full]
    assert np.allclose(np.asarray(figure.data[0].z, dtype=np.float64), values.numpy(), atol=0)
    assert figure.data[0].y[-1].endswith("the") and full in figure.layout.title.text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_the_api_on_cuda_equals_the_cpu():
    """Reference: the same model on the CPU, float64 both (1e-10: the devices' kernels round
    differently); an edit on the GPU is held to the CPU's edit."""
    cpu, gpu = gb.load("default", dtype="float64", device="cpu"), gb.load("default", dtype="float64", device="cuda")
    want, got = cpu.trace(PROMPT, backward=True), gpu.trace(PROMPT, backward=True)
    assert got["hook_logits"].is_cuda
    for name in ("hook_logits", "grad:blocks.0.attn.W_Q", gb.GRAD + gb.name("resid_pre", block=1)):
        assert torch.allclose(got[name].cpu(), want[name], rtol=1e-10, atol=1e-10), name

    def zero_head(z):
        out = z.clone()
        out[1] = 0
        return out

    edits = {gb.name("z", block=2): zero_head}
    with cpu.edit(edits):
        want = cpu.trace(PROMPT)
    with gpu.edit(edits):
        got = gpu.trace(PROMPT)
    assert torch.allclose(got["hook_logits"].cpu(), want["hook_logits"], rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_sparse_autoencoder_features_on_cuda_equal_the_cpus():
    """The shipped default-sae on the default model, float64 on both devices (1e-10): features,
    a feature's logit effect and ablation, and a greedy completion steered by it."""
    cpu, gpu = gb.load("default", dtype="float64", device="cpu"), gb.load("default", dtype="float64", device="cuda")
    sae_cpu, sae_gpu = cpu.sae("default-sae"), gpu.sae("default-sae")
    assert sae_gpu.W_enc.is_cuda and sae_gpu.W_enc.dtype == torch.float64
    want, got = cpu.features(PROMPT, sae_cpu), gpu.features(PROMPT, sae_gpu)
    assert np.array_equal(got.top_ids, want.top_ids) and got.spliced_loss == pytest.approx(want.spliced_loss, abs=1e-10)
    assert np.allclose(got.top_values, want.top_values, atol=1e-10) and np.allclose(got.error_norm, want.error_norm, atol=1e-10)
    feature = int(want.columns[0])
    assert np.allclose(
        gpu.ablate_feature(PROMPT, sae_gpu, feature).ablated, cpu.ablate_feature(PROMPT, sae_cpu, feature).ablated, atol=1e-10
    )
    assert np.allclose(
        gpu.feature_logits(PROMPT, sae_gpu, feature).promoted, cpu.feature_logits(PROMPT, sae_cpu, feature).promoted, atol=1e-10
    )
    steered_gpu, _ = gpu.steer_feature(PROMPT, sae_gpu, feature, 8.0, max_new_tokens=6, temperature=0)
    steered_cpu, _ = cpu.steer_feature(PROMPT, sae_cpu, feature, 8.0, max_new_tokens=6, temperature=0)
    assert [t.token_id for t in steered_gpu] == [t.token_id for t in steered_cpu]


def test_an_encoder_decoders_trace_reads_a_source():
    """micro-seq2seq: trace(target, source=…) is run_seq2seq_trace's (exactly), and its loss is
    torch's mean cross-entropy of its own logits against the target (1e-12, float64)."""
    from glassbox.model.engine import run_seq2seq_trace

    model = gb.load("micro-seq2seq", dtype="float64", device="cpu")
    vocab = model.tokenizer.vocab_size
    source = [(7 * i + 3) % vocab for i in range(6)]
    target = source[::-1]
    trace = model.trace(target, source=source, backward=True)
    reference = run_seq2seq_trace(model.module, source, target, backward=True)
    assert torch.equal(trace["hook_logits"], reference["hook_logits"]) and trace.source == source
    want = torch.nn.functional.cross_entropy(trace["hook_logits"], torch.tensor(target))
    assert trace.loss == pytest.approx(want.item(), abs=1e-12)
    with pytest.raises(gb.GlassboxError, match="takes source="):
        model.trace(target)
    with pytest.raises(gb.GlassboxError, match="source= is for an encoder-decoder"):
        gb.load("default").trace("Zoe had a frog", source="Zoe")
