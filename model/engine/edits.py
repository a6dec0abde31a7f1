"""Per-call edits of named tensors: what patching and ablation stand on.

Inside ``editing({name: edit})`` the forward pass goes on with ``edit(tensor)`` wherever it
hooks ``name`` (zero a head's z, put another run's residual stream at one position, set a
neuron to its mean). It uses capture's mechanism (model/engine/capture.py): the editor lives
in the call's context, not on the model, so nothing is registered on modules, nothing is left
behind, and other threads running the same model see no edit.

Tensors arrive with their batch dimension first, as the forward pass holds them
(``blocks.0.hook_resid_pre``: batch × position × d_model; ``blocks.0.attn.hook_z``: batch ×
head × position × d_head). An edit returns a new tensor; it must not change its argument in
place (autograd may still need it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch

from glassbox.model.engine.capture import Recorder, capture, matches
from glassbox.model.engine.errors import GlassboxError

Edit = Callable[[torch.Tensor], torch.Tensor]
DISPLAY_ONLY = {"hook_probs": "hook_log_probs or hook_logits"}  # computed beside the pass, for display: not editable


class Editor(Recorder):
    """Applies ``edits`` (name → function) and records, after editing, the names ``keep`` matches."""

    def __init__(self, edits: dict[str, Edit], keep: Iterable[str] = ()):
        super().__init__(tuple(keep))
        for name in edits:
            if name in DISPLAY_ONLY:
                raise GlassboxError(f"{name} is computed for display only, beside the pass: edit {DISPLAY_ONLY[name]}")
        self.edits = dict(edits)
        self.applied: set[str] = set()

    def wants(self, name: str) -> bool:
        # an edited name is wanted: the forward pass then computes it where it is optional
        # (each head's output, the explicit attention pattern)
        return name in self.edits or super().wants(name)

    def edit(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name not in self.edits:
            return tensor
        self.applied.add(name)
        edited = self.edits[name](tensor)
        if edited.shape != tensor.shape:
            raise ValueError(f"an edit of {name} changed its shape {tuple(tensor.shape)} to {tuple(edited.shape)}")
        return edited.to(tensor.dtype)

    def record(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if matches(name, self.patterns):  # after every edit: what the pass goes on with
            self.tensors[name] = tensor
        return tensor


@contextmanager
def editing(edits: dict[str, Edit], keep: Iterable[str] = ()) -> Iterator[Editor]:
    """Run the forward passes of the block with ``edits`` applied; the editor's ``tensors`` hold
    what ``keep`` (shell patterns) matched, as the pass went on with it. Inside, ``run_trace``
    traces the edited model and another ``editing`` adds its edits after these (capture.py). An
    edit of a name that no pass computed (a misspelling, another model's name) is an error when
    the block ends."""
    editor = Editor(edits, keep)
    with capture(recorder=editor):
        yield editor
    unused = sorted(set(edits) - editor.applied)
    if unused:
        raise GlassboxError(f"No tensor named {', '.join(unused)} was computed: `glassbox hooks` lists the names")


def replaced(index: tuple, value: torch.Tensor | float) -> Edit:
    """An edit that sets ``tensor[index]`` to ``value`` (a tensor that broadcasts, or a number)."""

    def edit(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        out[index] = value
        return out

    return edit
