"""Path patching: how much of the clean behaviour one component restores through one path, its
direct effect on a later head's queries, keys or values, and nothing else.

For a sender (a head, or a block's MLP) and a receiver (a head of a later block, and which of
its inputs: ``q``, ``k`` or ``v``), on the corrupted prompt:

1. the pass where the sender's output is the clean run's and every other head's and MLP's
   output is frozen at the corrupted run's (``hook_z``, ``hook_mlp_out``): the residual
   stream then differs from the corrupted run's by the sender's direct contribution alone,
   and the receiver's input computed from it (``blocks.{b}.attn.hook_q``, ``hook_k``,
   ``hook_v``) is kept;
2. the corrupted run again, with only the receiver's input replaced by the kept one; the
   metric (logit(answer) − logit(wrong) at the last position, as activation patching's) is
   what the path sender → receiver restores.

Keys and values are per key/value head (with grouped-query attention a receiver's k or v is
its group's). Pass 1 runs once per sender keeping every later receiver; pass 2 runs a sender's
receivers of one block in one batch. Neither changes anything before the sender's block (pass 1)
or the receivers' (pass 2), so each starts there, from the corrupted run's residual stream
(``Transformer.forward_from``). For GPT-2 small's 12 blocks, pass 2 then computes 1.8 times
fewer blocks than when all of a sender's receivers started at the block after the sender, and
its batches (a block's heads) stay small enough for the CPU's caches: 141 s against 304 s for
GPT-2 small's shape on 16 tokens, side by side on this 2-core machine, the grid the same (92 s
since the attention's projections stopped copying their weights per sequence: docs/benchmarks.md).

In a causal model every pass is the same at the positions before the prompts' first difference:
those are run once, and every pass continues from their keys and values (``shared_prefix``); and
each pass's head computes only the two logits the metric reads. On the bench's input (the prompts
differing at the last of 16 tokens) 16 s; where nothing is shared, 74–78 s (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis.architecture import require
from glassbox.model.analysis.patching import logit_difference, patch_entries
from glassbox.model.engine import GlassboxError, Transformer, check_prompt, check_token_id, editing
from glassbox.model.engine.capture import capture
from glassbox.model.engine.kv_cache import KVCache

INPUTS = ("q", "k", "v")


@dataclass
class PathPatching:
    receiver_input: str
    senders: list[tuple[int, int | None]]  # (block, head), head None for the block's MLP
    receivers: list[tuple[int, int]]  # (block, head): a key/value head for k and v
    metric_clean: float
    metric_corrupt: float
    metric: np.ndarray  # senders × receivers; NaN where the receiver is not in a later block

    @staticmethod
    def label(block: int, head: int | None) -> str:
        return f"{block}.mlp" if head is None else f"{block}.{head}"

    def restored(self) -> np.ndarray:
        """The fraction of the clean run's metric each path restores (0: the corrupted run's)."""
        gap = self.metric_clean - self.metric_corrupt
        return (self.metric - self.metric_corrupt) / gap if gap else np.full_like(self.metric, np.nan)


def _outputs(cfg) -> list[str]:
    names = [f"blocks.{b}.attn.hook_z" for b in range(cfg.n_layers)]
    return names + ([] if cfg.attn_only else [f"blocks.{b}.hook_mlp_out" for b in range(cfg.n_layers)])


def _streams(cfg) -> list[str]:
    return [f"blocks.{b}.hook_resid_pre" for b in range(cfg.n_layers)]


def _set(value: torch.Tensor):
    """An edit that puts ``value`` (one sequence's) in every batch entry."""
    return lambda tensor: value.to(tensor.dtype).expand_as(tensor).clone()


def shared_prefix(cfg, clean: list[int], corrupt: list[int]) -> int:
    """How many first positions every pass can take from one run of them: those where the two
    prompts agree, in a causal model (each position sees only itself and those before, so every
    pass is the same there), short of the last (its logits are the metric); 0 where positions
    see later ones or compete for experts' capacity (GShard's, counted over the whole prompt)."""
    if not cfg.causal or cfg.expert_capacity is not None:
        return 0
    agreeing = next((i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b), len(clean))
    return min(agreeing, len(clean) - 1)


@torch.no_grad()
def path_patching(
    model: Transformer,
    clean: list[int],
    corrupt: list[int],
    answer: int,
    wrong: int,
    receiver_input: str = "q",
    reuse_prefix: bool = True,
) -> PathPatching:
    """Every sender (each head, each MLP) × every receiver head of a later block. The positions
    the prompts share (``shared_prefix``) are run once, and every pass continues from their keys
    and values (a generation's cache); ``reuse_prefix=False`` runs the whole prompts each time."""
    cfg = model.cfg
    if receiver_input not in INPUTS:
        raise GlassboxError(f"The receiver's input must be one of {', '.join(INPUTS)}, not {receiver_input!r}")
    require(cfg)
    if cfg.n_layers < 2:
        raise GlassboxError("Path patching needs two blocks at least: a sender and a later receiver")
    if len(clean) != len(corrupt):
        raise GlassboxError(
            f"The clean prompt is {len(clean)} tokens and the corrupted one {len(corrupt)}: "
            "path patching needs prompts of equal length, position by position"
        )
    check_prompt(cfg, clean)
    for token in (answer, wrong):
        check_token_id(cfg, token)
    outputs = _outputs(cfg)
    start = shared_prefix(cfg, clean, corrupt) if reuse_prefix else 0
    prefix = KVCache(cfg.n_layers)
    if start:  # the shared positions' keys and values, once: every tensor below is of the later positions
        model(torch.tensor([corrupt[:start]], device=model.device), cache=prefix)

    def after_prefix(n: int) -> KVCache | None:
        """A cache of the shared positions for a batch of ``n`` (a fresh one: a pass extends it)."""
        return prefix.truncated(start).expanded(n) if start else None

    runs = {}
    for which, ids in (("clean", clean), ("corrupt", corrupt)):
        with capture(outputs + (_streams(cfg) if which == "corrupt" else [])) as recorder:
            logits = model(torch.tensor([ids[start:]], device=model.device), cache=after_prefix(1), last_only=True).logits
        runs[which] = ({n: t[0] for n, t in recorder.tensors.items()}, float(logit_difference(logits, answer, wrong)[0]))
    (clean_out, metric_clean), (corrupt_out, metric_corrupt) = runs["clean"], runs["corrupt"]

    n_receiving = cfg.n_heads if receiver_input == "q" else cfg.n_kv_heads
    senders = [(b, h) for b in range(cfg.n_layers) for h in [*range(cfg.n_heads), *([] if cfg.attn_only else [None])]]
    receivers = [(b, h) for b in range(1, cfg.n_layers) for h in range(n_receiving)]
    metric = np.full((len(senders), len(receivers)), np.nan)
    for i, (block, head) in enumerate(senders):
        frozen = {n: corrupt_out[n] for n in outputs}  # the heads' and MLPs' outputs (not the streams)
        name = f"blocks.{block}.hook_mlp_out" if head is None else f"blocks.{block}.attn.hook_z"
        frozen[name] = clean_out[name] if head is None else _with_head(corrupt_out[name], clean_out[name], head)
        later = [j for j, (b, _) in enumerate(receivers) if b > block]
        if not later:
            continue
        kept = [f"blocks.{b}.attn.hook_{receiver_input}" for b in range(block + 1, cfg.n_layers)]
        # the outputs before the sender's block are the corrupted run's: the pass starts there
        starting = {n: v for n, v in frozen.items() if int(n.split(".")[1]) >= block}
        with editing({n: _set(v) for n, v in starting.items()}, keep=kept) as editor:
            # what is kept is the receivers' inputs: the pass's logits are not read (no column of W_U)
            resid = corrupt_out[f"blocks.{block}.hook_resid_pre"][None]
            model.forward_from(resid, block, last_only=True, cache=after_prefix(1), columns=[])
        inputs = {n: editor.tensors[n][0] for n in kept}
        for b in range(block + 1, cfg.n_layers):  # a batch per receiving block, from that block on:
            # before it, each of its entries is the corrupted run
            columns = [j for j in later if receivers[j][0] == b]
            name = f"blocks.{b}.attn.hook_{receiver_input}"
            entries = [(e, (receivers[j][1],)) for e, j in enumerate(columns)]  # entry e gets its head's kept input
            stream = corrupt_out[f"blocks.{b}.hook_resid_pre"][None].expand(len(columns), -1, -1)
            with editing({name: patch_entries(entries, inputs[name])}):
                two = model.forward_from(stream, b, last_only=True, cache=after_prefix(len(columns)), columns=[answer, wrong])
                values = logit_difference(two.logits, 0, 1)  # the two logits the metric reads, alone
            metric[i, columns] = values.double().cpu().numpy()
    return PathPatching(receiver_input, senders, receivers, metric_clean, metric_corrupt, metric)


def _with_head(corrupt: torch.Tensor, clean: torch.Tensor, head: int) -> torch.Tensor:
    """The corrupted run's head × position × d_head outputs with one head's from the clean run."""
    out = corrupt.clone()
    out[head] = clean[head]
    return out
