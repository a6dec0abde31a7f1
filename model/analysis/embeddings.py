"""The embedding matrix (PCA, cosine neighbours) and the positional table."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch

from glassbox.model.analysis.architecture import NO_POSITIONS
from glassbox.model.engine import GlassboxError, Transformer, block_label, to_numpy
from glassbox.model.engine.components.block import Block
from glassbox.model.engine.rope import rope_angles


class EmbeddingPCA:
    """The principal components of the embedding matrix: eigenvectors of the d_model × d_model
    covariance (its products in the weights' own precision: float32 for a float32 model, half the
    time of float64 for GPT-2's 50,257 × 768; the eigenvectors in float64), computed once and kept
    small (the mean and the eigenvectors, not the centred matrix). ``unit`` scales each
    embedding to length 1 first: the geometry of the cosine neighbours, where a raw PC1 that
    only follows how long the embeddings are (frequent tokens grow long) no longer flattens
    the rest."""

    def __init__(self, W_E: torch.Tensor, unit: bool = False):
        self.W_E, self.unit = W_E, unit
        X = self._rows()
        self.mean = X.mean(0)
        centred = X - self.mean
        eigenvalues, eigenvectors = torch.linalg.eigh((centred.T @ centred).double() / max(len(X) - 1, 1))
        order = eigenvalues.argsort(descending=True)
        self.eigenvalues, self.eigenvectors = eigenvalues[order], eigenvectors[:, order]

    def _rows(self) -> torch.Tensor:
        X = self.W_E.detach().cpu()
        X = X.to(torch.float64 if X.dtype == torch.float64 else torch.float32)
        return X / X.norm(dim=1, keepdim=True).clamp_min(1e-30) if self.unit else X

    def project(self, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Every token on components first + 1 and first + 2 (0: PC1 and PC2), and the fraction
        of the variance each explains."""
        components = self.eigenvectors[:, first : first + 2]
        components = components * torch.sign(components[components.abs().argmax(0), torch.arange(components.shape[1])])
        rows = self._rows()
        coords = ((rows - self.mean) @ components.to(rows.dtype)).numpy()
        explained = (self.eigenvalues[first : first + 2] / self.eigenvalues.sum()).numpy()
        if coords.shape[1] < 2:  # too few dimensions for a second component: that axis is 0
            coords, explained = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1]))), np.pad(explained, (0, 2 - len(explained)))
        return coords.astype(np.float32), explained

    def length_correlation(self) -> float:
        """How closely PC1 follows the embeddings' lengths: |Pearson r| of the two."""
        coords, _ = self.project(0)
        lengths = self.W_E.detach().to(torch.float64).cpu().norm(dim=1).numpy()
        if coords[:, 0].std() == 0 or lengths.std() == 0:
            return 0.0
        return float(abs(np.corrcoef(coords[:, 0], lengths)[0, 1]))


def embedding_pca(W_E: torch.Tensor, unit: bool = False, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``EmbeddingPCA(W_E, unit).project(first)``."""
    return EmbeddingPCA(W_E, unit).project(first)


def length_correlation(W_E: torch.Tensor) -> float:
    """How closely the raw PC1 follows the embeddings' lengths: |Pearson r| of the two."""
    return EmbeddingPCA(W_E).length_correlation()


def nearest_tokens(W_E: torch.Tensor, token_id: int, k: int = 10) -> list[tuple[int, float]]:
    """The k other tokens whose embeddings have the highest cosine similarity to token_id's."""
    X = W_E.detach().to(torch.float64)
    unit = X / X.norm(dim=1, keepdim=True).clamp_min(1e-30)
    similarity = unit @ unit[token_id]
    similarity[token_id] = -math.inf
    values, ids = similarity.topk(min(k, len(X) - 1))
    return [(int(i), float(v)) for i, v in zip(ids, values)]


def positional_table(model: Transformer, layer: int = 0, rows: int = 512) -> tuple[np.ndarray, str, str]:
    """(table, what it is, its column axis) for the first ``rows`` positions: the learned table
    W_pos, or for RoPE the cosine of each position's rotation angle per rotated pair in
    ``layer`` (the model's own angles: partial rotary, scaling and a local layer's own base
    included)."""
    cfg = model.cfg
    rows = min(rows, cfg.n_ctx)
    if cfg.positional == "none":
        raise GlassboxError(NO_POSITIONS)
    if cfg.positional == "table":
        return (to_numpy(model.pos_embed.W_pos[:rows]), "pos_embed.W_pos: added to each token's embedding", "d_model")
    attn = cast(Block, model.blocks[layer]).attn  # an nn.ModuleList's items are typed as any Module
    cos, _ = rope_angles(attn.inv_freq, 0, rows, torch.float64)
    rotary_dim = cfg.rotary_dim
    assert rotary_dim is not None, "ModelConfig sets it for RoPE"
    pairs = rotary_dim // 2
    share = (
        ""
        if rotary_dim == cfg.d_head
        else (
            f"; only the first {rotary_dim} of each head's {cfg.d_head} features rotate, the other "
            f"{cfg.d_head - rotary_dim} pass unchanged"
        )
    )
    local = " (a local layer, with its own base)" if cfg.is_local(layer) and cfg.local_rope_base else ""
    return (
        cos[:, :pairs].cpu().numpy(),
        f"RoPE in {block_label(layer)}{local}: cos(position × θ_i) for each of the {pairs} rotated pairs of features, "
        f"rotating q and k{share}",
        "rotated pair i",
    )
