"""An attribution graph: why the model gave a token its logit, as direct linear effects between
input tokens, transcoder features, error terms and the target logit (circuit-tracer's definition).

The *replacement model*: each block's MLP output replaced by its transcoder's output from the
feature activations the real pass had, plus an error term (the real output minus the
transcoder's), so that it computes the real model's numbers exactly. With every attention
pattern and every norm's scale frozen at the real pass's values, the rest is affine: the logit
(and each feature's pre-activation) is a constant plus a linear function of the sources (token
embeddings, feature activations, error terms; positional rows and biases are in the constant).
A source's edge into a node is its value times the derivative of the node with respect to it, in
that frozen model; the edges into a node plus the constant (the frozen model with every source at
zero: the biases) are the node's value.

The sources are leaves of a forward pass with the freezing done by edits (model/engine/edits.py);
a batch of copies of them gives the edges into as many targets in one forward and one backward.
Transcoders here: SAELens's plain, JumpReLU and skip transcoders (a skip's ``x · W_skipᵀ`` is one
more linear path, from the MLP's input in the same frozen pass), one per block, reading any tensor
of its block before the MLP and writing ``blocks.L.hook_mlp_out``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from glassbox.model.engine import GlassboxError, Transformer, block_label, run_trace
from glassbox.model.engine.edits import editing
from glassbox.model.engine.sae import SparseAutoencoder

EMBEDDING = "hook_embed"  # a token's node: its embedding (a positional table's row is a constant, as in circuit-tracer)


@dataclass
class Node:
    kind: str  # "embedding", "feature", "error", "logit"
    position: int
    block: int | None = None  # a feature's or an error's block
    feature: int | None = None
    value: float = 0.0  # a feature's activation; the logit's value; else 0 (vector sources)

    @property
    def label(self) -> str:
        where = f"position {self.position}"
        if self.block is None:
            return f"{self.kind}, {where}"
        if self.kind == "feature":
            return f"{block_label(self.block)} feature {self.feature}, {where}"
        return f"{block_label(self.block)} error, {where}"  # a block's error term


@dataclass
class Graph:
    nodes: list[Node]  # the sources first (embeddings, features by block, errors), the target logit last
    edges: torch.Tensor  # (nodes, nodes) float64: edges[target, source], the direct effect of source on target
    bias: torch.Tensor  # (nodes,): each target's constant (the frozen model with every source at zero)
    target_value: float  # the real model's logit
    token: int  # the target token's id (its logit at the last position)
    probability: float = 0.0  # the real model's probability of that token there
    demeaned: bool = False  # the target is the logit less the mean logit (circuit-tracer's)
    _influence: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def completeness(self) -> float:
        """|Σ edges into the logit + its bias − the real logit|: 0 but for rounding."""
        return abs(float(self.edges[-1].sum() + self.bias[-1]) - self.target_value)

    def influence(self) -> torch.Tensor:
        """Each node's total (direct and indirect) influence on the logit: the logit's row of
        (I − A)⁻¹ − I, A the absolute edges normalised to sum to 1 into each node (circuit-tracer's).
        Solved once per graph (a dense system of the nodes' size), then kept."""
        if self._influence is None:
            a = self.edges.abs()
            a = a / a.sum(1, keepdim=True).clamp_min(1e-30)
            n = len(self.nodes)
            last = torch.eye(n, dtype=a.dtype)[-1]
            self._influence = torch.linalg.solve(torch.eye(n, dtype=a.dtype) - a.T, last) - last
        return self._influence

    def pruned(self, share: float = 0.8) -> list[int]:
        """The nodes (indices) that, most influential first, explain ``share`` of the total influence
        on the logit, and the logit."""
        influence = self.influence()[:-1]
        order = torch.argsort(influence, descending=True)
        total = float(influence.sum())
        kept, running = [], 0.0
        for i in order.tolist():
            if total <= 0 or running >= share * total:
                break
            kept.append(i)
            running += float(influence[i])
        return sorted(kept) + [len(self.nodes) - 1]


GRAPHED = ("transcoder", "jumprelu_transcoder", "skip_transcoder", "jumprelu_skip_transcoder")


def check_transcoders(model: Transformer, transcoders: list[SparseAutoencoder]) -> None:
    if len(transcoders) != model.cfg.n_layers:
        raise GlassboxError(f"One transcoder per block: {model.cfg.n_layers} blocks, {len(transcoders)} transcoders")
    for layer, t in enumerate(transcoders):
        if t.architecture not in GRAPHED:
            raise GlassboxError(
                f"{t.name or 'A transcoder'}: the graph takes {', '.join(GRAPHED)} (ReLU or JumpReLU), not {t.architecture}"
            )
        if t.writes != f"blocks.{layer}.hook_mlp_out" or not t.reads.startswith(f"blocks.{layer}."):
            raise GlassboxError(f"Transcoder {layer} must read block {layer}'s MLP input and write blocks.{layer}.hook_mlp_out")


def target_logit(logits: torch.Tensor, token: int, demeaned: bool) -> torch.Tensor:
    """The graph's target: ``token``'s logit, less the mean logit where ``demeaned`` (circuit-tracer's
    and Neuronpedia's target, unmoved by what shifts every logit alike)."""
    return logits[..., token] - logits.mean(-1) if demeaned else logits[..., token]


def _held(tensor: torch.Tensor):
    """An edit that puts ``tensor`` (one sequence's, or a batch's) in place of what the pass computed."""
    return lambda x: (tensor if tensor.dim() == x.dim() else tensor[None]).to(x.dtype).expand_as(x)


class ReplacementModel:
    """The real pass of ``tokens`` with its MLPs replaced by ``transcoders`` plus error terms, and
    ``targets(values)``: the frozen model (attention patterns and norm scales at the real pass's)
    with its sources set to ``values``, giving the active features' pre-activations then the logit
    of ``token`` at the last position. At the real sources it gives the real numbers."""

    def __init__(
        self, model: Transformer, tokens: list[int], transcoders: list[SparseAutoencoder], token: int, demeaned: bool = False
    ):
        check_transcoders(model, transcoders)
        self.model, self.tokens, self.transcoders, self.token = model, tokens, transcoders, token
        self.demeaned = demeaned
        cfg = model.cfg
        self.frozen = [f"blocks.{i}.{n}.hook_scale" for i in range(cfg.n_layers) for n in ("ln1", "ln2")] + [
            "ln_final.hook_scale"
        ]
        self.frozen += [f"blocks.{i}.attn.hook_pattern" for i in range(cfg.n_layers)]
        self.reads = [t.reads for t in transcoders]
        with torch.no_grad():
            real = run_trace(model, tokens, names=[EMBEDDING, *self.frozen, *self.reads, "blocks.*.hook_mlp_out", "hook_logits"])
        self.real = real
        dtype = model.embed.W_E.dtype
        acts = [t.encode(t.rows(real[t.reads])) for t in transcoders]  # position × d_sae, the real pass's
        errors = [real[f"blocks.{i}.hook_mlp_out"] - t.decode(acts[i], t.rows(real[t.reads])) for i, t in enumerate(transcoders)]
        self.sources = {EMBEDDING: real[EMBEDDING]} | {f"acts.{i}": a.to(dtype) for i, a in enumerate(acts)}
        self.sources |= {f"errors.{i}": e.to(dtype) for i, e in enumerate(errors)}
        # each block's active features: their positions and indices, in (position, feature) order
        self.active = [a.nonzero().T for a in acts]
        n = len(tokens)
        self.nodes = [Node("embedding", p) for p in range(n)]
        self.nodes += [
            Node("feature", p, i, f, float(acts[i][p, f])) for i in range(cfg.n_layers) for p, f in self.active[i].T.tolist()
        ]
        self.nodes += [Node("error", p, i) for i in range(cfg.n_layers) for p in range(n)]
        self.nodes.append(Node("logit", n - 1, value=float(target_logit(real["hook_logits"][-1], token, demeaned))))

    def targets(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """The active features' pre-activations (``nodes``' order), then the logit, as one vector;
        for a batch of sources (a leading batch axis on every value), one row per batch element."""
        edits = {EMBEDDING: _held(values[EMBEDDING])}  # the sources
        edits |= {name: _held(self.real[name]) for name in self.frozen}  # the patterns and scales, frozen
        this_pass: dict = {}  # its editor, whose tensors hold the MLPs' inputs as the pass computes them (a skip reads them)
        for i, t in enumerate(self.transcoders):  # each MLP: its transcoder's output, and the error
            edits[f"blocks.{i}.hook_mlp_out"] = self._mlp_out(
                t, values[f"acts.{i}"] @ t.W_dec + t.b_dec + values[f"errors.{i}"], this_pass
            )
        batched = values[EMBEDDING].dim() == 3
        batch = values[EMBEDDING].shape[0] if batched else 1
        with editing(edits, keep=self.reads) as editor:
            this_pass["editor"] = editor
            logits = self.model(torch.tensor([self.tokens] * batch, device=self.model.device)).logits[:, -1]
        logit = target_logit(logits, self.token, self.demeaned)
        pre = [t.pre_activations(editor.tensors[t.reads]) for t in self.transcoders]  # batch × position × d_sae
        features = [pre[block][:, positions, features] for block, (positions, features) in enumerate(self.active)]
        out = torch.cat([*features, logit[:, None]], -1).double()
        return out if batched else out[0]

    @staticmethod
    def _mlp_out(t: SparseAutoencoder, out: torch.Tensor, this_pass: dict):
        """The edit that writes a block's MLP output: ``out`` (features, bias and error), plus a skip
        transcoder's linear path from the MLP's input in this pass (``this_pass["editor"]``'s)."""
        if t.W_skip is None:
            return _held(out)
        return lambda x: _held(out + this_pass["editor"].tensors[t.reads] @ t.W_skip.T.to(out.dtype))(x)

    def source_values(self, grad: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per source node, its value times ``grad`` (a gradient per source tensor, with a leading
        batch axis), summed over its vector: batch × nodes (the logit's column 0)."""
        value = {name: v.double() for name, v in self.sources.items()}
        embeddings = (grad[EMBEDDING] * value[EMBEDDING]).sum(-1)
        features = [
            grad[f"acts.{i}"][:, positions, features] * value[f"acts.{i}"][positions, features]
            for i, (positions, features) in enumerate(self.active)
        ]
        errors = [(grad[f"errors.{i}"] * value[f"errors.{i}"]).sum(-1) for i in range(self.model.cfg.n_layers)]
        return torch.cat([embeddings, *features, *errors, embeddings[:, :1] * 0], -1)


BATCH = 32  # targets per backward pass: each its own copy of the sources in one batched pass


def attribution_graph(
    model: Transformer,
    tokens: list[int],
    transcoders: list[SparseAutoencoder],
    token: int,
    demeaned: bool = False,
    batch: int = BATCH,
) -> Graph:
    """The graph of the logit of ``token`` at the last position of ``tokens`` (see the module;
    ``demeaned``: of that logit less the mean logit). The edges into ``batch`` targets at a time
    come from one forward and one backward pass of that many copies of the sources: a copy's
    gradient is its target's alone."""
    replacement = ReplacementModel(model, tokens, transcoders, token, demeaned)
    nodes, sources = replacement.nodes, replacement.sources
    first = len(tokens)  # the feature nodes (the targets but the logit) start after the embeddings
    with torch.no_grad():
        constant = replacement.targets({name: torch.zeros_like(v) for name, v in sources.items()})
    edges = torch.zeros(len(nodes), len(nodes), dtype=torch.float64)
    bias = torch.zeros(len(nodes), dtype=torch.float64)
    rows = list(range(first, first + len(constant) - 1)) + [len(nodes) - 1]
    bias[rows] = constant
    for start in range(0, len(rows), batch):
        chosen = torch.arange(start, min(start + batch, len(rows)))  # the targets' places in targets()' vector
        leaves = {name: v.detach()[None].repeat(len(chosen), *[1] * v.dim()).requires_grad_() for name, v in sources.items()}
        with torch.enable_grad():
            out = replacement.targets(leaves)
            picked = out[torch.arange(len(chosen)), chosen].sum()
            grads = torch.autograd.grad(picked, list(leaves.values()), allow_unused=True)
        grad = {name: (torch.zeros_like(v) if g is None else g).double() for (name, v), g in zip(leaves.items(), grads)}
        edges[[rows[i] for i in chosen.tolist()]] = replacement.source_values(grad)
    probability = float(replacement.real["hook_logits"][-1].double().softmax(-1)[token])
    return Graph(nodes, edges, bias, nodes[-1].value, token, probability, demeaned)


@dataclass
class Intervention:
    """A feature's activation multiplied by ``factor`` (0: switched off): the target's logit and the
    next-token distribution by the real model with the feature's decoder row patched in (every later
    attention, norm and MLP recomputed), beside what the graph predicts for the logit."""

    node: int
    factor: float
    logit_before: float
    logit_after: float  # the real model's
    predicted_direct: float  # the graph: the feature's direct edge into the logit, scaled
    predicted: float  # the graph: through the later features too, each moving by its linear share
    probs_before: torch.Tensor  # (vocabulary,) the real model's next-token distribution
    probs_after: torch.Tensor


def intervene(
    model: Transformer, tokens: list[int], transcoders: list[SparseAutoencoder], graph: Graph, node: int, factor: float
) -> Intervention:
    """Feature node ``node`` of ``graph`` (made from the same model, tokens and transcoders) scaled by ``factor``."""
    feature = graph.nodes[node]
    if feature.kind != "feature":
        raise GlassboxError(f"Only a feature can be scaled; node {node} is {feature.label}")
    assert feature.block is not None and feature.feature is not None
    change = (factor - 1) * feature.value
    row = transcoders[feature.block].W_dec[feature.feature]

    def patched(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[0, feature.position] += change * row.to(x.dtype)
        return x

    ids = torch.tensor([tokens], device=model.device)
    with torch.no_grad():
        before = model(ids).logits[0, -1].double()
        with editing({f"blocks.{feature.block}.hook_mlp_out": patched}):
            after = model(ids).logits[0, -1].double()
    # the graph's prediction: the change carried along the edges, each later feature moving by its
    # derivative's share (edges[k, j] / value_j), in the graph's order (a feature's sources come first)
    # (a feature's sources are in earlier blocks, so a block at a time)
    per_unit = torch.tensor([1 / n.value if n.kind == "feature" else 0.0 for n in graph.nodes], dtype=torch.float64)
    moved = torch.zeros(len(graph.nodes), dtype=torch.float64)
    moved[node] = change
    for block in range(feature.block + 1, model.cfg.n_layers):
        rows = [k for k, n in enumerate(graph.nodes) if n.kind == "feature" and n.block == block]
        moved[rows] = graph.edges[rows] @ (per_unit * moved)
    target = graph.target_value
    return Intervention(
        node,
        factor,
        target,
        target + float(target_logit(after, graph.token, graph.demeaned) - target_logit(before, graph.token, graph.demeaned)),
        target + float(graph.edges[-1, node]) * (factor - 1),
        target + float(graph.edges[-1] @ (per_unit * moved)),
        before.softmax(-1),
        after.softmax(-1),
    )
