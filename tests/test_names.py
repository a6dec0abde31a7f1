"""The registry of names (model/engine/names.py) against what the engine actually produces,
what the README says, and what the code types by hand; and the packages' import direction.

Reference: real traces of every kind of model the engine builds (their names, order and
shapes), the model's own named_parameters(), the README's text and the source files."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import torch

from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, build_model, names, run_seq2seq_trace, run_trace
from glassbox.model.io.checkpoint import load

ROOT = Path(__file__).resolve().parent.parent

CONFIGS = {
    "gpt2-like": ModelConfig(vocab_size=20, n_ctx=16, d_model=12, n_layers=2, n_heads=3, d_ff=24),
    "llama-like": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=16,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=24,
        norm="rmsnorm",
        activation="silu",
        gated_mlp=True,
        positional="rope",
        attn_bias=False,
        mlp_bias=False,
        tie_embeddings=False,
    ),
    "gated with biases, multi-query, no final norm": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=8,
        n_layers=3,
        n_heads=4,
        n_kv_heads=1,
        d_ff=16,
        activation="relu",
        gated_mlp=True,
        final_norm=False,
    ),
    "rmsnorm with a positional table": ModelConfig(
        vocab_size=20, n_ctx=16, d_model=8, n_layers=1, n_heads=2, d_ff=16, norm="rmsnorm"
    ),
    "neox-like: parallel, partial rotary": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=16,
        n_layers=2,
        n_heads=4,
        d_ff=24,
        positional="rope",
        rotary_dim=2,
        parallel_block=True,
        tie_embeddings=False,
    ),
    "gemma-like: post norms, QK-norm, soft-caps, windows": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=16,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_head=6,
        d_ff=24,
        norm="rmsnorm",
        gated_mlp=True,
        positional="rope",
        attn_bias=False,
        mlp_bias=False,
        qk_norm=True,
        post_norms=True,
        attn_softcap=5.0,
        final_softcap=3.0,
        window=3,
        local_layers=[0],
        local_rope_base=100.0,
        embed_scale=4.0,
    ),
    "layernorm QK-norm and post norms, output bias only": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=8,
        n_layers=1,
        n_heads=2,
        d_ff=16,
        positional="rope",
        qk_norm=True,
        post_norms=True,
        attn_bias=False,
        attn_out_bias=True,
    ),
    "attention-only, post norms (a micro-model's blocks)": ModelConfig(
        vocab_size=20, n_ctx=16, d_model=8, n_layers=2, n_heads=2, d_ff=16, attn_only=True, post_norms=True
    ),
    "mixture of experts: a gated shared expert, a dense block, raw top-2 weights": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=16,
        n_layers=3,
        n_heads=4,
        n_kv_heads=2,
        d_ff=24,
        norm="rmsnorm",
        activation="silu",
        gated_mlp=True,
        positional="rope",
        mlp_bias=False,
        tie_embeddings=False,
        n_experts=4,
        norm_top_k=False,
        d_ff_expert=10,
        d_ff_shared=12,
        shared_expert_gate=True,
        moe_layers=[0, 2],
    ),
    "olmoe-like: full-width QK-norm, clipped q/k/v, ungated experts, a LayerNorm": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=12,
        n_layers=2,
        n_heads=3,
        d_ff=8,
        mlp_bias=False,
        qk_norm=True,
        qk_norm_width="full",
        clip_qkv=0.5,
        n_experts=5,
        experts_top_k=3,
        d_ff_shared=6,
    ),
    "bert-like: an encoder, post-norm, token types, embedding norm, MLM head with an output bias": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=8,
        n_layers=2,
        n_heads=2,
        d_ff=16,
        activation="gelu",
        final_norm=False,
        causal=False,
        norm_position="post",
        n_token_types=2,
        embed_norm=True,
        mlm_head=True,
        unembed_bias=True,
    ),
    "zero layers, no positions, untied (the bigram micro-model)": ModelConfig(
        vocab_size=20,
        n_ctx=16,
        d_model=8,
        n_layers=0,
        n_heads=2,
        d_ff=16,
        positional="none",
        final_norm=False,
        tie_embeddings=False,
    ),
}
TOKENS = [3, 1, 4, 1, 5, 9, 2]


@pytest.fixture(params=list(CONFIGS) + ["worked-example"])
def model(request, random_model):
    return load("worked-example").model if request.param == "worked-example" else random_model(CONFIGS[request.param])


def test_a_full_trace_holds_exactly_the_registered_names_in_order_and_shape(model):
    trace = run_trace(model, TOKENS[:5], backward=True)
    assert list(trace.activations) == names.activation_names(model.cfg)
    for name, tensor in trace.activations.items():
        assert tuple(tensor.shape) == names.shape(name, model.cfg, 5), name
    for name, grad in trace.grads.items():  # a gradient has its tensor's axes
        assert tuple(grad.shape) == names.shape(name, model.cfg, 5), name


def test_the_parameters_are_exactly_the_registered_ones(model):
    params = list(model.named_parameters())
    assert [n for n, _ in params] == names.parameter_names(model.cfg)
    for name, p in params:
        assert tuple(p.shape) == names.shape(name, model.cfg, 5), name
    norms = {n for n, _ in params if names.is_norm_parameter(n)}
    assert norms == {
        n
        for n, _ in params
        if re.search(r"(^|\.)(ln1|ln2|ln1_post|ln2_post|ln_cross|ln_final|ln_embed|[qk]_norm|[qk]_norm_full|mlm\.ln)\.", n)
    }


# an encoder-decoder with the switches T5 has off: LayerNorms, biases on every attention (the
# cross-attention's too), learned positions in each stack, an encoder deeper than its decoder
ENCODER_DECODER = ModelConfig(
    vocab_size=20,
    n_ctx=16,
    d_model=8,
    n_layers=3,
    n_decoder_layers=2,
    n_heads=2,
    d_ff=16,
    encoder_decoder=True,
    tie_embeddings=False,
    decoder_start_token_id=0,
)


@pytest.mark.parametrize(
    "cfg",
    [
        ENCODER_DECODER,
        dataclasses.replace(
            ENCODER_DECODER,
            norm="rmsnorm",
            positional="relative",
            attn_bias=False,
            mlp_bias=False,
            gated_mlp=True,
            tie_embeddings=True,
            head_scale=0.5,
        ),
    ],
    ids=["layernorm, biases, learned positions", "t5-like"],
)
def test_an_encoder_decoder_trace_holds_exactly_the_registered_names_in_order_and_shape(cfg):
    """As the test above, for an encoder-decoder traced with run_seq2seq_trace: its names and
    shapes (source length 5, target length 3), its parameters'."""
    model = build_model(cfg).init_weights(0, std=0.3).double()
    trace = run_seq2seq_trace(model, TOKENS[:5], TOKENS[:3], backward=True)
    assert list(trace.activations) == names.activation_names(cfg)
    for name, tensor in [*trace.activations.items(), *trace.grads.items()]:
        assert tuple(tensor.shape) == names.shape(name, cfg, 3, 5), name
    params = list(model.named_parameters())
    assert [n for n, _ in params] == names.parameter_names(cfg)
    assert {GRAD + n for n, _ in params} <= set(trace.grads)
    for name, p in params:
        assert tuple(p.shape) == names.shape(name, cfg, 3, 5), name


