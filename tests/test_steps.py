"""The worked example's steps (model/steps.py): every cell's written-out arithmetic,
recomputed from its operands in plain Python, must equal the engine's tensor; the steps
follow the article's order; trained weights go through the same steps."""

import math

import numpy as np
import pytest
import torch

from glassbox.model.engine import GRAD, Target, run_trace
from glassbox.model.io.checkpoint import load
from glassbox.model.worked_example.article import published
from glassbox.model.worked_example.steps import stages, worked_example_steps
from glassbox.model.worked_example.training import train_copy, training_batch


@pytest.fixture(scope="module")
def loaded():
    return load("worked-example")


@pytest.fixture(scope="module")
def steps(loaded):
    article = published()
    return worked_example_steps(
        loaded.model,
        loaded.tokenizer,
        article,
        lambda w: "printed by the article" if w in article["given_weights"] else "reconstructed",
    )


def test_forward_then_backward_then_update_in_the_articles_order(steps):
    keys = [s.key for s in steps]
    forward = ["tokens", "embedding", "positions"] + [
        f"b1-{k}"
        for k in (
            "layernorm1",
            "qkv",
            "scores",
            "mask",
            "softmax",
            "weighted-values",
            "concat",
            "output-projection",
            "residual1",
            "layernorm2",
            "ffn-expand",
            "relu",
            "ffn-contract",
            "residual2",
        )
    ]
    assert keys[: len(forward)] == forward
    assert keys[len(forward) : len(forward) + 14] == [k.replace("b1-", "b2-") for k in forward[3:]]
    assert keys[31:35] == ["final-layernorm", "logits", "softmax", "loss"]
    backward = [s.key for s in steps if s.phase == "backward"]
    assert backward[:3] == ["grad-logits", "grad-head", "grad-final-layernorm"]
    assert backward.index("grad-b2-ffn-weights") < backward.index("grad-b2-relu") < backward.index("grad-b2-qkv-weights")
    assert backward.index("grad-b2-residual1") < backward.index("grad-b1-ffn-weights")
    assert backward[-2:] == ["grad-positions", "grad-embedding"] and keys[-1] == "update"
    assert len(set(keys)) == len(keys)
    assert {s.stage for s in steps} <= {stage for stage, _ in stages(2)}


def test_every_cells_arithmetic_gives_the_engines_value(steps):
    """Reference: the engine's tensors (torch); the explanations recompute each cell with
    math.fsum from the operands they print. Tolerance 1e-12 (float64)."""
    checked = 0
    for step in steps:
        for panel in step.panels:
            for grid in panel.outputs:
                assert grid.explain is not None, (step.key, grid.label)
                for r in range(grid.shape[0]):
                    for c in range(grid.shape[1]):
                        arithmetic = grid.explain(r, c)
                        value = grid.values[r, c]
                        if math.isinf(value):
                            assert arithmetic.value == value
                        else:
                            assert arithmetic.value == pytest.approx(value, abs=1e-12), (step.key, grid.label, r, c)
                        assert arithmetic.lines
                        checked += 1
    assert checked > 1000


def test_the_loss_step_shows_minus_log_p_mat(steps, loaded):
    loss = next(s for s in steps if s.key == "loss").panels[0].outputs[0]
    trace = run_trace(loaded.model, published()["config"]["input_ids"], names=["hook_probs"])
    assert loss.values[0, 0] == pytest.approx(-math.log(trace["hook_probs"][-1, 5].item()), abs=1e-12)
    assert f"{loss.values[0, 0]:.3f}" == "1.768"  # the article's loss


def test_masked_cells_and_dead_neurons_are_marked_as_changed(steps):
    mask = next(s for s in steps if s.key == "b1-mask").panels[0].outputs[0]
    assert (mask.changed == np.triu(np.ones((5, 5), bool), 1)).all()
    relu = next(s for s in steps if s.key == "grad-b2-relu").panels[0]
    dh, pre = relu.outputs[0], relu.inputs[1]
    assert (dh.values[pre.values <= 0] == 0).all()
    assert dh.changed.any() and not dh.changed.all()


def test_printed_figures_sit_beside_the_computed_ones(steps):
    grids = {g.label: g for s in steps if s.phase != "update" for p in s.panels for g in p.outputs + p.inputs}
    article = published()
    for label in article["published_figures"]:
        grid = grids[label]
        assert grid.printed is not None
        assert np.nanmax(np.abs(grid.values - grid.printed)) <= 0.01
    assert grids["W_E"].provenance == "printed by the article"
    assert grids["W_1(1)"].provenance == "reconstructed"


