"""Train it live (model/training.py): trains a copy, never the shared model."""

import pytest
import torch

from model.io.checkpoint import load
from model.engine import GlassboxError
from model.lesson.training import DATASETS, toy_corpus, train_copy, training_batch
from model.lesson.article import article_weights, published
from model.lesson.contract import article_json


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
