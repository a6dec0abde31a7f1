"""The embedding matrix (PCA, cosine neighbours) and the positional table."""

from __future__ import annotations

import math

import numpy as np
import torch

from model.engine import Transformer, to_numpy
from model.engine.rope import rope_angles


def embedding_pca(W_E: torch.Tensor, unit: bool = False, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every token's embedding projected on two principal components, first + 1 and first + 2
    (0: PC1 and PC2), and the fraction of the variance each explains (eigenvectors of the
    d_model × d_model covariance, in float64: fast even for a 50,257-token vocabulary).
    ``unit`` scales each embedding to length 1 first: the geometry of the cosine neighbours,
    where a raw PC1 that only follows how long the embeddings are (frequent tokens grow long)
    no longer flattens the rest."""
    X = W_E.detach().to(torch.float64).cpu()
    if unit:
        X = X / X.norm(dim=1, keepdim=True).clamp_min(1e-30)
    centred = X - X.mean(0)
    covariance = centred.T @ centred / max(len(X) - 1, 1)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
    order = eigenvalues.argsort(descending=True)[first:first + 2]
    components = eigenvectors[:, order]
    components = components * torch.sign(components[components.abs().argmax(0), torch.arange(components.shape[1])])
    coords = (centred @ components).numpy()
    explained = (eigenvalues[order] / eigenvalues.sum()).numpy()
    if coords.shape[1] < 2:  # too few dimensions for a second component: that axis is 0
        coords, explained = np.pad(coords, ((0, 0), (0, 1))), np.pad(explained, (0, 1))
    return coords.astype(np.float32), explained


def length_correlation(W_E: torch.Tensor) -> float:
    """How closely the raw PC1 follows the embeddings' lengths: |Pearson r| of the two."""
    coords, _ = embedding_pca(W_E)
    lengths = W_E.detach().to(torch.float64).cpu().norm(dim=1).numpy()
    if coords[:, 0].std() == 0 or lengths.std() == 0:
        return 0.0
    return float(abs(np.corrcoef(coords[:, 0], lengths)[0, 1]))


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
    if cfg.positional == "table":
        return (to_numpy(model.pos_embed.W_pos[:rows]), "pos_embed.W_pos: added to each token's embedding",
                "d_model")
    attn = model.blocks[layer].attn
    cos, _ = rope_angles(attn.inv_freq, 0, rows, torch.float64)
    pairs = cfg.rotary_dim // 2
    share = "" if cfg.rotary_dim == cfg.d_head else (
        f"; only the first {cfg.rotary_dim} of each head's {cfg.d_head} features rotate, the other "
        f"{cfg.d_head - cfg.rotary_dim} pass unchanged")
    local = " (a local layer, with its own base)" if cfg.is_local(layer) and cfg.local_rope_base else ""
    return (cos[:, :pairs].cpu().numpy(),
            f"RoPE in block {layer}{local}: cos(position × θ_i) for each of the {pairs} rotated pairs of features, "
            f"rotating q and k{share}", "rotated pair i")
