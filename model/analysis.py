"""What the explorer shows, computed from a trace and the model's weights.

Everything here is tensor math on the engine's own tensors (no Streamlit), so the UI only
selects and formats, and each quantity can be tested against an independent reference:
parameter counts per part of the pipeline, the PCA of the embedding matrix and cosine
neighbours, the positional table, a head's Q·K dot product, LayerNorm and FFN summaries,
each block's contribution to the residual stream, the logit lens, the gradient's norm along
the residual stream, dead ReLU neurons, input saliency, and every weight gradient written as
the product it is. It also decides what a trace captures and keeps traces in a bounded cache.
"""

from __future__ import annotations

import io
import math
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable

import numpy as np
import torch

from .trace import GRAD, Target, Trace, run_trace
from .transformer import ModelConfig, Transformer

# ---- the pipeline and its parameters ---------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One part of the pipeline: its parameters (name, shape) and how many numbers they hold."""

    key: str  # "embed", "pos", "blocks.0.attn", "blocks.0.norms", "blocks.0.mlp", "ln_final", "head"
    label: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    note: str = ""

    @property
    def count(self) -> int:
        return sum(math.prod(shape) for _, shape in self.params)


def parts(model: Transformer) -> list[Part]:
    """The model's parts in forward order; their counts add up to the model's parameters."""
    cfg = model.cfg
    params = {name: tuple(p.shape) for name, p in model.named_parameters()}

    def under(prefix: str) -> tuple:
        return tuple((n, s) for n, s in params.items() if n.startswith(prefix))

    out = [Part("embed", "token embedding", under("embed."))]
    if cfg.positional == "table":
        out.append(Part("pos", "positions", under("pos_embed.")))
    else:
        out.append(Part("pos", "positions (RoPE)", (), "rotations inside attention: no parameters"))
    for i in range(cfg.n_layers):
        p = f"blocks.{i}."
        out += [Part(p + "attn", f"block {i} attention", under(p + "attn.")),
                Part(p + "norms", f"block {i} {cfg.norm}s", under(p + "ln1.") + under(p + "ln2.")),
                Part(p + "mlp", f"block {i} MLP", under(p + "mlp."))]
    if cfg.final_norm:
        out.append(Part("ln_final", f"final {cfg.norm}", under("ln_final.")))
    if cfg.tie_embeddings:
        out.append(Part("head", "output head", (), "tied: the head is W_Eᵀ, counted once under the embedding"))
    else:
        out.append(Part("head", "output head", under("unembed.")))
    return out


def dims(name: str, cfg: ModelConfig) -> tuple[str, ...]:
    """The axis names of a trace tensor or parameter, for labels and CSV headers."""
    name = name.removeprefix(GRAD)
    last = name.split(".")[-1]
    if last in ("hook_pattern", "hook_scores", "hook_scores_masked"):
        return ("head", "query", "key")
    if last in ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_z"):
        return ("head", "position", "d_head")
    if last == "hook_result":
        return ("head", "position", "d_model")
    if last in ("hook_pre", "hook_post", "hook_gate", "hook_linear"):
        return ("position", "neuron")
    if last in ("hook_logits", "hook_log_probs", "hook_probs"):
        return ("position", "vocab")
    if last in ("hook_mean", "hook_scale", "hook_loss"):
        return ("position",)
    if last.startswith("hook_"):
        return ("position", "d_model")
    return {  # parameters
        "W_E": ("vocab", "d_model"), "W_pos": ("position", "d_model"), "W_U": ("d_model", "vocab"),
        "W_Q": ("head", "d_model", "d_head"), "W_K": ("head", "d_model", "d_head"),
        "W_V": ("head", "d_model", "d_head"), "W_O": ("head", "d_head", "d_model"),
        "b_Q": ("head", "d_head"), "b_K": ("head", "d_head"), "b_V": ("head", "d_head"),
        "W_in": ("d_model", "neuron"), "W_gate": ("d_model", "neuron"), "W_out": ("neuron", "d_model"),
        "b_in": ("neuron",), "b_gate": ("neuron",),
    }.get(last, ("d_model",))


