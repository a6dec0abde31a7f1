"""Activation patching: which activations carry the difference between a clean and a
corrupted prompt. The corrupted prompt is run again with one site's activation taken from
the clean run; the metric (the logit difference between an answer and a wrong token at the
last position) says how much of the clean behaviour that one site restores.

Sites (the engine's names; ``block`` counts from 0):
- ``resid_pre``: ``blocks.{block}.hook_resid_pre`` at one position;
- ``attn_out`` / ``mlp_out``: ``blocks.{block}.hook_attn_out`` / ``hook_mlp_out``, all positions;
- ``head``: one head's ``blocks.{block}.attn.hook_z`` (its weighted values before W_O), all positions.

Attribution patching estimates the same numbers from one backward pass of the corrupted run:
metric(corrupt) + Σ (clean − corrupt) · ∂metric/∂activation over the patched entries, the
first-order Taylor approximation (Nanda, "Attribution Patching", 2023).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis import batches
from glassbox.model.analysis.architecture import require
from glassbox.model.engine import GlassboxError, Transformer, check_prompt, check_token_id, editing
from glassbox.model.engine.capture import capture

SITES = ("resid_pre", "attn_out", "mlp_out", "head")
SITE_NAMES = {
    "resid_pre": "blocks.{}.hook_resid_pre",
    "attn_out": "blocks.{}.hook_attn_out",
    "mlp_out": "blocks.{}.hook_mlp_out",
    "head": "blocks.{}.attn.hook_z",
}


@dataclass
class Patching:
    """One experiment. ``metric[block, j]``: the logit difference after patching that site, j
    being the position (``resid_pre``), the head (``head``) or 0 (``attn_out``, ``mlp_out``);
    ``estimate``: attribution patching's first-order estimate of the same."""

    site: str
    metric_clean: float
    metric_corrupt: float
    metric: np.ndarray
    estimate: np.ndarray

    @property
    def column(self) -> str | None:
        return {"resid_pre": "position", "head": "head"}.get(self.site)

    def restored(self, values: np.ndarray | None = None) -> np.ndarray:
        """The fraction of the clean run's metric a patch restores: 0 is the corrupted run's, 1 the clean's."""
        gap = self.metric_clean - self.metric_corrupt
        values = self.metric if values is None else values
        return (values - self.metric_corrupt) / gap if gap else np.full_like(values, np.nan)

    def results(self) -> list[dict]:
        """The CLI's rows: {"block", "position" or "head", "metric"} per patched site."""
        rows = []
        for block, row in enumerate(self.metric):
            for j, value in enumerate(row):
                rows.append({"block": block, **({self.column: j} if self.column else {}), "metric": float(value)})
        return rows

    def agreement(self) -> tuple[float | None, float]:
        """(correlation, largest |difference|) between exact patching and the estimate; the
        correlation is None where it is undefined (one cell, or no variation)."""
        a, b = self.metric.ravel(), self.estimate.ravel()
        r = float(np.corrcoef(a, b)[0, 1]) if a.size > 1 and a.std() and b.std() else None
        return r, float(np.abs(a - b).max())


def logit_difference(logits: torch.Tensor, answer: int, wrong: int) -> torch.Tensor:
    """logit(answer) − logit(wrong) at the last position, per batch entry."""
    return logits[:, -1, answer] - logits[:, -1, wrong]


def activation_patching(
    model: Transformer, clean: list[int], corrupt: list[int], answer: int, wrong: int, site: str = "resid_pre"
) -> Patching:
    """Patch every ``site`` of the clean run into the corrupted one, one at a time."""
    if site not in SITES:
        raise GlassboxError(f"Unknown site {site!r}: one of {', '.join(SITES)}")
    require(model.cfg, mlp=site == "mlp_out")  # every site is in a block
    if len(clean) != len(corrupt):
        raise GlassboxError(
            f"The clean prompt is {len(clean)} tokens and the corrupted one {len(corrupt)}: "
            "patching needs prompts of equal length, position by position"
        )
    cfg, T = model.cfg, len(clean)
    check_prompt(cfg, clean)
    for token in (answer, wrong):
        check_token_id(cfg, token)
    names = [SITE_NAMES[site].format(block) for block in range(cfg.n_layers)]
    clean_ids = torch.tensor([clean], device=model.device)
    corrupt_ids = torch.tensor([corrupt], device=model.device)
    with torch.no_grad(), capture(names) as recorder:
        metric_clean = float(logit_difference(model(clean_ids, last_only=True).logits, answer, wrong)[0])
    clean_acts = recorder.tensors
    width = {"resid_pre": T, "head": cfg.n_heads}.get(site, 1)
    # every patch: (its cell in the grid, the name it edits, the index it replaces, batch entry left out)
    patches = [
        ((block, j), names[block], (j,) if site in ("resid_pre", "head") else ())
        for block in range(cfg.n_layers)
        for j in range(width)
    ]
    metric = np.zeros((cfg.n_layers, width))
    with torch.no_grad():
        per_pass = batches.per_pass(T)
        for start in range(0, len(patches), per_pass):
            chunk = patches[start : start + per_pass]
            by_name: dict[str, list[tuple[int, tuple]]] = defaultdict(list)
            for entry, (_, name, index) in enumerate(chunk):
                by_name[name].append((entry, index))
            edits = {name: patch_entries(jobs, clean_acts[name][0]) for name, jobs in by_name.items()}
            with editing(edits):
                values = logit_difference(model(corrupt_ids.expand(len(chunk), -1), last_only=True).logits, answer, wrong)
            for (cell, _, _), value in zip(chunk, values.tolist()):
                metric[cell] = value
    metric_corrupt, estimate = _attribution(model, corrupt_ids, clean_acts, names, site, answer, wrong)
    return Patching(site, metric_clean, metric_corrupt, metric, estimate)


def patch_entries(jobs: list[tuple[int, tuple]], clean: torch.Tensor):
    """One edit for a batch: entry e gets ``clean`` (one sequence's activation) at its own index."""

    def edit(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        for entry, index in jobs:
            out[(entry, *index)] = clean[index]
        return out

    return edit


def _attribution(
    model: Transformer,
    corrupt_ids: torch.Tensor,
    clean_acts: dict[str, torch.Tensor],
    names: list[str],
    site: str,
    answer: int,
    wrong: int,
) -> tuple[float, np.ndarray]:
    """The corrupted run's metric, and attribution patching's estimate for every patch."""
    with torch.enable_grad(), editing({}, keep=names) as editor:
        value = logit_difference(model(corrupt_ids, last_only=True).logits, answer, wrong)[0]
        acts = [editor.tensors[n] for n in names]
        grads = torch.autograd.grad(value, acts, allow_unused=True)  # activations only: no parameter is touched
    rows = []
    for name, act, grad in zip(names, acts, grads):
        grad = torch.zeros_like(act) if grad is None else grad
        change = ((clean_acts[name] - act.detach()) * grad)[0]
        if site == "resid_pre":  # position × d_model → per position
            rows.append(change.sum(-1))
        elif site == "head":  # head × position × d_head → per head
            rows.append(change.sum((-1, -2)))
        else:
            rows.append(change.sum()[None])
    estimate = value.item() + torch.stack(rows).double()
    return value.item(), estimate.cpu().numpy()


def sites(cfg) -> tuple[str, ...]:
    """The sites a model has: none without blocks, no MLP output in attention-only blocks."""
    return () if cfg.n_layers == 0 else tuple(s for s in SITES if not (s == "mlp_out" and cfg.attn_only))


__all__ = ["SITES", "SITE_NAMES", "sites", "Patching", "activation_patching", "logit_difference"]
