"""Lessons 6 (the KV cache) and 7 (key figures): parameter counts against transformers' own model
classes, cache sizes against the issue's figures and the engine's cache tensors, the serving sums
by hand."""

import pytest
import torch

from glassbox.model.course.kv_growth import GB, Serving, cache_bytes, course_table, grow, serving_combinations
from glassbox.model.course.real_model_configs import MODEL, MODELS, count, kv_bytes_per_token
from glassbox.model.course.real_model_figures import appendix_slips, figures
from glassbox.model.io.checkpoint import load
from tests.helpers import start


@pytest.mark.parametrize("model", [m for m in MODELS if m.name != "GPT-3 175B"], ids=lambda m: m.name)
def test_parameters_counted_from_the_shapes_equal_transformers_models(model):
    """Reference: transformers builds the model from the same config.json values on the meta device
    (no memory); its parameters summed, tied weights once. Exact."""
    import transformers

    values = {k: v for k, v in model.config.items() if k not in ("model_type", "torch_dtype")}
    config = transformers.AutoConfig.for_model(model.config["model_type"], **values)
    with torch.device("meta"):
        built = transformers.AutoModelForCausalLM.from_config(config)
    assert model.parameters == sum(p.numel() for p in built.parameters())


def test_counts_beside_the_published_ones():
    """Reference: the published counts (GPT-3 175B: within 1%; Pythia's exact counts; Mixtral's
    46.7B in all and 12.9B active, within their rounding to 0.1B)."""
    assert MODEL["GPT-3 175B"].parameters == pytest.approx(175e9, rel=0.01)
    assert MODEL["Pythia-12B"].parameters == 11_846_072_320
    assert MODEL["Mixtral-8x7B"].parameters == pytest.approx(46.7e9, abs=0.05e9)  # printed to 0.1B
    assert MODEL["Mixtral-8x7B"].active_parameters == pytest.approx(12.9e9, abs=0.05e9)
    rows = {r["model"]: r for r in figures()["models"]}
    assert rows["Llama-3-8B"]["flops_per_token"] == 2 * 8_030_261_248
    assert sum(rows["Gemma-3-1B"]["where"].values()) == rows["Gemma-3-1B"]["parameters"]


def test_the_course_cache_sizes():
    """Reference: the issue's figures, computed there by hand: GPT-2 small at 1,024 tokens in fp16
    37,748,736 bytes; GPT-3 at 2,048 9,663,676,416; Llama-3-70B's 8 heads of 128 over 80 layers."""
    rows = {r["model"]: r for r in course_table()}
    assert rows["GPT-2 small"]["bytes"] == 37_748_736 == 36 * 2**20
    assert rows["GPT-3 175B"]["bytes"] == 9_663_676_416
    assert rows["Llama-2-70B"]["bytes"] == 2 * 80 * 4096 * 8 * 128 * 2
    assert rows["Llama-3-70B"]["bytes_as_if_every_head"] == 2 * 80 * 128_000 * 8192 * 2
    assert cache_bytes("Llama-3-70B", 1000, "int8") == 2 * 80 * 1000 * 8 * 128
    assert kv_bytes_per_token(MODEL["Mixtral-8x7B"].shape) == 2 * 32 * 8 * 128 * 2


def test_the_serving_sums():
    """Reference: by hand. Without remedies: 100 users × 2·80·32,768·8,192·2 bytes + 2 bytes per
    weight, against 8 × 80 GB; with all four: 4,096 tokens, 8 heads, 1 byte."""
    weights = 2 * count(MODEL["Llama-3-70B"].shape)[0]
    none = serving_combinations()[0]
    assert none["need_bytes"] == 100 * 2 * 80 * 32_768 * 8192 * 2 + weights
    assert none["times_over"] == pytest.approx(none["need_bytes"] / 640e9) and not none["fits"]
    every = serving_combinations()[-1]
    assert every["per_user_bytes"] == 2 * 80 * 4096 * 8 * 128 * 1 and every["fits"]
    assert every["users_that_fit"] == (640 * GB - weights) // every["per_user_bytes"]
    assert not Serving(gqa=True, int8=True, paged_tokens=4096).result()["weights_placeable"]