def to_csv(array: np.ndarray, axes: tuple[str, ...]) -> str:
    """One row per cell: its index along every axis, then its value, with enough digits to
    read back the exact float (17 for float64, 9 for float32)."""
    array = np.asarray(array)
    index = np.indices(array.shape).reshape(array.ndim, -1).T
    table = np.column_stack([index.astype(np.float64), array.ravel().astype(np.float64)])
    digits = 9 if array.dtype == np.float32 else 17
    buffer = io.StringIO()
    np.savetxt(buffer, table, fmt=["%d"] * array.ndim + [f"%.{digits}g"], delimiter=",", header=",".join(axes + ("value",)),
               comments="")
    return buffer.getvalue()


def npz_bytes(trace: Trace) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **trace.to_numpy())
    return buffer.getvalue()


# ---- what a trace holds, what it costs, and a bounded cache of traces ------------------------

@dataclass(frozen=True)
class Needs:
    """What a view reads from a trace: tensor name patterns, and whether it shows gradients."""

    names: tuple[str, ...]
    backward: bool = False


def trace_bytes(trace: Trace) -> int:
    return sum(t.nbytes for t in trace.activations.values()) + sum(t.nbytes for t in trace.grads.values())


_probes: "weakref.WeakKeyDictionary[Transformer, tuple]" = weakref.WeakKeyDictionary()


def _probe(model: Transformer) -> tuple[tuple[float, float, float], list[str]]:
    """Every captured shape is constant, linear or quadratic (attention) in the length, so three
    short traces give the exact polynomial of a full trace's bytes, and its tensor names.
    Measured once per model object."""
    if model not in _probes:
        lengths = [t for t in (1, 2, 3) if t <= model.cfg.n_ctx]
        traces = [run_trace(model, [0] * t, backward=True, target=Target(0)) for t in lengths]
        coefficients = np.polyfit(lengths, [trace_bytes(t) for t in traces], len(lengths) - 1)[::-1]
        _probes[model] = (tuple(float(c) for c in coefficients) + (0.0,) * (3 - len(lengths)), traces[0].names())
    return _probes[model]


def full_trace_bytes(model: Transformer, n_tokens: int) -> int:
    """Bytes of a trace with every tensor and every gradient, for ``n_tokens`` tokens."""
    a, b, c = _probe(model)[0]
    return int(round(a + b * n_tokens + c * n_tokens ** 2))


def trace_names(model: Transformer) -> list[str]:
    """The name of every tensor a full trace holds: activations, then gradients."""
    return list(_probe(model)[1])


def capture_plan(model: Transformer, n_tokens: int, needs: Needs, budget: int = 2 * 2**30
                 ) -> tuple[tuple[str, ...] | None, bool]:
    """(names, backward) for run_trace: everything, forward and backward, when that fits in
    ``budget`` bytes (one trace then serves every view); otherwise only what the open view needs."""
    if full_trace_bytes(model, n_tokens) <= budget:
        return None, True
    return needs.names, needs.backward


class TraceCache:
    """Traces by key, least recently used dropped first once they hold more than ``max_bytes``
    (the newest always stays). Thread-safe; the traces it hands out must not be modified."""

    def __init__(self, max_bytes: int = 3 * 2**30, max_entries: int = 16):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._traces: OrderedDict[Hashable, tuple[Trace, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], Trace]) -> Trace:
        with self._lock:
            if key in self._traces:
                self._traces.move_to_end(key)
                return self._traces[key][0]
        trace = compute()  # outside the lock: other sessions' cached traces stay available
        with self._lock:
            self._traces[key] = (trace, trace_bytes(trace))
            self._traces.move_to_end(key)
            while len(self._traces) > 1 and (len(self._traces) > self.max_entries or self.nbytes() > self.max_bytes):
                self._traces.popitem(last=False)
        return trace

    def nbytes(self) -> int:
        return sum(size for _, size in self._traces.values())

    def __len__(self) -> int:
        return len(self._traces)


