"""A prompt seen through a sparse autoencoder's features (glassbox.model.engine.sae).

- ``features``: each token's strongest features with their activations, how well the SAE
  reconstructs the tensor it reads (the error's norm at each position, beside the tensor's),
  and the next-token loss with the reconstruction put in the tensor's place ("spliced"): the
  price of reading the model through the SAE.
- ``logit_effect``: what one unit of a feature, written into the residual stream, does to each
  token's logit directly: its decoder row through the final norm (its scale held at the
  prompt's last position, as direct logit attribution holds it) and the unembedding.
- ``ablate_feature``: the next-token distribution with a feature's contribution taken out of the
  tensor (``x − a_f·W_dec[f]``; the SAE's error stays, so nothing else moves), beside the plain one.

Steering with a feature is ``Model.steer`` with its decoder row as the vector, at the tensor the
SAE writes (``steering_vector``).

Every pass runs the model with per-call edits (engine/edits.py): nothing is left on the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis.dla import linear_head
from glassbox.model.analysis.steering import STREAM_HOOKS
from glassbox.model.engine import GlassboxError, Transformer, check_prompt, run_trace
from glassbox.model.engine.edits import editing
from glassbox.model.engine.sae import SparseAutoencoder

COLUMNS = 24  # features kept for a position × feature grid


@dataclass
class Features:
    reads: str
    writes: str
    tokens: list[int]
    top_ids: np.ndarray  # position × top: the strongest features (−1 where fewer are active)
    top_values: np.ndarray  # position × top: their activations
    active: np.ndarray  # position: how many features are active (L0)
    error_norm: np.ndarray  # position: ‖x − x̂‖
    tensor_norm: np.ndarray  # position: ‖x‖ (centred where the SAE centres its input)
    loss: float  # mean next-token cross-entropy
    spliced_loss: float  # the same with the reconstruction in the tensor's place
    columns: np.ndarray  # the features that are among some position's strongest, strongest first (at most COLUMNS)
    column_values: np.ndarray  # position × columns: their activations everywhere

    @property
    def relative_error(self) -> np.ndarray:
        return self.error_norm / np.maximum(self.tensor_norm, 1e-30)


@dataclass
class LogitEffect:
    feature: int
    promoted_ids: list[int]
    promoted: list[float]  # logit change per unit activation, largest first
    suppressed_ids: list[int]
    suppressed: list[float]  # most negative first


@dataclass
class FeatureAblation:
    feature: int
    activations: np.ndarray  # position: the feature's activation
    plain: np.ndarray  # the next-token probabilities at the last position
    ablated: np.ndarray  # the same with the feature taken out at every position

    @property
    def kl(self) -> float:
        """KL(plain ‖ ablated), in nats."""
        p, q = self.plain.astype(np.float64), self.ablated.astype(np.float64)
        mask = p > 0
        return float((p[mask] * (np.log(p[mask]) - np.log(np.maximum(q[mask], 1e-300)))).sum())


def check_sae(model: Transformer, sae: SparseAutoencoder) -> None:
    """The SAE reads and writes tensors this model computes, of the widths it has."""
    if model.cfg.encoder_decoder:
        raise GlassboxError("Sparse autoencoders here read a decoder-only model's tensors; this is an encoder-decoder")
    for name, width in ((sae.reads, sae.d_in), (sae.writes, sae.W_dec.shape[-1])):
        try:
            probe = run_trace(model, [0], names=[name])
        except GlassboxError:  # no such tensor in this model
            raise GlassboxError(
                f"The SAE reads or writes {name}, which this model does not compute (`glassbox hooks` lists its names)"
            ) from None
        got = sae.rows(probe[name]).shape[-1] if name == sae.reads else sae.out_rows(probe[name]).shape[-1]
        if got != width:
            raise GlassboxError(
                f"The SAE expects {width} numbers at {name}; this model has {got} there (an SAE of another model?)"
            )


def _rewriting(sae: SparseAutoencoder, change) -> dict:
    """Edits that give ``change(out_rows, in_rows, activations)`` (position × d_out) to
    ``writes``, per sequence; the input is recorded first where it is another tensor."""
    seen: list[torch.Tensor] = []

    def read(tensor: torch.Tensor) -> torch.Tensor:
        seen.append(tensor)
        return tensor

    def write(tensor: torch.Tensor) -> torch.Tensor:
        inputs = seen.pop() if sae.transcoder else tensor
        rows = []
        for x_in, x_out in zip(inputs.unbind(0), tensor.unbind(0)):
            r_in = sae.rows(x_in)
            rows.append(sae.unrows(change(sae.out_rows(x_out), r_in, sae.encode(r_in)), x_out))
        return torch.stack(rows)

    return {sae.reads: read, sae.writes: write} if sae.transcoder else {sae.writes: write}


@torch.no_grad()
def features(model: Transformer, tokens: list[int], sae: SparseAutoencoder, top: int = 5) -> Features:
    check_prompt(model.cfg, tokens)
    wanted = [sae.reads, sae.writes, "hook_loss"]
    trace = run_trace(model, tokens, names=wanted)
    x = sae.rows(trace[sae.reads])
    a = sae.encode(x)
    target = sae.out_rows(trace[sae.writes])
    error = target - sae.decode(a, x)
    seen = target - target.mean(-1, keepdim=True) if sae.center_input else target
    values, ids = a.topk(min(top, sae.d_sae), dim=-1)
    ids = torch.where(values > 0, ids, -1)
    candidates = ids[ids >= 0].unique()
    columns = candidates[a[:, candidates].amax(0).argsort(descending=True, stable=True)][:COLUMNS]
    with editing(_rewriting(sae, lambda out, x_in, acts: sae.decode(acts, x_in))):
        spliced = run_trace(model, tokens, names=["hook_loss"])
    return Features(
        sae.reads,
        sae.writes,
        list(tokens),
        ids.cpu().numpy(),
        values.clamp(min=0).double().cpu().numpy(),
        (a > 0).sum(-1).cpu().numpy(),
        error.norm(dim=-1).double().cpu().numpy(),
        seen.norm(dim=-1).double().cpu().numpy(),
        _mean_loss(trace),
        _mean_loss(spliced),
        columns.cpu().numpy(),
        a[:, columns].double().cpu().numpy(),
    )


def _mean_loss(trace) -> float:
    loss = trace["hook_loss"]
    finite = loss[torch.isfinite(loss)]
    return float(finite.mean()) if finite.numel() else float("nan")


@torch.no_grad()
def logit_effect(model: Transformer, tokens: list[int], sae: SparseAutoencoder, feature: int, k: int = 10) -> LogitEffect:
    sae.check_feature(feature)
    why = linear_head(model.cfg)
    if why:
        raise GlassboxError(why)
    if not sae.writes.endswith(STREAM_HOOKS):
        raise GlassboxError(
            f"A feature's direct effect on the logits is read where it writes into the residual stream; "
            f"this SAE writes {sae.writes}"
        )
    check_prompt(model.cfg, tokens)
    x = sae.decoder_rows()[feature].to(torch.float64)
    if model.cfg.final_norm:
        scale = run_trace(model, tokens, names=["ln_final.hook_scale"])["ln_final.hook_scale"][-1]
        if model.cfg.norm == "layernorm":
            x = x - x.mean()
        x = x / scale.to(torch.float64) * model.ln_final.w.to(torch.float64)
    effect = x @ model.W_U.detach().to(torch.float64)
    up, down = effect.topk(min(k, effect.numel())), (-effect).topk(min(k, effect.numel()))
    return LogitEffect(feature, up.indices.tolist(), up.values.tolist(), down.indices.tolist(), (-down.values).tolist())


@torch.no_grad()
def ablate_feature(model: Transformer, tokens: list[int], sae: SparseAutoencoder, feature: int) -> FeatureAblation:
    sae.check_feature(feature)
    check_prompt(model.cfg, tokens)
    direction = sae.decoder_rows()[feature]
    trace = run_trace(model, tokens, names=[sae.reads, "hook_probs"])
    activations = sae.encode(sae.rows(trace[sae.reads]))[:, feature]
    with editing(_rewriting(sae, lambda out, x_in, acts: out - acts[:, feature, None] * direction)):
        ablated = run_trace(model, tokens, names=["hook_probs"])
    return FeatureAblation(
        feature,
        activations.double().cpu().numpy(),
        trace["hook_probs"][-1].double().cpu().numpy(),
        ablated["hook_probs"][-1].double().cpu().numpy(),
    )


def steering_vector(sae: SparseAutoencoder, feature: int) -> tuple[int, str, torch.Tensor]:
    """(block, hook, vector): the feature's decoder row, added where the SAE writes."""
    sae.check_feature(feature)
    block, _, hook = sae.writes.removeprefix("blocks.").partition(".")
    if not block.isdigit() or hook not in STREAM_HOOKS:
        raise GlassboxError(f"Steering adds to the residual stream; this SAE writes {sae.writes}")
    return int(block), hook, sae.decoder_rows()[feature]