def test_unknown_names_are_refused():
    for bad in (
        "blocks.0.attn.hook_scores_maskd",
        "hook_logit",
        "blocks.x.hook_resid_pre",
        "embed.W_U",
        "encoder.hook_logits",
        "decoder.embed.W_E",
        "encoder.encoder.hook_out",
    ):
        with pytest.raises(KeyError):
            names.lookup(bad)
    assert names.axes(GRAD + "blocks.3.attn.hook_k") == ("kv_head", "position", "d_head")


def test_the_documented_table_is_the_registry():
    """docs/engine.md's table of names is `glassbox hooks --markdown`, character for character."""
    assert names.markdown_table() in (ROOT / "docs" / "engine.md").read_text()


# Words that are not Glassbox's names: SAELens's config keys, and TransformerLens's hook_mlp_in (a
# copy of resid_mid), which model/io/sae.py reads and maps (tests/test_features.py checks the map).
FOREIGN_KEYS = {"hook_name", "hook_name_out", "hook_point", "hook_head_index", "hook_mlp_in", "hook_point_in", "hook_point_out"}


def test_every_hook_name_typed_in_the_code_is_registered():
    """Names are typed by hand across the code (views, analysis, the lesson): a misspelt one
    would fail only when that view opens. Every `hook_…` word in the source must be a
    registered hook."""
    known = names.registered_hooks()
    typed = {}
    for path in [*ROOT.glob("model/**/*.py"), *ROOT.glob("app/**/*.py")]:
        for word in re.findall(r"\bhook_[a-z_]+", path.read_text()):
            typed.setdefault(word, path.relative_to(ROOT))
    unknown = {w: str(p) for w, p in typed.items() if w not in known and w != "hook_" and w not in FOREIGN_KEYS}
    assert not unknown
    assert len(typed) > 20  # the scan sees the code