# ---- downsampling for overviews ---------------------------------------------------------------

def downsample(values: np.ndarray, max_rows: int, max_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of blocks of adjacent cells so that the result is at most max_rows × max_cols.
    Returns it with the first row and column index of each block. NaN cells are left out of
    the means (−∞, a masked score, counts as NaN here)."""
    values = np.where(np.isfinite(values), values, np.nan).astype(np.float32)
    row_starts = np.unique(np.linspace(0, values.shape[0], min(max_rows, values.shape[0]) + 1).astype(int))[:-1]
    col_starts = np.unique(np.linspace(0, values.shape[1], min(max_cols, values.shape[1]) + 1).astype(int))[:-1]
    present = ~np.isnan(values)
    sums = np.add.reduceat(np.add.reduceat(np.where(present, values, 0), row_starts, 0), col_starts, 1)
    counts = np.add.reduceat(np.add.reduceat(present.astype(np.float32), row_starts, 0), col_starts, 1)
    with np.errstate(invalid="ignore"):
        return (sums / counts).astype(np.float32), row_starts, col_starts


def tile(panels: list[list[np.ndarray]], size: int) -> np.ndarray:
    """A grid of square panels (each downsampled to at most size × size) in one array, NaN in
    the one-cell gutters: one heatmap draws all layers × heads at once."""
    n_rows, n_cols = len(panels), len(panels[0])
    out = np.full((n_rows * (size + 1) - 1, n_cols * (size + 1) - 1), np.nan, dtype=np.float32)
    for r, row in enumerate(panels):
        for c, panel in enumerate(row):
            small = downsample(panel, size, size)[0]
            out[r * (size + 1): r * (size + 1) + small.shape[0], c * (size + 1): c * (size + 1) + small.shape[1]] = small
    return out


# ---- tokens and embeddings --------------------------------------------------------------------

def embedding_pca(W_E: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Every token's embedding projected on the first two principal components, and the
    fraction of the variance each explains (eigenvectors of the d_model × d_model covariance,
    in float64: fast even for a 50,257-token vocabulary)."""
    X = W_E.detach().to(torch.float64).cpu()
    centred = X - X.mean(0)
    covariance = centred.T @ centred / max(len(X) - 1, 1)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
    order = eigenvalues.argsort(descending=True)[:2]
    components = eigenvectors[:, order]
    components = components * torch.sign(components[components.abs().argmax(0), torch.arange(components.shape[1])])
    coords = (centred @ components).numpy()
    explained = (eigenvalues[order] / eigenvalues.sum()).numpy()
    if coords.shape[1] < 2:  # a 1-dimensional model: the second axis is 0
        coords, explained = np.pad(coords, ((0, 0), (0, 1))), np.pad(explained, (0, 1))
    return coords.astype(np.float32), explained


def nearest_tokens(W_E: torch.Tensor, token_id: int, k: int = 10) -> list[tuple[int, float]]:
    """The k other tokens whose embeddings have the highest cosine similarity to token_id's."""
    X = W_E.detach().to(torch.float64)
    unit = X / X.norm(dim=1, keepdim=True).clamp_min(1e-30)
    similarity = unit @ unit[token_id]
    similarity[token_id] = -math.inf
    values, ids = similarity.topk(min(k, len(X) - 1))
    return [(int(i), float(v)) for i, v in zip(ids, values)]


def positional_table(model: Transformer) -> tuple[np.ndarray, str, str]:
    """(table, what it is, its column axis): the learned or given table W_pos, or for RoPE the
    cosine of each position's rotation angle per frequency pair."""
    cfg = model.cfg
    if cfg.positional == "table":
        return model.pos_embed.W_pos.detach().cpu().numpy(), "pos_embed.W_pos: added to each token's embedding", "d_model"
    cos = model.blocks[0].attn.rope_cos[:, : cfg.d_head // 2]
    return (cos.cpu().numpy(), f"RoPE: cos(position × θ_i), θ_i = {cfg.rope_base:g}^(−2i/d_head), rotating q and k",
            "frequency pair i")


# ---- attention --------------------------------------------------------------------------------

def kv_head(cfg: ModelConfig, head: int) -> int:
    """The key/value head a query head reads (grouped-query attention shares them)."""
    return head // (cfg.n_heads // cfg.n_kv_heads)


@dataclass(frozen=True)
class Pair:
    q: np.ndarray  # the query vector (after RoPE if the model uses it)
    k: np.ndarray
    products: np.ndarray  # q_i * k_i
    scale: float  # sqrt(d_head)
    score: float  # sum(products) / scale, recomputed
    recorded: float  # the trace's hook_scores entry


def attention_pair(trace: Trace, cfg: ModelConfig, layer: int, head: int, query: int, key: int) -> Pair:
    """The score of query position ``query`` for key position ``key``, written out."""
    p = f"blocks.{layer}.attn."
    q_name, k_name = (p + "hook_rot_q", p + "hook_rot_k") if cfg.positional == "rope" else (p + "hook_q", p + "hook_k")
    q = trace[q_name][head, query].to(torch.float64).cpu().numpy()
    k = trace[k_name][kv_head(cfg, head), key].to(torch.float64).cpu().numpy()
    products = q * k
    scale = math.sqrt(cfg.d_head)
    return Pair(q, k, products, scale, float(products.sum() / scale), float(trace[p + "hook_scores"][head, query, key]))


def attention_needs(layer: int) -> Needs:
    return Needs((f"blocks.{layer}.attn.*", "blocks.*.attn.hook_pattern", f"blocks.{layer}.ln1.hook_out"))


# ---- LayerNorm and FFN ------------------------------------------------------------------------

def norm_prefixes(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(prefix of a norm's tensors, name of its input tensor), in forward order."""
    out = []
    for i in range(cfg.n_layers):
        out += [(f"blocks.{i}.ln1.", f"blocks.{i}.hook_resid_pre"), (f"blocks.{i}.ln2.", f"blocks.{i}.hook_resid_mid")]
    if cfg.final_norm:
        out.append(("ln_final.", f"blocks.{cfg.n_layers - 1}.hook_resid_post"))
    return out


def norm_summary(trace: Trace, cfg: ModelConfig, prefix: str, input_name: str) -> dict[str, np.ndarray]:
    """Per position: the input's mean and standard deviation recomputed from the input, the
    engine's recorded mean and scale, and the normalised vector's mean and std (0 and ~1)."""
    x = trace[input_name].to(torch.float64)
    normalized = trace[prefix + "hook_normalized"].to(torch.float64)
    if cfg.norm == "layernorm":
        out = {"input mean": x.mean(-1), "mean (recorded)": trace[prefix + "hook_mean"].to(torch.float64),
               "input std": x.std(-1, correction=0)}
    else:  # RMSNorm divides by the root mean square, not the standard deviation
        out = {"input rms": x.pow(2).mean(-1).sqrt()}
    out |= {"scale (recorded)": trace[prefix + "hook_scale"].to(torch.float64),
            "normalized mean": normalized.mean(-1), "normalized std": normalized.std(-1, correction=0)}
    return {k: v.cpu().numpy() for k, v in out.items()}


def active(trace: Trace, cfg: ModelConfig, layer: int) -> torch.Tensor:
    """(positions, neurons) booleans: the neuron passes signal. ReLU: output > 0; smooth
    activations (GELU, SiLU) have no exact off: pre-activation > 0."""
    p = f"blocks.{layer}.mlp."
    return trace[p + "hook_post"] > 0 if cfg.activation == "relu" and not cfg.gated_mlp else trace[p + "hook_pre"] > 0


@dataclass(frozen=True)
class Neuron:
    index: int
    pre: float
    post: float
    write: float  # |post| × ‖W_out[n]‖: the size of what it adds to the residual stream


def top_neurons(model: Transformer, trace: Trace, layer: int, position: int, k: int = 10) -> list[Neuron]:
    """The neurons that write most into the residual stream at ``position``."""
    p = f"blocks.{layer}.mlp."
    pre, post = trace[p + "hook_pre"][position], trace[p + "hook_post"][position]
    write = post.abs() * model.blocks[layer].mlp.W_out.detach().norm(dim=1)
    order = write.argsort(descending=True)[:k]
    return [Neuron(int(n), float(pre[n]), float(post[n]), float(write[n])) for n in order]


# ---- the residual stream and the logit lens ---------------------------------------------------

def contribution_norms(trace: Trace, cfg: ModelConfig) -> tuple[list[str], np.ndarray]:
    """L2 norm per position of what each part adds to the residual stream: the embeddings
    (with positions), then every attention and MLP output, in order."""
    labels, rows = ["embeddings"], [trace["blocks.0.hook_resid_pre"]]
    for i in range(cfg.n_layers):
        labels += [f"block {i} attention", f"block {i} MLP"]
        rows += [trace[f"blocks.{i}.hook_attn_out"], trace[f"blocks.{i}.hook_mlp_out"]]
    return labels, torch.stack([r.to(torch.float64).norm(dim=-1) for r in rows]).cpu().numpy()


def residual_points(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(label, tensor) of the residual stream before block 0 and after every block."""
    return [("embeddings", "blocks.0.hook_resid_pre")] + [
        (f"after block {i}", f"blocks.{i}.hook_resid_post") for i in range(cfg.n_layers)]


@dataclass(frozen=True)
class Lens:
    labels: list[str]
    positions: list[int]
    top_ids: np.ndarray  # (points, len(positions), k)
    top_probs: np.ndarray  # (points, len(positions), k)
    chosen: np.ndarray  # (points, len(positions)): the probability of the chosen token


@torch.no_grad()
def logit_lens(model: Transformer, trace: Trace, token_id: int, k: int = 5, positions: list[int] | None = None) -> Lens:
    """The final norm and the output head applied to the residual stream after every block:
    what the model would predict if it stopped there. The last point is the model's own
    prediction. Only at ``positions`` (default all): the head is the costly part, a
    (d_model × vocab) product per position and point."""
    points = residual_points(model.cfg)
    positions = list(range(len(trace.tokens))) if positions is None else list(positions)
    top_ids, top_probs, chosen = [], [], []
    for _, name in points:
        x = trace[name][positions][None]
        if model.cfg.final_norm:
            x = model.ln_final(x)
        probs = (x @ model.W_U)[0].softmax(-1)
        values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
        top_ids.append(ids.cpu().numpy())
        top_probs.append(values.cpu().numpy())
        chosen.append(probs[:, token_id].cpu().numpy())
    return Lens([label for label, _ in points], positions, np.stack(top_ids), np.stack(top_probs), np.stack(chosen))


# ---- the backward pass ------------------------------------------------------------------------

@dataclass(frozen=True)
class BackwardStep:
    key: str
    title: str
    sentence: str
    names: tuple[str, ...]  # gradient tensors shown, "grad:..."
    weights: tuple[str, ...] = ()  # parameters whose gradient this step produces
    part: str = ""  # the Part of the pipeline it runs through


def backward_steps(model: Transformer) -> list[BackwardStep]:
    """The backward pass in the order autograd runs it, from the loss to the embeddings."""
    cfg = model.cfg
    params = dict(model.named_parameters())
    g = lambda *names: tuple(GRAD + n for n in names)  # noqa: E731
    w = lambda prefix: tuple(n for n in params if n.startswith(prefix))  # noqa: E731
    steps = [BackwardStep("logits", "loss → logits",
                          "∂L/∂logits = p − y at each position with a target (averaged over them), 0 elsewhere.",
                          g("hook_logits"), () if cfg.tie_embeddings else ("unembed.W_U",), "head")]
    if cfg.final_norm:
        steps.append(BackwardStep("ln_final", f"final {cfg.norm}",
                                  "Through the head (∂L/∂logits · W_Uᵀ), then back through the norm's scale and shift.",
                                  g("ln_final.hook_out", "ln_final.hook_normalized",
                                    f"blocks.{cfg.n_layers - 1}.hook_resid_post"), w("ln_final."), "ln_final"))
    mlp_inner = ("hook_post", "hook_gate", "hook_linear", "hook_pre") if cfg.gated_mlp else ("hook_post", "hook_pre")
    for i in reversed(range(cfg.n_layers)):
        p = f"blocks.{i}."
        steps += [
            BackwardStep(f"b{i}-mlp", f"block {i} MLP",
                         f"∂L/∂mlp_out is ∂L/∂resid_post (the residual passes it on unchanged); back through W_out, "
                         f"the {cfg.activation} (its derivative at each pre-activation) and W_in.",
                         g(p + "hook_mlp_out", *(p + "mlp." + n for n in mlp_inner)), w(p + "mlp."), p + "mlp"),
            BackwardStep(f"b{i}-ln2", f"block {i} {cfg.norm} 2 and the residual split",
                         "∂L/∂resid_mid = ∂L/∂resid_post (the skip) + what comes back through the norm and the MLP.",
                         g(p + "ln2.hook_out", p + "ln2.hook_normalized", p + "hook_resid_mid"), w(p + "ln2."), p + "norms"),
            BackwardStep(f"b{i}-attn-out", f"block {i} attention output",
                         "∂L/∂attn_out = ∂L/∂resid_mid; each head's share after W_O, then its weighted values z.",
                         g(p + "hook_attn_out", p + "attn.hook_result", p + "attn.hook_z"), w(p + "attn.W_O") + w(p + "attn.b_O"),
                         p + "attn"),
            BackwardStep(f"b{i}-pattern", f"block {i} attention pattern and softmax",
                         "∂L/∂pattern = ∂L/∂z · vᵀ is not zero above the diagonal, but the softmax passes none of it "
                         "to the masked scores: their gradient is exactly 0.",
                         g(p + "attn.hook_pattern", p + "attn.hook_scores_masked", p + "attn.hook_scores"), (), p + "attn"),
            BackwardStep(f"b{i}-qkv", f"block {i} Q, K, V",
                         "∂L/∂q = ∂L/∂scores · k / √d_head, ∂L/∂k = ∂L/∂scoresᵀ · q / √d_head, ∂L/∂v = patternᵀ · ∂L/∂z; "
                         "then W_Q, W_K, W_V.",
                         g(p + "attn.hook_q", p + "attn.hook_k", p + "attn.hook_v"),
                         tuple(n for n in w(p + "attn.") if not n.endswith(("W_O", "b_O"))), p + "attn"),
            BackwardStep(f"b{i}-ln1", f"block {i} {cfg.norm} 1 and the residual split",
                         "∂L/∂resid_pre = ∂L/∂resid_mid (the skip) + what comes back through the norm and attention.",
                         g(p + "ln1.hook_out", p + "ln1.hook_normalized", p + "hook_resid_pre"), w(p + "ln1."), p + "norms"),
        ]
    steps.append(BackwardStep("embed", "embeddings",
                              "The token embedding and the position rows receive ∂L/∂resid_pre of block 0, row by row"
                              + (" (W_E also receives the head's gradient: it is tied)." if cfg.tie_embeddings else "."),
                              g("hook_embed", *(("hook_pos_embed",) if cfg.positional == "table" else ())),
                              w("embed.") + w("pos_embed."), "embed"))
    return steps


def gradient_norms(trace: Trace, cfg: ModelConfig) -> tuple[list[str], np.ndarray]:
    """‖∂L/∂residual‖ per position along the residual stream, from the embeddings (bottom) to
    the last block's output: the skip connections carry the gradient down undiminished."""
    points = residual_points(cfg)
    return [label for label, _ in points], torch.stack(
        [trace[GRAD + name].to(torch.float64).norm(dim=-1) for _, name in points]).cpu().numpy()


@dataclass(frozen=True)
class Dead:
    neurons: np.ndarray  # indices of neurons off at every position of the prompt
    zero_grad_fraction: float  # of ∂L/∂pre entries that are exactly 0
    off_fraction: float  # of (position, neuron) pairs that are off
    weight_grad_max: float  # max |∂L/∂W_in| over the dead neurons' columns: exactly 0 for ReLU


def dead_neurons(trace: Trace, cfg: ModelConfig, layer: int) -> Dead:
    """ReLU passes no gradient where it is off; a neuron off at every position gets no
    gradient at all, so its W_in column and bias get none either."""
    p = f"blocks.{layer}.mlp."
    off = ~active(trace, cfg, layer)
    dead = off.all(0).nonzero()[:, 0]
    grad_pre = trace[GRAD + p + "hook_pre"]
    W_in = trace.grads.get(GRAD + p + ("W_gate" if cfg.gated_mlp else "W_in"))
    weight_max = float(W_in[:, dead].abs().max()) if W_in is not None and len(dead) else 0.0
    return Dead(dead.cpu().numpy(), float((grad_pre == 0).double().mean()), float(off.double().mean()), weight_max)


def saliency(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per token: gradient × input (∂L/∂embedding · embedding, summed over d_model: the
    first-order change of the loss if the token's embedding were removed, with the sign), and
    the gradient's norm."""
    g, x = trace[GRAD + "hook_embed"].to(torch.float64), trace["hook_embed"].to(torch.float64)
    return (g * x).sum(-1).cpu().numpy(), g.norm(dim=-1).cpu().numpy()


def weight_gradient_product(cfg: ModelConfig, name: str) -> tuple[str, str] | None:
    """(input tensor, output-gradient tensor) whose product is this weight's gradient:
    ∂L/∂W = Σ_positions inputᵀ · ∂L/∂output (per head for attention). None where the
    gradient is not one such product (tied W_E, positions, norms' scale and shift)."""
    parts_ = name.split(".")
    if parts_[0] == "unembed":
        return (f"ln_final.hook_out" if cfg.final_norm else f"blocks.{cfg.n_layers - 1}.hook_resid_post", "hook_logits")
    if parts_[0] != "blocks":
        return None
    p, kind = f"blocks.{parts_[1]}.", parts_[-1]
    return {"W_Q": (p + "ln1.hook_out", p + "attn.hook_q"), "W_K": (p + "ln1.hook_out", p + "attn.hook_k"),
            "W_V": (p + "ln1.hook_out", p + "attn.hook_v"), "W_O": (p + "attn.hook_z", p + "hook_attn_out"),
            "W_in": (p + "ln2.hook_out", p + ("mlp.hook_linear" if cfg.gated_mlp else "mlp.hook_pre")),
            "W_gate": (p + "ln2.hook_out", p + "mlp.hook_pre"),
            "W_out": (p + "mlp.hook_post", p + "hook_mlp_out")}.get(kind)


def recomputed_weight_gradient(trace: Trace, cfg: ModelConfig, name: str) -> torch.Tensor | None:
    """The weight's gradient rebuilt from the captured input and output gradient, in float64,
    to set beside autograd's."""
    product = weight_gradient_product(cfg, name)
    if product is None:
        return None
    x, dy = trace[product[0]].to(torch.float64), trace[GRAD + product[1]].to(torch.float64)
    if name.endswith("W_O"):  # z is per head: (H, T, dh); attn_out is (T, D)
        return torch.einsum("htd,te->hde", x, dy)
    if dy.dim() == 3:  # W_Q/W_K/W_V: input (T, D), gradient per head (H, T, dh)
        return torch.einsum("td,hte->hde", x, dy)
    return x.T @ dy