@dataclass
class FeatureTokens:
    """What each feature of an SAE fires on over some texts: per feature, the tokens it put the
    most activation on (the token at the position read), and how concentrated that is."""

    positions: int  # the positions read, over every text
    fired: np.ndarray  # feature: at how many positions it was active
    total: np.ndarray  # feature: its summed activation
    top_ids: np.ndarray  # feature × k: the tokens with the most of its activation (−1: none)
    top_mass: np.ndarray  # feature × k: their share of its summed activation

    @property
    def share(self) -> np.ndarray:
        """feature: the share of its activation on its first token (0 where it never fires); a
        feature that fires on one token and almost nothing else has a meaning anyone can read."""
        return np.where(self.top_ids[:, 0] >= 0, self.top_mass[:, 0], 0.0)

    def clearest(self, min_fired: int = 5) -> list[int]:
        """The features that fired at least ``min_fired`` times, the most concentrated on one token
        first (ties: the most active first, then by number)."""
        live = np.flatnonzero(self.fired >= min_fired)
        return [int(f) for f in sorted(live, key=lambda f: (-round(float(self.share[f]), 6), -self.total[f], f))]


@torch.no_grad()
def feature_tokens(model: Transformer, texts: list[list[int]], sae: SparseAutoencoder, k: int = 3) -> FeatureTokens:
    """Over ``texts`` (each a token list, run alone), every feature's activation at every position,
    summed per token there: each feature's ``k`` tokens with the most of it. Kept sparse (feature,
    token) pairs, so a large vocabulary times many features costs only what fired."""
    keys, values, fired, positions = [], [], np.zeros(sae.d_sae, dtype=np.int64), 0
    vocab = model.cfg.vocab_size
    for tokens in texts:
        check_prompt(model.cfg, tokens)
        acts = sae.encode(sae.rows(run_trace(model, tokens, names=[sae.reads])[sae.reads])).double().cpu()
        pos, feature = torch.nonzero(acts > 0, as_tuple=True)
        keys.append(feature.numpy() * vocab + np.asarray(tokens)[pos.numpy()])
        values.append(acts[pos, feature].numpy())
        fired += np.bincount(feature.numpy(), minlength=sae.d_sae)
        positions += len(tokens)
    if not positions:
        raise GlassboxError("No texts to read the features over")
    unique, where = np.unique(np.concatenate(keys), return_inverse=True)
    mass = np.bincount(where, weights=np.concatenate(values), minlength=len(unique))
    features, token_ids = unique // vocab, unique % vocab
    total = np.bincount(features, weights=mass, minlength=sae.d_sae)
    order = np.lexsort((token_ids, -mass, features))  # per feature, most mass first (ties: lower token id)
    top_ids, top_mass = np.full((sae.d_sae, k), -1, dtype=np.int64), np.zeros((sae.d_sae, k))
    rank = np.arange(len(order)) - np.searchsorted(features[order], features[order])
    kept = order[rank < k]
    top_ids[features[kept], rank[rank < k]] = token_ids[kept]
    top_mass[features[kept], rank[rank < k]] = mass[kept] / total[features[kept]]
    return FeatureTokens(positions, fired, total, top_ids, top_mass)
