"""Lesson 5, the training objective: −log p, teacher forcing on the bundled model, and the
learning-rate schedules; each figure against a computation written here."""

import math

import numpy as np
import pytest

from glassbox.model.course import LESSON
from glassbox.model.course.training_objective import PROMPT, loss_of, schedule_curve, teacher_forcing
from glassbox.model.engine import GlassboxError, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import start


@pytest.fixture(scope="module")
def loaded():
    return load("default")


def test_the_loss_of_one_prediction_is_minus_log_p():
    """Reference: math.log (1e-15), and the values a reader can check: log 2 at p = ½, log 10 at 0.1."""
    for p in (1.0, 0.5, 0.1, 0.01, 0.001):
        assert loss_of(p) == pytest.approx(-math.log(p), rel=1e-15, abs=0)
    assert loss_of(0.5) == pytest.approx(0.6931471805599453) and loss_of(0.1) == pytest.approx(2.302585092994046)


def test_teacher_forcing_scores_every_next_true_token_in_one_pass(loaded):
    """Reference: numpy's log-softmax of the model's logits, taken here at the next true token of
    each position (1e-5, float32 model); the targets are the tokenizer's ids shifted by one; the
    mean equals the loss the pass computed (1e-6)."""
    tokens = loaded.encode(PROMPT)
    forced = teacher_forcing(loaded.model, tokens)
    logits = run_trace(loaded.model, tokens, names=["hook_logits"])["hook_logits"].double().numpy()
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    assert [x.input_id for x in forced.positions] == tokens[:-1]
    assert [x.target_id for x in forced.positions] == tokens[1:]
    expected = [-log_probs[i, tokens[i + 1]] for i in range(len(tokens) - 1)]
    assert [x.loss for x in forced.positions] == pytest.approx(expected, abs=1e-5)
    assert [x.p_target for x in forced.positions] == pytest.approx(np.exp(-np.array(expected)), abs=1e-5)
    assert forced.mean == pytest.approx(forced.model_loss, abs=1e-6) == pytest.approx(np.mean(expected), abs=1e-5)


def test_a_text_too_short_or_too_long_is_a_clear_error(loaded):
    with pytest.raises(GlassboxError, match="no next token"):
        teacher_forcing(loaded.model, loaded.encode("the")[:1])
    with pytest.raises(GlassboxError, match="context is 128 tokens"):
        teacher_forcing(loaded.model, loaded.encode("the cat " * 100))


def test_the_schedules_drawn_are_the_formulas():
    """Reference: the schedules written out here; warmup + cosine as the default model was trained
    (100 warmup steps up to 0.003, then down to a tenth over 5,000 steps)."""
    assert schedule_curve("constant", 50, 0.01, 5, 0.1) == [0.01] * 50
    curve = schedule_curve("warmup + cosine", 5000, 3e-3, 100, 0.1)
    assert curve[0] == pytest.approx(3e-5) and curve[99] == pytest.approx(3e-3) and curve[100] == pytest.approx(3e-3)
    assert curve[2550] == pytest.approx(3e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 2450 / 4900))))
    assert curve[-1] == pytest.approx(3e-4, rel=1e-5)  # the floor, a tenth of the peak, at the last step


def test_the_figures_command_prints_the_same_numbers(loaded):
    figures = LESSON["objective"].figures(loaded)
    assert figures["loss_at_p"][1] == {"p": 0.5, "loss": pytest.approx(math.log(2))}
    table = figures["teacher_forcing"]
    assert table["mean_loss"] == pytest.approx(table["model_loss"], abs=1e-6)
    assert [row["target"] for row in table["positions"]] == [loaded.pieces[t] for t in loaded.encode(PROMPT)[1:]]


def test_the_page_follows_the_slider_and_the_text():
    """Reference: −log p computed here for the slider's p; the text's table has one row per
    predicted position (the tokenizer's count − 1)."""
    at = start("course/training_objective.py")
    assert float(at.metric[0].value) == pytest.approx(-math.log(0.25), abs=5e-5)
    at.slider(key="objective_p").set_value(0.05).run()
    assert float(at.metric[0].value) == pytest.approx(-math.log(0.05), abs=5e-5)
    at.text_input(key="objective_prompt").set_value("Tom had a red ball").run()
    assert not at.exception and not at.error
    rows = at.dataframe[0].value
    assert len(rows) == len(load("default").encode("Tom had a red ball")) - 1
    at.text_input(key="objective_prompt").set_value("").run()
    assert "empty" in at.error[0].value
