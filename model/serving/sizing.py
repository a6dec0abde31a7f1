"""What a model pass holds and costs before it is computed, and what to capture when a full
trace would not fit: everything under the budget (one trace serves every view), else only what
the open view needs.

Every size comes from the engine itself: three short traces of the model give each held
tensor's bytes as an exact polynomial in the length (constant, linear, or quadratic for
attention), and one one-token trace gives the names a partial capture holds."""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import EncoderDecoder, GlassboxError, Target, Trace, Transformer, run_seq2seq_trace, run_trace
from glassbox.model.engine.names import GRAD
from glassbox.model.serving.limits import FULL_TRACE_BYTES


@dataclass(frozen=True)
class Needs:
    """What a view reads from a trace: tensor name patterns, and whether it shows gradients."""

    names: tuple[str, ...]
    backward: bool = False


def trace_bytes(trace: Trace) -> int:
    return sum(t.nbytes for t in trace.held())


def _held(trace: Trace) -> dict[str, int]:
    """Each tensor a trace keeps, by name (gradients as grad:name), and its bytes."""
    return {name: t.nbytes for name, t in [*trace.activations.held.items(), *trace.grads.items()]}


_probes: weakref.WeakKeyDictionary[Transformer, tuple] = weakref.WeakKeyDictionary()
_plans: weakref.WeakKeyDictionary[Transformer, dict] = weakref.WeakKeyDictionary()
_probing = threading.Lock()


def _probe(model: Transformer) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per held tensor of a full trace, its bytes' polynomial coefficients (c0, c1, c2) in the
    length; and the trace's names. The probe traces capture the activations and their gradients
    only: a parameter's gradient is the parameter's size (a constant), and holding them all would
    double the model's memory while it probes. Measured once per model object, one short trace
    at a time (sixteen sessions arriving at once had probed side by side)."""
    with _probing:
        if model not in _probes:
            activations = tuple(run_trace(model, [0], target=Target(0)).activations)  # with the loss's tensors
            lengths = [t for t in (1, 2, 3) if t <= model.cfg.n_ctx]
            sizes, names = [], None
            for length in lengths:
                trace = run_trace(model, [0] * length, names=activations, backward=True, target=Target(0))
                sizes.append(_held(trace))
                names = names or trace.names()
                del trace  # before the next one
            polynomials = {}
            for name in sizes[0]:
                fitted = np.polyfit(lengths, [s[name] for s in sizes], len(lengths) - 1)[::-1]
                polynomials[name] = np.concatenate([fitted, np.zeros(3 - len(lengths))])
            for name, parameter in model.named_parameters():  # dense, in the parameter's dtype
                polynomials[GRAD + name] = np.array([parameter.nbytes, 0.0, 0.0])
                names.append(GRAD + name)
            _probes[model] = (polynomials, names)
    return _probes[model]


def _bytes(polynomials: list[np.ndarray], n_tokens: int) -> int:
    c = np.sum(polynomials, axis=0) if polynomials else np.zeros(3)
    return round(c[0] + c[1] * n_tokens + c[2] * n_tokens**2)  # numpy 2: round() of a float64 is an int


def full_trace_bytes(model: Transformer, n_tokens: int) -> int:
    """Bytes of a trace with every tensor and every gradient, for ``n_tokens`` tokens."""
    return _bytes(list(_probe(model)[0].values()), n_tokens)


def trace_names(model: Transformer) -> list[str]:
    """The name of every tensor a full trace holds: activations, then gradients."""
    return list(_probe(model)[1])


def _plan_names(model: Transformer, names: tuple[str, ...] | None, backward: bool) -> list[str]:
    """The tensors a trace captured with ``names`` holds: the same at every length, so one
    one-token trace tells (kept per model and capture)."""
    if names is None and backward:
        return list(_probe(model)[0])
    with _probing:
        plans = _plans.setdefault(model, {})
        if (names, backward) not in plans:
            plans[(names, backward)] = list(
                _held(run_trace(model, [0], names=names, backward=backward, target=Target(0) if backward else None))
            )
    return plans[(names, backward)]


def held_bytes(model: Transformer, n_tokens: int, names: tuple[str, ...] | None = None, backward: bool = True) -> int:
    """Bytes of a trace of ``n_tokens`` captured with ``names`` (None: all), exactly; for a
    model split across devices, as they weigh on the server's budget (``device_weight``)."""
    polynomials = _probe(model)[0]
    held = _bytes([polynomials[n] for n in _plan_names(model, names, backward) if n in polynomials], n_tokens)
    return int(held * device_weight(model))


_weights: weakref.WeakKeyDictionary[Transformer, float] = weakref.WeakKeyDictionary()


