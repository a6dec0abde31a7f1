"""Train it live (model/training.py): trains a copy, never the shared model."""

import math

import pytest
import torch

from glassbox.model.engine import GlassboxError
from glassbox.model.io.checkpoint import load
from glassbox.model.training.schedules import SCHEDULES, learning_rate_at
from glassbox.model.worked_example.article import article_weights, published
from glassbox.model.worked_example.contract import article_json
from glassbox.model.worked_example.training import DATASETS, toy_corpus, train_copy, training_batch


@pytest.fixture(scope="module")
def loaded():
    return load("worked-example")


def batch(loaded, dataset):
    c = published()["config"]
    return (*training_batch(loaded.tokenizer, c["input_ids"], c["target_id"], dataset), c["input_ids"], c["target_id"])


def test_one_sgd_step_is_the_articles_update(loaded):
    """Reference: the JSON contract's W_new = W - 0.5 dL/dW (engine gradients) vs torch.optim.SGD."""
    run = train_copy(loaded.model, *batch(loaded, "the example"), "SGD", 0.5, 1)
    expected = article_json(loaded)
    trained = article_weights(run.model.cfg, dict(run.model.named_parameters()))
    for name, value in trained.items():
        assert torch.allclose(value.cpu(), torch.tensor(expected[name + "_new"], dtype=torch.float64), atol=1e-14), name
    assert run.loss[0] == pytest.approx(expected["loss"], abs=1e-12)


@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("optimizer,lr", [("SGD", 0.5), ("AdamW", 0.01)])
def test_training_raises_p_mat_and_leaves_the_shared_model_alone(loaded, dataset, optimizer, lr):
    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    run = train_copy(loaded.model, *batch(loaded, dataset), optimizer, lr, 150)
    assert len(run.loss) == len(run.p_target) == len(run.target_embedding) == 151
    assert run.loss[-1] < run.loss[0] and run.p_target[-1] > run.p_target[0] + 0.2
    assert run.target_embedding[-1] != run.target_embedding[0]
    for name, p in loaded.model.named_parameters():
        assert torch.equal(p, before[name]) and p.grad is None, name
    for name, p in run.model.named_parameters():  # LayerNorm stays gamma = 1, beta = 0
        if ".ln" in name or name.startswith("ln_final"):
            assert torch.equal(p, before[name]), name


def test_the_corpus_is_in_the_examples_vocabulary(loaded):
    for sentence in toy_corpus():
        assert len(loaded.tokenizer.encode(sentence)) == 6
    inputs, targets, *_ = batch(loaded, "the example + corpus")
    assert inputs.shape == targets.shape == (1 + len(toy_corpus()), 5)


def test_bad_settings_are_clear_errors(loaded):
    args = batch(loaded, "the example")
    with pytest.raises(GlassboxError, match="optimizer"):
        train_copy(loaded.model, *args, "Adagrad", 0.1, 1)
    with pytest.raises(GlassboxError, match="learning rate"):
        train_copy(loaded.model, *args, "SGD", 0.0, 1)
    with pytest.raises(GlassboxError, match="at least one step"):
        train_copy(loaded.model, *args, "SGD", 0.1, 0)
    with pytest.raises(GlassboxError, match="dataset"):
        training_batch(loaded.tokenizer, [0], 5, "everything")


def test_each_step_uses_the_schedules_rate(loaded):
    """Reference: the schedule written out here: 10 warmup steps of peak·(s+1)/10 for 100 steps,
    then peak·(0.1 + 0.9·½(1 + cos(π·(s − 10)/90))); and what the optimizer actually held (1e-12)."""
    peak = 0.02
    expected = [
        peak * (s + 1) / 10 if s < 10 else peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 10) / 90))) for s in range(100)
    ]
    run = train_copy(loaded.model, *batch(loaded, "the example"), "AdamW", peak, 100, schedule="warmup + cosine")
    assert run.learning_rates == pytest.approx(expected, rel=1e-12, abs=0)
    constant = train_copy(loaded.model, *batch(loaded, "the example"), "SGD", 0.3, 5)
    assert constant.learning_rates == [0.3] * 5 and SCHEDULES == ("constant", "warmup + cosine")
    with pytest.raises(GlassboxError, match="schedule"):
        learning_rate_at("step decay", 0, 10, 0.1)


def test_adamw_trains_at_its_own_rate_where_the_articles_rate_makes_it_jump(loaded):
    """Reference: torch's documented AdamW default learning rate, 0.001. On the corpus, 300 steps at
    the article's η = 0.5 send the loss far above where it started; AdamW's own rate lowers it and
    never raises it above its start. (Where the jumping run ends is chaotic: on this project's AMD
    machine it ends below AdamW's own run, elsewhere above; the test does not compare the ends.)"""
    args = batch(loaded, "the example + corpus")
    own = train_copy(loaded.model, *args, "AdamW", None, 300)
    assert own.learning_rate == 0.001
    assert max(own.loss) == own.loss[0] and own.loss[-1] < own.loss[0] - 0.5
    articles = train_copy(loaded.model, *args, "AdamW", 0.5, 300)
    assert max(articles.loss) > 2 * articles.loss[0]


def test_the_default_models_schedule_is_unchanged():
    """Reference: the default model's schedule as train_default.py wrote it before the schedules were
    shared, copied here: bit-identical at every step."""
    from glassbox.model.tools.train_default import LR, STEPS, WARMUP, learning_rate

    def before(step: int) -> float:
        if step < WARMUP:
            return LR * (step + 1) / WARMUP
        t = (step - WARMUP) / max(STEPS - WARMUP, 1)
        return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    assert all(learning_rate(s) == before(s) for s in range(STEPS))
