"""A head's circuits in the framing of Elhage et al., "A Mathematical Framework for Transformer
Circuits" (2021): read the weights alone, ignoring norms, biases and positions, as if the
head's input were a token's embedding and its output went straight to the unembedding.

- QK circuit: (e_q W_Q)(e_k W_K)ᵀ × the score scale, for query token q and key token k: the
  score the head would give; which tokens it makes attend to which.
- OV circuit: e_t W_V W_O W_U: what attending to token t adds to each logit; which tokens the
  head copies (a large diagonal) or maps to others.
- The bigram table: e_t W_U, the direct path with no block at all.

Embeddings are taken as the residual stream sees them (× ``embed_scale`` where the model has it).
Computed in the weights' precision (the unembedding alone is d_model × vocabulary), returned
as float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis.architecture import require
from glassbox.model.engine import GlassboxError, Transformer
from glassbox.model.engine.capture import capture


@dataclass
class Circuit:
    matrix: np.ndarray  # rows × columns
    rows: list[int]  # token ids (the query, input or current token)
    cols: list[int]  # token ids (the key or output token)

    def top_pairs(self, k: int = 10) -> list[tuple[int, int, float]]:
        """The k largest entries as (row token, column token, value), largest first."""
        flat = np.argsort(-self.matrix, axis=None, kind="stable")[:k]
        return [
            (self.rows[i], self.cols[j], float(self.matrix[i, j])) for i, j in zip(*np.unravel_index(flat, self.matrix.shape))
        ]


def _embeddings(model: Transformer, tokens: list[int]) -> torch.Tensor:
    if not tokens:
        raise GlassboxError("Choose at least one token")
    if not all(0 <= t < model.cfg.vocab_size for t in tokens):
        raise GlassboxError(f"Token ids must be within the vocabulary (0..{model.cfg.vocab_size - 1})")
    e = model.embed.W_E.detach()[tokens]
    if model.cfg.embed_scale is None:
        return e
    return e * torch.tensor(model.cfg.embed_scale, dtype=e.dtype)  # rounded to the model's precision, as the pass does


def _head(model: Transformer, layer: int, head: int):
    cfg = model.cfg
    require(cfg)
    if not 0 <= layer < cfg.n_layers or not 0 <= head < cfg.n_heads:
        raise GlassboxError(f"No head {head} in block {layer} ({cfg.n_layers} blocks of {cfg.n_heads} heads)")
    return model.blocks[layer].attn, cfg.kv_head(head)


@torch.no_grad()
def qk_circuit(model: Transformer, layer: int, head: int, queries: list[int], keys: list[int]) -> Circuit:
    attn, kv = _head(model, layer, head)
    q = _embeddings(model, queries) @ attn.W_Q[head]
    k = _embeddings(model, keys) @ attn.W_K[kv]
    return Circuit((q @ k.T * attn.scale).double().cpu().numpy(), list(queries), list(keys))


@torch.no_grad()
def ov_circuit(model: Transformer, layer: int, head: int, inputs: list[int], outputs: list[int] | None = None) -> Circuit:
    """``outputs``: the logits shown (default: the whole vocabulary)."""
    attn, kv = _head(model, layer, head)
    written = _embeddings(model, inputs) @ attn.W_V[kv] @ attn.W_O[head]
    return _through_unembedding(model, written, inputs, outputs)


@torch.no_grad()
def bigram(model: Transformer, inputs: list[int], outputs: list[int] | None = None) -> Circuit:
    return _through_unembedding(model, _embeddings(model, inputs), inputs, outputs)


def _through_unembedding(model: Transformer, written: torch.Tensor, inputs: list[int], outputs: list[int] | None) -> Circuit:
    W_U = model.W_U.detach()
    matrix = written @ (W_U if outputs is None else W_U[:, list(outputs)])  # all columns: no copy of W_U
    columns = list(range(model.cfg.vocab_size)) if outputs is None else list(outputs)
    return Circuit(matrix.double().cpu().numpy(), list(inputs), columns)


SCORED = ("blocks.*.attn.hook_pattern",)  # what head_scores captures: every head's pattern


def random_tokens(vocab_size: int, length: int, seed: int | np.random.Generator = 0) -> list[int]:
    """``length`` token ids drawn uniformly from the vocabulary: the random sequence that the head
    scores repeat (the Circuits view, ``Model.heads``, the induction lesson and micro-model).
    ``seed`` is a seed or a numpy generator to draw on from."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.integers(0, vocab_size, length).tolist()


@torch.no_grad()
def head_scores(model: Transformer, half: list[int], prefix: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Per block and head, on ``prefix`` (such as the BOS a tokenizer puts first) and then
    ``half`` twice: the induction score (the mean attention from each position of the repeat to
    the token after its earlier occurrence, t − n + 1) and the previous-token score (the mean
    attention from each position of the halves, after the first, to t − 1)."""
    require(model.cfg)
    n, start = len(half), len(prefix)
    if n < 2:
        raise GlassboxError("The repeated sequence needs at least 2 tokens")
    with capture(SCORED) as recorder:
        model(torch.tensor([list(prefix) + half + half], device=model.device))
    induction = np.zeros((model.cfg.n_layers, model.cfg.n_heads))
    previous = np.zeros_like(induction)
    t = torch.arange(start + n, start + 2 * n)
    after = torch.arange(start + 1, start + 2 * n)
    for i in range(model.cfg.n_layers):
        p = recorder.tensors[f"blocks.{i}.attn.hook_pattern"][0].double()
        induction[i] = p[:, t, t - n + 1].mean(-1).cpu().numpy()
        previous[i] = p[:, after, after - 1].mean(-1).cpu().numpy()
    return induction, previous
