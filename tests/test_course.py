"""The course's frame: the registry, `glassbox course`, the pages' links from the welcome page
through every lesson to the worked example, the links views and steps give to lessons; and the
engine's two switches lessons stand on (ModelConfig.causal and variant())."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from glassbox.model.course import LESSON, LESSONS, lessons_for_step, lessons_for_view
from glassbox.model.engine import GlassboxError, ModelConfig, editing, run_trace, variant
from tests.helpers import cli, played, start

CFG = ModelConfig(vocab_size=11, n_ctx=8, d_model=8, n_layers=2, n_heads=2, d_ff=16)
TOKENS = [1, 4, 2, 7, 3]


def test_a_causal_variant_is_the_model_itself_and_shares_its_weights(random_model):
    """Reference: the model's own logits, bit for bit; the same parameter objects (nothing copied)."""
    model = random_model(CFG)
    same = variant(model, causal=True)
    ids = torch.tensor([TOKENS])
    assert torch.equal(same(ids).logits, model(ids).logits)
    assert all(a is b for a, b in zip(same.parameters(), model.parameters()))
    encoder = variant(model, causal=False)
    assert model.cfg.causal and not encoder.cfg.causal  # the shared model is not changed


def test_without_the_mask_every_position_reads_the_later_tokens(random_model):
    """A property that fails on a masked pass: changing the last token changes position 0's logits
    (tolerance: more than 1e-6 apart), while the causal model's position 0 stays bit-identical."""
    model = random_model(CFG)
    ids, changed = torch.tensor([TOKENS]), torch.tensor([TOKENS[:-1] + [9]])
    assert torch.equal(model(ids).logits[0, 0], model(changed).logits[0, 0])
    encoder = variant(model, causal=False)
    assert (encoder(ids).logits[0, 0] - encoder(changed).logits[0, 0]).abs().max() > 1e-6


def test_an_unmasked_pattern_is_the_softmax_of_every_score(random_model):
    """Reference: numpy's softmax of q·kᵀ/√d_head over every key (no mask), from the captured q and
    k; the fused kernel's pass (nothing captured) gives the same logits (1e-12, float64)."""
    encoder = variant(random_model(CFG), causal=False)
    trace = run_trace(
        encoder, TOKENS, names=["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_pattern", "hook_logits"]
    )
    q, k = trace["blocks.0.attn.hook_q"].numpy(), trace["blocks.0.attn.hook_k"].numpy()
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(CFG.d_model // CFG.n_heads)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert np.abs(trace["blocks.0.attn.hook_pattern"].numpy() - expected).max() < 1e-12
    fused = encoder(torch.tensor([TOKENS])).logits[0]
    assert (fused - trace["hook_logits"]).abs().max() < 1e-12


def test_an_unscaled_variant_scores_are_the_bare_dot_products(random_model):
    """Reference: numpy's q·kᵀ from the captured q and k (1e-12): attn_scale=1.0 drops 1/√d_head."""
    bare = variant(random_model(CFG), attn_scale=1.0)
    with torch.no_grad(), editing({}, keep=["blocks.1.attn.*"]) as seen:
        bare(torch.tensor([TOKENS]))
    q, k = seen.tensors["blocks.1.attn.hook_q"][0].numpy(), seen.tensors["blocks.1.attn.hook_k"][0].numpy()
    scores = seen.tensors["blocks.1.attn.hook_scores"][0].numpy()
    assert np.abs(scores - q @ k.transpose(0, 2, 1)).max() < 1e-12


def test_a_variant_changes_only_what_it_may_and_configs_keep_the_switch(random_model):
    with pytest.raises(GlassboxError, match="only causal, attn_scale"):
        variant(random_model(CFG), n_heads=1)
    encoder = dataclasses.replace(CFG, causal=False)
    assert ModelConfig.from_dict(json.loads(json.dumps(encoder.to_dict()))) == encoder
    with pytest.raises(GlassboxError, match="causal must be true or false"):
        ModelConfig.from_dict({**CFG.to_dict(), "causal": "no"})


def test_lessons_are_listed_and_unknown_ones_refused_in_one_line():
    listed = cli("course")
    assert listed.returncode == 0
    for number, lesson in enumerate(LESSONS, 1):
        assert f"{number}. {lesson.slug}" in listed.stdout
    unknown = cli("course", "nope", "--json")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "No lesson 'nope'" in unknown.stderr
    nothing = cli("course", "mask", "--remeasure")
    assert nothing.returncode == 2 and "nothing to remeasure" in nothing.stderr


def links(at) -> list[tuple[str, str]]:
    """Every page link on the page: (label, url path)."""
    return [(link.proto.label, link.proto.page) for link in at.get("page_link")]


def test_a_learner_goes_from_the_welcome_page_through_every_lesson_to_the_worked_example():
    """Follows the links themselves: welcome → the course's contents → lesson 1 → … each lesson's
    "Next lesson" → the last lesson's link to the worked example; every page opens cleanly and
    ends with the worked-example step and explorer view of its lesson."""
    at = start()
    assert ("Or start with the course", "course") in links(at)
    at.switch_page("course/index.py").run()
    assert not at.exception
    assert [page for _, page in links(at)] == [x.url_path for x in LESSONS] + ["worked-example"]
    for number, lesson in enumerate(LESSONS):
        at.switch_page(lesson.page).run()
        assert not at.exception, lesson.slug
        found = links(at)
        assert ("In the worked example, by hand", "worked-example") in found
        following = LESSONS[number + 1].url_path if number + 1 < len(LESSONS) else "worked-example"
        assert any(label.startswith(("Next lesson", "Now the whole pass")) and page == following for label, page in found), (
            lesson.slug,
            found,
        )


def test_views_steps_and_the_drawing_link_to_their_lessons():
    assert lessons_for_view("Attention") == [
        "attention",
        "sqrt-dk",
        "multi-head",
        "mask",
        "kv-cache",
        "efficiency",
        "cross-attention",
    ]
    assert lessons_for_step("b2-mask") == ["mask"]  # the same step in another block
    at = start()  # the drawing's default part is attention
    assert {page for _, page in links(at)} >= {"course-attention", "course-sqrt-dk", "course-mask"}
    at = start("screens/worked_example.py", step="loss")
    assert {"label": "10. The training objective", "href": "course-objective", "page": "course/training_objective.py"} in played(
        at, "loss"
    )["lessons"]


def test_every_lesson_has_figures_in_strict_json():
    """Each lesson's figures on the bundled model: a JSON object, not empty, with no NaN or
    infinity (which strict JSON readers refuse); and one through the command a learner runs."""
    from glassbox.model.io.checkpoint import load

    loaded = load("default")
    for lesson in LESSONS:
        assert json.loads(json.dumps(lesson.figures(loaded), allow_nan=False)), lesson.slug
    out = cli("course", "mask", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout).keys() == LESSON["mask"].figures(loaded).keys()
