"""One call: every captured tensor of a forward pass and, on request, the gradient of a loss
with respect to each of them and to every parameter.

Gradients come from ``torch.autograd.grad`` on the captured tensors, which are kept in the
graph until it returns. Nothing is written to the shared model: no hooks, no ``.grad``.

``hook_probs`` is not computed by the pass: it is exp(``hook_log_probs``), computed each time
it is read, so a trace holds one vocabulary-sized tensor per position, not two (8% of a
GPT-2 trace at 512 tokens). What a trace returns is unchanged.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from glassbox.model.engine.capture import Recorder, capture, matches
from glassbox.model.engine.config import check_prompt, check_token_id
from glassbox.model.engine.device import to_numpy
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.names import GRAD, registered
from glassbox.model.engine.seq2seq import EncoderDecoder, shift_right
from glassbox.model.engine.transformer import Output, Transformer


@dataclass(frozen=True)
class Target:
    """The loss is the cross-entropy of predicting ``token_id`` at ``position`` (-1: last)."""

    token_id: int
    position: int = -1


# Tensors computed when read, not during the pass: name -> (the tensor it comes from, how),
# with the operation the pass itself would run.
DERIVED: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {"hook_probs": ("hook_log_probs", torch.exp)}


class Activations(Mapping):
    """A trace's tensors by name, in the order the pass computed them. ``held`` are the
    tensors kept; a derived name (DERIVED) is computed from its source each time it is read.
    A source kept only for that is held but not listed."""

    def __init__(self, held: dict[str, torch.Tensor], names: list[str]):
        self.held, self._names, self._listed = held, names, set(names)

    def __contains__(self, name: object) -> bool:  # without computing a derived tensor (Mapping's would)
        return name in self._listed

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._listed:
            raise KeyError(name)
        if name in DERIVED:
            source, derive = DERIVED[name]
            return derive(self.held[source])
        return self.held[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _TraceRecorder(Recorder):
    """Records what the patterns match, except a derived tensor: its source instead."""

    sparse_embedding = True  # _gradients densifies it

    def wants(self, name: str) -> bool:
        if name not in self._wanted:
            self._wanted[name] = (name not in DERIVED and matches(name, self.patterns)) or any(
                source == name and matches(derived, self.patterns) for derived, (source, _) in DERIVED.items()
            )
        return self._wanted[name]


class NotInTrace(GlassboxError, KeyError):
    """A name the trace does not hold: a KeyError (``trace.get``, ``in`` and ``except KeyError``
    work as on a dict) whose message names the nearest names it does hold."""

    def __str__(self) -> str:  # the message as written, not quoted as a KeyError's key is
        return str(self.args[0])


@dataclass
class Trace(Mapping):
    """Every tensor a pass captured, by its one name, then (with a backward pass) the gradient of
    the loss with respect to each, as "grad:<name>": a read-only mapping of names to tensors
    (``in``, ``len``, iteration over the names in that order, ``keys``, ``items``, ``get``)."""

    tokens: list[int]
    loss_description: str
    loss: float | None = None
    # name -> tensor for one sequence (no batch dimension), detached
    activations: Activations = field(default_factory=lambda: Activations({}, []))
    # "grad:<activation or parameter name>" -> dL/d(that tensor); absent when the tensor is
    # off the loss's path (hook_probs: the loss is computed from hook_log_probs)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    source: list[int] | None = None  # an encoder-decoder's source tokens (``tokens`` are then the decoder's input)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self:
            raise NotInTrace(self._missing(name))
        return self.grads[name] if name.startswith(GRAD) else self.activations[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.grads if name.startswith(GRAD) else name in self.activations)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.activations) + len(self.grads)

    def __repr__(self) -> str:  # not the dataclass's, which would print every tensor
        loss = "" if self.loss is None else f", loss {self.loss:.4g}"
        return (
            f"<{type(self).__name__}: {len(self.tokens)} tokens, {len(self.activations)} tensors, "
            f"{len(self.grads)} gradients{loss}>"
        )

    def names(self) -> list[str]:
        """The names, in the pass's order, then the gradients' ("grad:…")."""
        return list(self.activations) + list(self.grads)

    def _missing(self, name: object) -> str:
        """Why ``name`` is not in the trace, naming the nearest names that are."""
        text = str(name)
        nearest = difflib.get_close_matches(text, self.names(), n=3, cutoff=0.6)
        if text.startswith(GRAD) and not self.grads:
            why = "this trace has no gradients (trace with backward=True)"
        elif registered(text):
            why = (
                "this trace did not keep it (traced with names= that leave it out)"
                if not text.startswith(GRAD)
                else "its tensor is off the loss's path, or was not kept"
            )
        else:
            why = "no tensor is named so (`glassbox hooks` lists the names)"
        return f"No {text!r} in this trace: {why}" + (f"; the nearest: {', '.join(nearest)}" if nearest else "")

    def held(self) -> list[torch.Tensor]:
        """The tensors the trace keeps (what its memory is): a derived one is not among them."""
        return [*self.activations.held.values(), *self.grads.values()]

    def to_numpy(self) -> dict[str, np.ndarray]:
        arrays = {"tokens": np.asarray(self.tokens, dtype=np.int64)}
        if self.source is not None:
            arrays["source"] = np.asarray(self.source, dtype=np.int64)
        for name in self.names():
            arrays[name] = to_numpy(self[name])
        return arrays

    def save_npz(self, path: str | Path) -> None:
        """Every tensor under its name, in ``path`` exactly (numpy would append .npz to a bare
        name): written whole or not at all (files.write_file), an error a GlassboxError."""
        from glassbox.model.engine.files import write_file

        arrays = self.to_numpy()
        # type: ignore: numpy's stub lets a key of **arrays be savez's allow_pickle (a tensor name never is)
        write_file(path, lambda file: np.savez(file, **arrays))  # type: ignore[arg-type]


def next_token_targets(tokens: torch.Tensor) -> torch.Tensor:
    """Each position's target is the following token; the last position has none (-1).
    The mean cross-entropy over these is what transformers computes with labels = input ids."""
    targets = torch.full_like(tokens, -1)
    targets[:, :-1] = tokens[:, 1:]
    return targets


def loss_targets(
    ids: torch.Tensor, target: Target | list[Target] | None, vocab_size: int, encoder: bool = False
) -> tuple[torch.Tensor, str]:
    """Each position's target id (-1: none) for the loss, and the loss described in words:
    ``target``'s token at its position (several targets: the mean over them, as BERT's masked-LM
    loss is over its masked positions), or by default every next token. An ``encoder`` (BERT) sees
    every token, the next one too, so its default is each position's own token: the masked-LM
    loss as if every position were masked and its token the answer (a [MASK] position's own token
    is [MASK]: give a Target for the word it hides)."""
    if target is None and encoder:
        return ids.clone(), "mean cross-entropy of each position's own token (an encoder sees them all)"
    if target is None:
        return next_token_targets(ids), "mean next-token cross-entropy over all positions"
    n = ids.shape[1]
    targets = torch.full_like(ids, -1)
    for one in [target] if isinstance(target, Target) else target:
        position = one.position + n if one.position < 0 else one.position
        if not 0 <= position < n:
            raise GlassboxError(f"Target position {one.position} is outside the prompt's {n} positions")
        if not 0 <= one.token_id < vocab_size:
            raise GlassboxError(f"Target token id {one.token_id} is outside the vocabulary (0..{vocab_size - 1})")
        targets[0, position] = one.token_id
    chosen = [(int(p), int(targets[0, p])) for p in (targets[0] >= 0).nonzero()[:, 0]]
    if len(chosen) == 1:
        return targets, f"cross-entropy of token {chosen[0][1]} at position {chosen[0][0]}"
    return targets, "mean cross-entropy of " + ", ".join(f"token {t} at position {p}" for p, t in chosen)


def run_trace(
    model: Transformer,
    tokens: list[int],
    *,
    names: Iterable[str] | None = None,
    backward: bool = False,
    target: Target | list[Target] | None = None,
) -> Trace:
    """Run ``tokens`` through ``model``, capturing the tensors whose names match ``names``
    (shell patterns; None: all). With ``backward``, also the gradient of the loss: the
    cross-entropy of ``target`` (of several, their mean), or by default the mean next-token
    cross-entropy (an encoder's: of each position's own token, see loss_targets)."""
    if model.cfg.encoder_decoder:
        raise GlassboxError("An encoder-decoder reads a source and a target: trace it with run_seq2seq_trace")
    check_prompt(model.cfg, tokens)
    ids = torch.tensor([tokens], dtype=torch.long, device=model.device)
    targets, description = loss_targets(ids, target, model.cfg.vocab_size, encoder=model.cfg.kind == "encoder")
    has_loss = bool((targets >= 0).any())
    if backward and not has_loss:
        raise GlassboxError("A one-token prompt has no next token to predict: choose a target for the backward pass.")
    return _traced(
        model,
        lambda: model(ids, targets if has_loss else None),
        names,
        backward,
        Trace(tokens=list(tokens), loss_description=description),
    )


def run_seq2seq_trace(
    model: EncoderDecoder, source: list[int], target: list[int], *, names: Iterable[str] | None = None, backward: bool = False
) -> Trace:
    """An encoder-decoder's pass with teacher forcing: the encoder reads ``source``; the decoder
    reads decoder_start_token_id and then ``target`` but its last token (the trace's ``tokens``),
    and position i predicts ``target[i]``. The loss is the mean cross-entropy over the target's
    tokens (transformers' loss with labels = target). Captures and gradients as run_trace's."""
    check_prompt(model.cfg, source, what="The source")
    check_prompt(model.cfg, target, what="The target")
    for token in (*source, *target):
        check_token_id(model.cfg, token)
    labels = torch.tensor([target], dtype=torch.long, device=model.device)
    decoder_input = shift_right(labels, model.cfg.decoder_start_token_id)
    source_ids = torch.tensor([source], dtype=torch.long, device=model.device)
    trace = Trace(
        tokens=decoder_input[0].tolist(),
        source=list(source),
        loss_description="mean cross-entropy of each target token, given the source and the target's "
        "tokens before it (teacher forcing)",
    )
    return _traced(model, lambda: model(source_ids, decoder_input, labels), names, backward, trace)


def _traced(
    model: Transformer | EncoderDecoder, run: Callable[[], Output], names: Iterable[str] | None, backward: bool, trace: Trace
) -> Trace:
    """``trace`` filled by ``run()``, a pass of ``model``: the tensors and parameters whose names
    match ``names`` (shell patterns; None: all), the loss and, with ``backward``, the gradients."""
    names = None if names is None else tuple(names)
    with torch.set_grad_enabled(backward), capture(recorder=_TraceRecorder(names)) as recorder:
        out = run()
    captured = recorder.tensors
    listed = []  # what was asked for, in the pass's order, each derived tensor after its source
    for name in captured:
        listed += [name] if matches(name, names) else []
        listed += [d for d, (source, _) in DERIVED.items() if source == name and matches(d, names)]
    # an offloaded block's weights as its forward used them (placement.py); the model holds meta ones
    parameters = [(n, recorder.parameters.get(n, p)) for n, p in model.named_parameters() if matches(n, names)]
    if names and not listed and not parameters:  # patterns given, none matched (names=(): capture nothing)
        raise GlassboxError(f"No tensor or parameter is named like {list(names)}: `glassbox hooks` lists the names")

    if out.loss is not None:
        trace.loss = out.loss.item()
    if backward:
        assert out.loss is not None, "run_trace and run_seq2seq_trace give a backward pass a loss"
        trace.grads = _gradients(out.loss, {n: captured[n] for n in listed if n in captured}, parameters)
    trace.activations = Activations({name: t.detach()[0] for name, t in captured.items()}, listed)
    return trace


def _gradients(
    loss: torch.Tensor, captured: dict[str, torch.Tensor], params: list[tuple[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """One autograd.grad call for every captured tensor on the loss's graph and every
    parameter; the ones the loss does not depend on get no entry."""
    on_graph = [n for n, t in captured.items() if t.requires_grad]
    if not on_graph and not params:
        return {}
    grads = torch.autograd.grad(loss, [captured[n] for n in on_graph] + [p for _, p in params], allow_unused=True)
    out = {}
    for name, grad in zip(on_graph, grads[: len(on_graph)]):
        if grad is not None:
            out[GRAD + name] = grad[0]  # drop the batch dimension
    for (name, _), grad in zip(params, grads[len(on_graph) :]):
        if grad is not None:  # an untied W_E's gradient comes back sparse (see Transformer.forward)
            out[GRAD + name] = grad.to_dense() if grad.is_sparse else grad
    return out