def device_weight(model: Transformer, budgets: dict[str, int] | None = None) -> float:
    """How a byte of this model's passes weighs on the server's one budget, the first device's
    (B₀): a model split across devices (placement.py) puts a share s_d of a trace's tensors on
    device d, whose own budget would be B_d, so a byte counts max_d s_d · B₀ / B_d. Admitting
    against B₀ then never takes any device past its own budget (Σ c·s_d ≤ B_d follows from
    Σ c · max_d … ≤ B₀), and two GPUs sharing a trace half and half admit twice the bytes. 1 for
    a model on one device. ``budgets``: each device's (default: half its free memory, measured
    once per model)."""
    from glassbox.model.engine.placement import memory_plan, placement

    mapping = getattr(model, "device_map", None)
    if placement(model) is None:
        return 1.0
    measured = budgets is None
    if measured and model in _weights:
        return _weights[model]
    rows = memory_plan(model, mapping, min(128, model.cfg.n_ctx))
    total = sum(r["trace_bytes"] for r in rows) or 1
    if measured:
        from glassbox.model.io.guard import available_memory

        budgets = {
            r["device"]: available_memory(torch.device(r["device"])) for r in rows if r["trace_bytes"] and r["device"] != "disk"
        }
    first = rows[0]["device"]
    weight = max(r["trace_bytes"] / total * budgets[first] / budgets[r["device"]] for r in rows if r["trace_bytes"])
    if measured:
        _weights[model] = weight
    return weight


def working_bytes(model: Transformer, n_tokens: int, backward: bool, batch: int = 1) -> int:
    """What a pass over ``batch`` sequences of ``n_tokens`` takes besides what it keeps. With a
    backward pass the graph saves tensors of the whole forward pass until it is done: bounded by
    every activation a full trace captures. Without, one block's activations live at a time,
    beside those outside the blocks (embeddings, logits)."""
    activations = {n: p for n, p in _probe(model)[0].items() if not n.startswith(GRAD)}
    if backward:
        return int(batch * _bytes(list(activations.values()), n_tokens) * device_weight(model))
    blocks: dict[str, list[np.ndarray]] = {}
    for name, polynomial in activations.items():
        block = re.match(r"blocks\.(\d+)\.", name)
        blocks.setdefault(block[1] if block else "", []).append(polynomial)
    outside = _bytes(blocks.pop("", []), n_tokens)
    return int(batch * (outside + max((_bytes(p, n_tokens) for p in blocks.values()), default=0)) * device_weight(model))


def training_bytes(model: Transformer, n_tokens: int, batch: int) -> int:
    """A training step's peak on a model of its own: its weights, their gradients and AdamW's two
    moments (4 copies of the parameters), and a pass over ``batch`` sequences with its backward."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return 4 * weights + working_bytes(model, n_tokens, backward=True, batch=batch)


def trace_cost(model: Transformer, n_tokens: int, names: tuple[str, ...] | None, backward: bool) -> int:
    """What computing a trace takes at its peak: what it keeps and its pass's working memory
    (a full trace: about 1.5 × its bytes, as `glassbox bench` measured, 1.23–1.46×)."""
    return held_bytes(model, n_tokens, names, backward) + working_bytes(model, n_tokens, backward)


_seq2seq_bounds: weakref.WeakKeyDictionary[EncoderDecoder, int] = weakref.WeakKeyDictionary()


def seq2seq_pass_bound(model: EncoderDecoder, backward: bool = False) -> int:
    """A bound on any pass of an encoder-decoder (whose sizes are not probed as a decoder's are): a
    full trace of the longest source and target it reads, twice over (what the trace keeps, and at
    most as much again of working memory: decoders measure 1.23–1.46×). With ``backward``, the
    trace also keeps a gradient per activation (at most its size) and per parameter. The forward
    trace is measured once per model."""
    if model not in _seq2seq_bounds:
        n = model.cfg.n_ctx
        _seq2seq_bounds[model] = trace_bytes(run_seq2seq_trace(model, [0] * n, [0] * n))
    held = _seq2seq_bounds[model]
    if backward:
        held = 2 * held + sum(p.nbytes for p in model.parameters())
    return 2 * held


def size_text(n: int) -> str:
    """Bytes as people read them: 512 B, 2.0 KiB, 1.5 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def most_tokens(cost: Callable[[int], int], budget: int, n_ctx: int) -> int:
    """The longest prompt whose ``cost`` (growing with the length) fits in ``budget``; 0: none."""
    low, high = 0, n_ctx
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if cost(middle) <= budget else (low, middle - 1)
    return low


def check_budget(cost: Callable[[int], int], n_tokens: int, budget: int, n_ctx: int, what: str) -> int:
    """``cost(n_tokens)``, or a GlassboxError if it is over ``budget``, naming the longest prompt
    that fits: a request larger than the server's whole budget is refused, never queued."""
    needed = cost(n_tokens)
    if needed > budget:
        fits = most_tokens(cost, budget, n_ctx)
        shorter = (
            f"At most {fits:,} tokens fit here: shorten the prompt."
            if fits
            else "No prompt fits: the server's budget is too small for this model."
        )
        raise GlassboxError(
            f"{what} of {n_tokens:,} tokens needs {size_text(needed)} while it is computed; this "
            f"server allows {size_text(budget)} for all traces at once (GLASSBOX_TRACE_BUDGET_GB). " + shorter
        )
    return needed


def capture_plan(
    model: Transformer, n_tokens: int, needs: Needs, budget: int = FULL_TRACE_BYTES
) -> tuple[tuple[str, ...] | None, bool]:
    """(names, backward) for run_trace: everything, forward and backward, when that fits in
    ``budget`` bytes (one trace then serves every view); otherwise only what the open view needs."""
    if full_trace_bytes(model, n_tokens) <= budget:
        return None, True
    return needs.names, needs.backward