def test_update_equals_a_torch_sgd_step(loaded, steps):
    """Reference: torch.optim.SGD (lr 0.5) on a copy; the update step's W_new must match it."""
    config = published()["config"]
    inputs, targets = training_batch(loaded.tokenizer, config["input_ids"], config["target_id"], "the example")
    run = train_copy(loaded.model, inputs, targets, config["input_ids"], config["target_id"], "SGD", 0.5, 1)
    update = next(s for s in steps if s.key == "update")
    new = {p.label: p.outputs[0].values for p in update.panels}
    assert np.allclose(new["W_E"], run.model.embed.W_E.detach().cpu().numpy(), atol=1e-14)
    assert np.allclose(new["W_2(2)"], run.model.blocks[1].mlp.W_out.detach().cpu().numpy(), atol=1e-14)


def test_trained_weights_go_through_the_same_steps(loaded):
    config = published()["config"]
    inputs, targets = training_batch(loaded.tokenizer, config["input_ids"], config["target_id"], "the example + corpus")
    run = train_copy(loaded.model, inputs, targets, config["input_ids"], config["target_id"], "AdamW", 0.01, 20)
    steps = worked_example_steps(run.model, loaded.tokenizer, published(), lambda w: "trained")
    loss = next(s for s in steps if s.key == "loss").panels[0].outputs[0].values[0, 0]
    trace = run_trace(run.model, config["input_ids"], backward=True, target=Target(config["target_id"]))
    assert loss == pytest.approx(trace.loss, abs=1e-12)
    embedding = next(s for s in steps if s.key == "grad-embedding").panels[0].outputs[-1]
    assert np.allclose(embedding.values, trace[GRAD + "embed.W_E"].cpu().numpy(), atol=1e-14)
    assert all(g.printed is None for s in steps for p in s.panels for g in p.outputs)  # no article figures


def test_a_one_row_grid_is_written_with_its_rows_own_index(steps):
    """A grid of the last position's row (labelled "4 the") writes its cells with that position,
    as the row label reads (logits_{4,2}, not logits_{0,2}); a bias, one row labelled "—", with
    its column alone (b_{2}). Reference: each grid's own row label."""
    seen = set()
    for step in steps:
        for panel in step.panels:
            for grid in panel.outputs:
                if grid.explain is None or grid.shape[0] != 1 or grid.rows[0] not in ("4 the", "—"):
                    continue
                text = " ".join(grid.explain(0, grid.shape[1] - 1).lines)
                name = grid.label.replace("dL/d", "").replace("_", r"\_")
                assert "_{0," not in text, (step.key, text)
                position = grid.rows[0].split()[0] if grid.rows[0] != "—" else None
                expected = f"_{{{position},{grid.shape[1] - 1}}}" if position else f"_{{{grid.shape[1] - 1}}}"
                assert name + "}" + expected in text, (step.key, grid.label, text)
                seen.add(grid.rows[0])
    assert seen == {"4 the", "—"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_the_written_out_sgd_step_equals_torch_sgd_on_cuda(loaded):
    """train_copy writes plain SGD out (W − η ∂L/∂W, so the worked example's first open does not
    import torch._dynamo). Reference: torch.optim.SGD (lr 0.5) on the same CUDA copy, norms held,
    three steps; every weight within 1e-12 (float64)."""
    import copy

    from glassbox.model.engine.names import is_norm_parameter

    config = published()["config"]
    inputs, targets = training_batch(loaded.tokenizer, config["input_ids"], config["target_id"], "the example")
    model = copy.deepcopy(loaded.model).to("cuda")
    run = train_copy(model, inputs, targets, config["input_ids"], config["target_id"], "SGD", 0.5, 3)
    reference = copy.deepcopy(model).train()
    for name, p in reference.named_parameters():
        p.requires_grad_(not is_norm_parameter(name))
    optimizer = torch.optim.SGD([p for p in reference.parameters() if p.requires_grad], lr=0.5)
    for _ in range(3):
        optimizer.zero_grad(set_to_none=True)
        reference(inputs.cuda(), targets.cuda()).loss.backward()
        optimizer.step()
    assert next(run.model.parameters()).is_cuda
    for ours, theirs in zip(run.model.parameters(), reference.parameters()):
        assert (ours - theirs).abs().max().item() <= 1e-12