# What each part of `model` may import from the others (it may always import itself).
ALLOWED = {
    "engine": set(),
    "io": {"engine"},
    "data": set(),
    "analysis": {"engine"},
    "plot": {"engine"},  # figures of a trace's tensors (Trace.figure, the app's heatmaps)
    "serving": {"engine", "io"},
    "training": {"engine"},  # the learning-rate schedules every training loop shares
    "worked_example": {"engine", "io", "analysis", "training"},  # a cell's Arithmetic (analysis/arithmetic.py)
    "micro": {"engine", "io", "data", "analysis", "training"},  # the micro-models' training and figures
    "course": {"engine", "io", "data", "analysis", "training", "micro"},  # the mlp and residual lessons' ablation, DLA, lens
    "tools": {"engine", "io", "data", "analysis", "serving", "training", "worked_example", "course", "micro"},
    "lab": {"engine", "io", "data", "analysis", "training", "micro", "tools"},  # the lab trains micro-models and SAEs
    "api": {
        "engine",
        "io",
        "data",
        "analysis",
        "plot",
        "serving",
        "training",
        "worked_example",
        "course",
        "micro",
        "tools",
        "lab",
    },  # `import glassbox`
}


def imports(path: Path) -> set[str]:
    """The modules a file imports, named by the repository's folders: ``glassbox.model.engine``
    (as installed, pyproject.toml) is ``model.engine``; ``glassbox`` alone is ``model.api``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {folder_name(m) for m in found}


def folder_name(module: str) -> str:
    """``glassbox.model.engine`` → ``model.engine``; ``glassbox.x`` (model/api/) → ``model.api.x``."""
    parts = module.split(".")
    if parts[0] != "glassbox":
        return module
    return ".".join(parts[1:] if parts[1:2] in (["model"], ["app"], ["assets"]) else ["model", "api", *parts[1:]])


def test_the_import_direction():
    """The engine imports nothing from the rest of Glassbox; nothing in `model` imports the app, but
    `import glassbox` (model/api) the notebook widgets (app/notebook/), when they are asked for."""
    checked = 0
    assert "model.engine" in imports(ROOT / "model" / "io" / "checkpoint.py")  # the installed names are read
    for part, allowed in ALLOWED.items():
        for path in (ROOT / "model" / part).rglob("*.py"):
            for module in imports(path):
                top = module.split(".")
                # the one exception: `import glassbox` offers the notebook widgets (a UI, app/notebook/),
                # imported inside the methods that draw them; the engine and the analyses never see it
                if part == "api" and module == "app.notebook":
                    continue
                assert top[0] != "app", f"{path.relative_to(ROOT)} imports {module}"
                if top[0] == "model" and len(top) > 1:
                    assert top[1] in allowed | {part}, f"{path.relative_to(ROOT)} imports {module}"
            checked += 1
    assert checked > 30


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_two_modules_import_each_other():
    """No import cycle among model's and app's modules, counting imports inside functions (a lazy
    import that closes a circle still ties the two files together). A package's __init__ that
    re-exports its own modules is the exception: those modules are under it."""
    graph = {}
    for path in [*(ROOT / "model").rglob("*.py"), *(ROOT / "app").rglob("*.py")]:
        name = module_of(path)
        graph[name] = set()
        for module in imports(path):
            for target in (module, module.rsplit(".", 1)[0]):  # `from a.b import c`: a.b.c or a.b
                if target.split(".")[0] in ("model", "app") and not name.startswith(target + "."):
                    graph[name].add(target)
                    break
    graph = {
        name: {t for t in targets if t in graph and t != name and not t.startswith(name + ".")} for name, targets in graph.items()
    }
    cycles = []

    def visit(node, path, done):
        for nxt in graph[node]:
            if nxt in path:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                done.add(nxt)
                visit(nxt, path + [nxt], done)

    for start in graph:
        visit(start, [start], {start})
    assert not cycles, sorted({" → ".join(c) for c in cycles})[:10]


def test_every_package_folder_is_installed_under_glassbox():
    """pyproject.toml lists the packages by hand (its package-dir maps model/ to glassbox.model,
    app/ to glassbox.app, assets/ to glassbox.assets, model/api/ to glassbox): every folder with
    an __init__.py is listed, under its installed name, and nothing else is; model/api is
    glassbox itself, not also glassbox.model.api."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["package-dir"] == {
        "glassbox": "model/api",
        "glassbox.model": "model",
        "glassbox.app": "app",
        "glassbox.assets": "assets",
    }

    def installed(folder):
        """model/api/X is glassbox.X (model/api/cli: glassbox.cli), any other folder glassbox.FOLDER."""
        parts = folder.relative_to(ROOT).parts
        return ".".join(["glassbox", *(parts[2:] if parts[:2] == ("model", "api") else parts)])

    folders = {installed(p.parent) for top in ("model", "app", "assets") for p in (ROOT / top).rglob("__init__.py")}
    # app/bench (the Playwright benchmarks) stays in the checkout: not in the wheel
    assert set(setup["packages"]) == folders - {"glassbox.app.bench"}


