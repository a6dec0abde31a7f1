"""Reconstructing the weights the article does not print: fitted, printed weights held
fixed, so that the figures the article prints for them come out (``glassbox
build-worked-example`` writes the result to assets/worked-example)."""

from __future__ import annotations

from pathlib import Path

import torch

from glassbox.model.engine import Target, Transformer, loss_targets
from glassbox.model.engine.capture import capture
from glassbox.model.engine.names import is_norm_parameter
from glassbox.model.io.checkpoint import save
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.worked_example.article import FIGURES, PROMPT, config, engine_slot, printed_figure, published

SOLVER_SEED = 0


def figure_errors(model: Transformer, article: dict) -> dict[str, torch.Tensor]:
    """Computed minus printed, for every published figure; differentiable w.r.t. the weights
    (the solver minimises these). The loss is -log p(target) at the last position."""
    ids = torch.tensor([article["config"]["input_ids"]])
    targets, _ = loss_targets(ids, Target(article["config"]["target_id"]), model.cfg.vocab_size)
    with capture() as recorder:
        loss = model(ids, targets).loss
    tensors = dict(recorder.tensors)
    params = dict(model.named_parameters())
    wanted = sorted({name[len("grad:") :] for name, _ in FIGURES.values() if name.startswith("grad:")})
    inputs = [tensors[n] if n in tensors else params[n] for n in wanted]
    grads = torch.autograd.grad(loss, inputs, create_graph=True)
    tensors.update({"grad:" + n: g for n, g in zip(wanted, grads)})
    errors = {}
    for figure, value in article["published_figures"].items():
        name, head = FIGURES[figure]
        computed = tensors[name]
        if "hook_" in name:
            computed = computed[0]  # activations carry the batch dimension, weights do not
        if head is not None:
            computed = computed[head]
        row, printed = printed_figure(value)
        errors[figure] = (computed if row is None else computed[row]) - printed
    return errors


def _printed_slots(model: Transformer, article: dict) -> dict[str, torch.Tensor]:
    """Boolean masks, per parameter, of the entries the article prints (kept fixed)."""
    params = dict(model.named_parameters())
    fixed = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in params.items()}
    for name in fixed:
        if is_norm_parameter(name):  # LayerNorm: gamma = 1, beta = 0 by the article's convention
            fixed[name][:] = True
    for article_name in article["given_weights"]:
        name, head = engine_slot(article_name)
        fixed[name][slice(None) if head is None else head] = True
    return fixed


def reconstruct(article: dict, seed: int = SOLVER_SEED, log=print) -> Transformer:
    """Fit the unprinted weights so that the published figures come out.

    Printed weights are set exactly and never move; the rest start from a seeded uniform
    draw and minimise the squared difference to every published figure: Adam to get close,
    then L-BFGS to polish. Deterministic for a seed (float64, CPU)."""
    torch.manual_seed(seed)
    model = Transformer(config(article)).to(torch.float64)
    params = dict(model.named_parameters())
    fixed = _printed_slots(model, article)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in params.items():
            if not is_norm_parameter(name):
                param.copy_(torch.rand(param.shape, generator=gen, dtype=torch.float64) * 0.5 - 0.1)
        for article_name, value in article["given_weights"].items():
            name, head = engine_slot(article_name)
            target = params[name] if head is None else params[name][head]
            target.copy_(torch.tensor(value, dtype=torch.float64).reshape(target.shape))
    free = [p for n, p in params.items() if not fixed[n].all()]

    def objective() -> torch.Tensor:
        for p in params.values():
            p.grad = None
        error = torch.cat([e.reshape(-1) for e in figure_errors(model, article).values()])
        total = error.pow(2).sum()
        total.backward()
        for name, p in params.items():
            if p.grad is not None:
                p.grad[fixed[name]] = 0  # printed weights stay as printed
        return total

    adam = torch.optim.Adam(free, lr=0.01)
    for step in range(6000):
        total = objective()
        adam.step()
        if step % 1000 == 0:
            log(f"adam step {step}: squared error {total.item():.6f}")
    lbfgs = torch.optim.LBFGS(free, lr=1, max_iter=50, history_size=50, line_search_fn="strong_wolfe")
    for _ in range(40):
        total = lbfgs.step(objective)
    log(f"l-bfgs: squared error {total.item():.8f}")
    for p in params.values():
        p.grad = None
    return model


def build(path: Path, log=print) -> Transformer:
    """Reconstruct the unprinted weights and write the model to ``path`` (the shipped one: assets/worked-example)."""
    article = published()
    model = reconstruct(article, log=log)
    errors = torch.cat([e.reshape(-1) for e in figure_errors(model, article).values()]).detach().abs()
    about = {
        "source": 'the worked example of "Large Language Models from scratch — Part 2"',
        "sample_prompt": PROMPT,
        "printed_weights": list(article["given_weights"]),
        "reconstructed_weights": (
            f"fitted to the article's {len(errors)} printed figure values by "
            f"`python -m model build-worked-example` (seed {SOLVER_SEED}): largest difference "
            f"{errors.max().item():.4f}, {(errors <= 0.002).double().mean().item():.0%} within 0.002"
        ),
    }
    save(path, model, Tokenizer.from_words(article["config"]["vocab"]), "float64", about)
    return model