def test_generation_grows_the_engines_cache_by_the_formula():
    """Reference: the cache tensors' bytes summed here from the engine's own KVCache after the same
    greedy steps, and 2 × layers × positions × key/value heads × d_head × 4 bytes (float32)."""
    from glassbox.model.engine import KVCache

    loaded = load("default")
    tokens = loaded.encode("the cat sat on the")
    steps = grow(loaded, tokens, 3)
    cfg = loaded.cfg
    assert [s.cached for s in steps] == [len(tokens) + i for i in range(4)] and [s.fed for s in steps] == [5, 1, 1, 1]
    cache, feed = KVCache(cfg.n_layers), tokens
    with torch.no_grad():
        for step in steps:
            loaded.model(torch.tensor([feed]), cache=cache)
            own = sum(t.numel() * t.element_size() for t in cache.keys + cache.values)
            assert step.measured_bytes == own == 2 * cfg.n_layers * cache.length * cfg.n_kv_heads * cfg.d_head * 4
            feed = [step.next_id]
    assert steps[-1].key_shapes[0] == (1, cfg.n_kv_heads, len(tokens) + 3, cfg.d_head)


def test_the_appendix_slips():
    assert {(s["model"], s["printed"], s["configuration"]) for s in appendix_slips()} == {
        ("GPT-2 small", 5025, 50257),
        ("GPT-2 XL", 2048, 1024),
    }


def test_deepseek_v3s_head_widths_beside_the_appendix():
    """Issue 44, item 14: the appendix prints DeepSeek-V3's d_head as 56 (d_model / heads). Reference:
    transformers' own DeepseekV3Config built from the same config.json keys (its qk_head_dim and
    v_head_dim), and the page's sentence."""
    import transformers

    from glassbox.model.course.real_model_configs import DEEPSEEK_V3_ATTENTION
    from glassbox.model.course.real_model_figures import deepseek_d_head

    theirs = transformers.DeepseekV3Config(**{k: v for k, v in DEEPSEEK_V3_ATTENTION.items() if k != "model_type"})
    ours = deepseek_d_head()
    assert (ours["query and key"], ours["value"]) == (theirs.qk_head_dim, theirs.v_head_dim) == (192, 128)
    assert ours["d_model / heads"] == ours["printed"] == theirs.hidden_size // theirs.num_attention_heads
    at = start("course/real_model_figures.py")
    assert "192 for queries and keys (128 + 64 that RoPE rotates) and 128 for values" in " ".join(m.value for m in at.markdown)


def test_both_pages_follow_their_inputs():
    """Reference: the formula written here for the calculator; the generation adds one position's
    keys and values: 2 × 4 layers × 4 heads × 32 × 4 bytes = 4,096 bytes."""
    at = start("course/kv_growth.py")
    before = int(at.metric[0].value.replace(",", ""))
    next(b for b in at.button if b.label == "Generate a token").click().run()
    assert int(at.metric[0].value.replace(",", "")) == before + 2 * 4 * 4 * 32 * 4
    at.selectbox(key="kv_model").set_value("GPT-2 small").run()
    at.number_input(key="kv_tokens").set_value(1024).run()
    assert "37,748,736 bytes" in " ".join(m.value for m in at.markdown)
    at.toggle(key="kv_gqa").set_value(True).run()
    assert at.metric[1].value == f"{2 * 80 * 32_768 * 8 * 128 * 2 / 1e9:,.2f} GB"
    at.switch_page("course/real_model_figures.py").run()
    assert not at.exception
    at.selectbox(key="figures_model").set_value("Mixtral-8x7B").run()
    shown = at.table[0].value
    assert shown.iloc[-1]["parameters"] == f"{MODEL['Mixtral-8x7B'].parameters:,}"