def test_one_dtype_table():
    """engine/device.py's DTYPES is the table; the catalog's byte sizes (kept torch-free for
    `glassbox models`) are its sizes."""
    from glassbox.model.engine.device import DTYPES
    from glassbox.model.io.catalog import BYTES

    assert all(BYTES[name] == DTYPES[name].itemsize for name in BYTES)


def test_a_shape_has_a_length_for_every_axis_or_says_which_it_lacks():
    """Reference: the config's own sizes (H = 2 heads); a dense model has no expert axis, and a
    cross-attention's source length is given apart (n_source)."""
    cfg = ModelConfig(vocab_size=8, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_ff=16)
    assert names.shape("decoder.blocks.0.cross_attn.hook_pattern", cfg, 3, n_source=5) == (2, 3, 5)
    with pytest.raises(ValueError, match="'source' axis: give n_source"):
        names.shape("decoder.blocks.0.cross_attn.hook_pattern", cfg, 3)
    with pytest.raises(ValueError, match="'expert' axis: this model has none"):
        names.shape("blocks.0.mlp.hook_router_logits", cfg, 3)


def test_an_encoder_decoder_pass_without_its_source_is_refused_in_words():
    """An encoder-decoder reads the source tokens or the encoder's output (encoded=); with neither,
    a GlassboxError says so (it was an AttributeError on None)."""
    model = build_model(ENCODER_DECODER).init_weights(0)
    with pytest.raises(GlassboxError, match="reads the source tokens or the encoder's output"):
        model(None, torch.tensor([TOKENS[:3]]))


MAX_LINES = 600  # the layout's rule: a file longer than this holds more than one reason to change


def test_no_source_file_in_model_or_app_is_over_600_lines():
    """Reference: the files themselves, counted here (``ruff format`` applied: .ci/run checks it)."""
    lengths = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for p in [*ROOT.glob("model/**/*.py"), *ROOT.glob("app/**/*.py")]
    }
    assert len(lengths) > 200  # the scan sees the code
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}
