"""What ``import glassbox`` offers (the package's __init__ loads it on first use): ``load`` →
a ``Model``, ``name``, a ``Trace`` that draws itself. The app and the command line
hold the same ``Model`` and call the same methods."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from glassbox.model.engine import GRAD, GlassboxError, ModelConfig, Target, run_seq2seq_trace, run_trace
from glassbox.model.engine.edits import Edit, Editor, editing
from glassbox.model.engine.names import registered
from glassbox.model.engine.sampling import GeneratedToken, Sampling, generate
from glassbox.model.engine.trace import NotInTrace
from glassbox.model.engine.trace import Trace as EngineTrace
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.io.checkpoint import load as load_checkpoint

# what `import glassbox` offers (model/api/__init__.py loads these names from here); GRAD and the
# engine's names are re-exported
__all__ = ["GRAD", "GlassboxError", "Model", "ModelConfig", "Target", "Trace", "load", "name"]

# TransformerLens's short names (its utils.get_act_name) where Glassbox's differ or sit elsewhere
SHORT = {
    "attn_scores": "attn.hook_scores",
    "scores": "attn.hook_scores",
    "pattern": "attn.hook_pattern",
    **{k: f"attn.hook_{k}" for k in ("q", "k", "v", "z", "result", "rot_q", "rot_k")},
    **{k: f"hook_{k}" for k in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")},
    "pre": "mlp.hook_pre",
    "post": "mlp.hook_post",
    "pre_linear": "mlp.hook_linear",
    "gate": "mlp.hook_gate",
    "scale": "hook_scale",
    "normalized": "hook_normalized",
    "mean": "hook_mean",
}
NORMS = ("ln1", "ln2", "ln_final")
STORIES = 64  # the bundled stories a feature's top activations are looked for in (Model.top_activations)


def name(kind: str, block: int | None = None, norm: str | None = None) -> str:
    """The one name of a tensor: ``name("pattern", block=1)`` is ``blocks.1.attn.hook_pattern``.
    ``kind`` is TransformerLens's short name (``attn_scores``, ``resid_pre``, ``pre``, ``scale``…)
    or Glassbox's own tail (``attn.hook_scores_masked``); a norm's ``scale`` or ``normalized``
    says which norm (``norm="ln1"``); ``embed``, ``pos_embed``, ``logits`` need no block. The name
    is checked against the registry (``glassbox hooks`` lists them all)."""
    tail = SHORT.get(kind, kind if "." in kind or kind.startswith("hook_") else f"hook_{kind}")
    if norm is not None:
        if norm not in NORMS:
            raise GlassboxError(f"norm must be one of {', '.join(NORMS)}, not {norm!r}")
        tail = f"{norm}.{tail}"
    full = tail if block is None or norm == "ln_final" else f"blocks.{block}.{tail}"
    if not registered(full):
        if block is None and registered(f"blocks.0.{tail}"):
            raise GlassboxError(f"{kind!r} is a block's tensor: say which block (block=0 is the first)")
        raise GlassboxError(f"No tensor is named {full!r}: `glassbox hooks` lists the names")
    return full


Key = str | tuple  # a full name, or TransformerLens's shorthand: (short name, block[, norm])


@dataclass(repr=False)
class Trace(EngineTrace):
    """Every tensor of a pass by its one name, and with ``backward`` the gradient of the loss with
    respect to each (``"grad:<name>"``): a read-only mapping, in the pass's order then the gradients'
    (``"blocks.0.hook_resid_pre" in trace``, ``list(trace)``, ``trace.items()``, ``trace.get``),
    whose KeyError names the nearest names it holds. ``trace["pattern", 1]`` is TransformerLens's
    shorthand: ``trace[gb.name("pattern", 1)]`` (a norm's third: ``trace["scale", 0, "ln1"]``;
    ``trace["grad:resid_post", 1]`` its gradient).

    ``trace.figure("attention", block=1, head=2)`` draws any of its tensors as the app does: a
    plotly figure (shown by Jupyter; ``fig.write_image`` with kaleido for a PNG or SVG). A trace
    knows its model's config and its tokens' text, not its weights (a cached trace does not keep
    a model the model cache let go)."""

    cfg: ModelConfig | None = field(default=None, compare=False)
    pieces: list[str] = field(default_factory=list, compare=False)  # every token id's text, the tokenizer's own list

    @classmethod
    def of(cls, traced: EngineTrace, cfg: ModelConfig, pieces: list[str]) -> Trace:
        """The engine's trace (glassbox.model.engine.run_trace's), with its model's config and token pieces."""
        return cls(**{f.name: getattr(traced, f.name) for f in fields(EngineTrace)}, cfg=cfg, pieces=pieces)

    def __getitem__(self, key: Key) -> torch.Tensor:
        try:
            full = full_name(key)
        except GlassboxError as error:  # a shorthand naming no tensor: a KeyError too, as for any missing name
            raise NotInTrace(str(error)) from None
        return super().__getitem__(full)

    def __contains__(self, key: object) -> bool:
        try:
            return super().__contains__(full_name(key))
        except GlassboxError:  # a shorthand naming no registered tensor
            return False

    def figure(self, kind: str, block: int | None = None, head: int = 0, norm: str | None = None, expert: int = 0):
        """The app's heatmap of one tensor (``kind``: a full name, a short one as ``gb.name``
        takes, or "attention" for the pattern): query head ``head``'s slice of a per-head tensor
        (of a key/value tensor, the key/value head that query head reads), ``expert``'s of a
        per-expert one, rows and columns labelled by the tokens where they are positions (as the
        explorer draws it: glassbox.model.plot.grid)."""
        from glassbox.model.plot.grid import PromptLabels, tensor_figure  # plotly: the app's extras

        if self.cfg is None:
            raise GlassboxError("Only a trace from Model.trace draws itself: it knows its model's config and tokens")
        full = kind if kind in self else name("pattern" if kind == "attention" else kind, block, norm)
        prompt = PromptLabels(self.cfg, self.tokens, self.pieces, self.source)
        return tensor_figure(prompt, full, self[full], head, expert)

    def show(self, kind: str = "attention", name: str | None = None, block: int = 0, head: int = 0, **choices):
        """The app's in-page view of this trace, in a notebook (glassbox.app.notebook): ``"attention"``
        (the explorer's attention head view, opening on ``block`` and ``head``; ``query=``, ``key=``)
        or ``"grid"`` (the tensor ``name`` as the explorer draws it). Shown as a cell's output, and
        ``.save("view.html")`` writes it as a page that works without a kernel or a network."""
        import glassbox.app.notebook as notebook  # the notebook is a UI: imported only when one is asked for

        if kind == "attention":
            return notebook.attention(self, block, head, **choices)
        if kind == "grid":
            if name is None:
                raise GlassboxError('Say which tensor: trace.show("grid", "blocks.0.hook_resid_post")')
            return notebook.grid(self, full_name(name) if isinstance(name, tuple) else name, head)
        raise GlassboxError(f'trace.show draws "attention" or "grid", not {kind!r}')


def full_name(key: object) -> object:
    """A trace's key as a full name: TransformerLens's shorthand (``("pattern", 1)``, a norm's
    ``("scale", 0, "ln1")``, a gradient's ``("grad:resid_post", 1)``) through ``name``; any
    other key as it is."""
    if not isinstance(key, tuple) or not key or not isinstance(key[0], str):
        return key
    if len(key) > 3:
        raise GlassboxError(f"A trace's shorthand is (name, block) or (name, block, norm), not {key!r}")
    kind, *rest = key
    return (GRAD if kind.startswith(GRAD) else "") + name(kind.removeprefix(GRAD), *rest)


class Model(LoadedModel):
    """A loaded model (its ``cfg``, ``tokenizer``, the torch module ``module``) and what one
    does with it. Nothing here changes the model: traces and edits live in the call, so one
    model object serves many callers at once (the app's sessions share one). Prompts are text
    or a list of token ids; tokens are text (``" frog"``, with its space) or an id."""

    @classmethod
    def of(cls, loaded: LoadedModel) -> Model:
        """The Model holding what the checkpoint loader returned (``loaded`` itself where it
        is one already): what ``glassbox.load`` does after loading."""
        return loaded if isinstance(loaded, cls) else cls(**{f.name: getattr(loaded, f.name) for f in fields(loaded)})

    def __repr__(self) -> str:
        from glassbox.model.engine.placement import summary

        c = self.cfg
        where = summary(self.model) if not c.encoder_decoder else None
        return (
            f"<glassbox.Model {self.name!r}: {c.n_layers} blocks × {c.n_heads} heads, d_model {c.d_model}, "
            f"vocabulary {c.vocab_size:,}{f'; {where}' if where else ''}>"
        )

    @property
    def module(self):
        """The torch module (glassbox.model.engine.Transformer) the calls run."""
        return self.model

    def tokens(self, prompt: str | list[int]) -> list[int]:
        """A prompt's token ids (a list of ids is taken as it is)."""
        return list(prompt) if isinstance(prompt, (list, tuple)) else self.encode(prompt)

    def token_id(self, token: str | int) -> int:
        """One token's id, from its text or its id."""
        return token if isinstance(token, int) else self.tokenizer.token_id(token)

    def trace(
        self,
        prompt: str | list[int],
        names: list[str] | tuple[str, ...] | None = None,
        backward: bool = False,
        target: str | int | tuple[str | int, int] | Target | None = None,
        source: str | list[int] | None = None,
    ) -> Trace:
        """Every tensor of a forward pass by name (``names``: shell patterns to keep fewer), and
        with ``backward`` the gradient of the loss (the mean next-token cross-entropy, or
        −log p(``target``) at the last position, or at ``(target, position)``) with respect to
        each. Inside ``edit`` it is the edited model's. An encoder-decoder reads ``source`` and
        is taught ``prompt`` (teacher forcing; the loss is the mean over its tokens)."""
        if self.cfg.encoder_decoder:
            if source is None or target is not None:
                raise GlassboxError(
                    "An encoder-decoder's trace takes source= (what the encoder reads) and the prompt "
                    "as the decoder's target; target= is for decoder-only models"
                )
            traced = run_seq2seq_trace(self.model, self.tokens(source), self.tokens(prompt), names=names, backward=backward)
            return Trace.of(traced, self.cfg, self.pieces)
        if source is not None:
            raise GlassboxError("source= is for an encoder-decoder; this model reads the prompt alone")
        if target is not None and not isinstance(target, Target):
            token, position = target if isinstance(target, tuple) else (target, -1)
            target = Target(self.token_id(token), position)
        traced = run_trace(self.model, self.tokens(prompt), names=names, backward=backward, target=target)
        return Trace.of(traced, self.cfg, self.pieces)

    def edit(self, edits: dict[str, Edit]) -> AbstractContextManager[Editor]:
        """Within the ``with`` block, every pass (traces, generation, the analyses) goes on with
        ``edits[name](tensor)`` wherever it computes ``name``: the edit lives in the call's
        context, not on the model, so a pass of another model inside the block is edited too. Each edit gets the
        tensor as a trace holds it, one sequence without a batch axis (``blocks.0.attn.hook_z``:
        head × position × d_head), and returns a new one of that shape; a pass of several
        sequences edits each. Blocks nest, outermost first. Only the calls made inside see the
        edit (it lives in the call's context)."""
        return editing({name: per_sequence(edit) for name, edit in edits.items()})

    def stream(
        self,
        prompt: str | list[int],
        max_new_tokens: int = 20,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> Iterator[GeneratedToken]:
        """The new tokens one at a time, each with the distributions it was drawn from (KV cache,
        exact sampling; temperature 0 takes the most likely token each time)."""
        return generate(self, prompt, max_new_tokens, Sampling(temperature, top_k, top_p, seed))

    def generate(
        self,
        prompt: str | list[int],
        max_new_tokens: int = 20,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float = 1.0,
        seed: int = 0,
        tree: bool = False,
    ):
        """``stream``'s tokens, all of them (a list of ``GeneratedToken``). With ``tree=True``, a
        ``Tree`` (glassbox.tree) whose first path is that sample, to branch (``tree.branch(position,
        token)``), sample again with another seed, and open (``tree.trace(path)``, ``tree.lens(path)``)."""
        if tree:
            from glassbox.tree import Tree

            return Tree(self, prompt, max_new_tokens, Sampling(temperature, top_k, top_p, seed))
        return list(self.stream(prompt, max_new_tokens, temperature, top_k, top_p, seed))

    def show_playground(
        self,
        prompt: str,
        max_new_tokens: int = 20,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float = 1.0,
        seed: int = 0,
        force: list[tuple[int, str | int]] = (),
        seeds: list[int] = (),
    ):
        """The playground in a notebook (glassbox.app.notebook): the next-token distribution with its
        sliders (answered in the page) and a generation with these settings as a tree, each token's
        alternatives and logit lens a click away. ``force``: (position, token) pairs, each a branch of
        the path before it (``Tree.branch``); ``seeds``: more samples. ``.save(path)`` writes it as a
        standalone page."""
        import glassbox.app.notebook as notebook  # the notebook is a UI: imported only when one is asked for

        return notebook.playground(self, prompt, max_new_tokens, temperature, top_k, top_p, seed, force, seeds)

    def steering_vector(self, positive: str | list[int], negative: str | list[int], block: int) -> torch.Tensor:
        """Contrastive activation addition's vector: the residual stream entering ``block`` at
        ``positive``'s last position minus ``negative``'s (glassbox.model.analysis.steering)."""
        from glassbox.model.analysis.steering import contrastive_vector

        return contrastive_vector(self.model, self.tokens(positive), self.tokens(negative), block)

    def steer(
        self,
        prompt: str,
        vector: torch.Tensor,
        block: int,
        strength: float = 1.0,
        start: int = 0,
        max_new_tokens: int = 20,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float = 1.0,
        seed: int = 0,
        hook: str = "hook_resid_pre",
    ) -> tuple[list[GeneratedToken], list[GeneratedToken]]:
        """(steered, plain): the completion with ``strength × vector`` added to the residual
        stream entering ``block`` (or to ``hook``, another of the block's stream tensors:
        hook_resid_mid, hook_resid_post, hook_attn_out, hook_mlp_out) at every position from
        ``start`` on (the prompt's and each new token's), and without, drawn with the same
        sampler and seed."""
        from glassbox.model.analysis.steering import Steering, steered

        sampling = Sampling(temperature, top_k, top_p, seed)
        steering = Steering(block, torch.as_tensor(vector), strength, start, hook)
        return steered(self, prompt, max_new_tokens, sampling, steering), self.generate(
            prompt, max_new_tokens, temperature, top_k, top_p, seed
        )

    def sae(self, source: str, max_bytes: int | None = None):
        """A sparse autoencoder (or transcoder) for this model: a folder in SAELens's or Gemma
        Scope's format, or ``owner/repo/folder`` on the hub (glassbox.model.io.sae), in this
        model's dtype and device, checked against the tensors it reads and writes; refused
        before any weight is read where it would take over ``max_bytes``. Hand it to
        ``features``, ``feature_logits``, ``ablate_feature`` and ``steer_feature``."""
        from glassbox.model.analysis.features import check_sae
        from glassbox.model.io.sae import load_sae

        sae = load_sae(source, self.model.embed.W_E.dtype, self.model.device, max_bytes)
        check_sae(self.model, sae)
        return sae

    def attribution_graph(
        self,
        prompt: str | list[int],
        token: str | int,
        transcoders="default-transcoders",
        demeaned: bool = False,
        dtype: torch.dtype | None = None,
    ):
        """The attribution graph of ``token``'s logit at the last position of ``prompt``
        (glassbox.model.analysis.attribution_graph): input tokens, active transcoder features and
        error terms as nodes, their direct linear effects as edges, with attention patterns and
        norm scales frozen; complete (its edges and biases add up to the logit). ``transcoders``: a
        shipped set's name, a folder of ``blocks.L/`` (``glassbox train-transcoder``), or a list.
        ``demeaned``: the target is the logit less the mean logit (circuit-tracer's and Neuronpedia's).
        ``dtype``: build it on a copy of the model in that dtype (torch.float64: complete to
        float64's rounding, where float32's is about 1e-6 of the logit); the model is not changed."""
        from glassbox.model.analysis.attribution_graph import attribution_graph

        model = self.model
        if dtype is not None and dtype != model.embed.W_E.dtype:
            model = copy.deepcopy(model).to(dtype)
        tokens, chosen = self.tokens(prompt), [t.to(model.embed.W_E.dtype, model.device) for t in self._transcoders(transcoders)]
        return attribution_graph(model, tokens, chosen, self.token_id(token), demeaned)

    def intervene(self, prompt: str | list[int], graph, node: int, factor: float, transcoders="default-transcoders"):
        """Feature ``node`` of ``graph`` (``attribution_graph`` of the same prompt and transcoders)
        scaled by ``factor`` (0: off): the target's logit and next-token distribution by the real
        model with the feature's decoder row patched in, beside the graph's predictions (an
        ``Intervention``: logit_before, logit_after, predicted_direct, predicted, probs_before, probs_after)."""
        from glassbox.model.analysis.attribution_graph import intervene

        return intervene(self.model, self.tokens(prompt), self._transcoders(transcoders), graph, node, factor)

    def top_activations(self, saes="default-transcoders", texts: list[str] | None = None, k: int = 8):
        """Where each feature fires most: every feature's ``k`` top activations (a ``TopActivations``,
        glassbox.model.analysis.feature_examples) over ``texts`` (by default, 64 of the bundled
        stories, each cut to the model's context). ``saes``: a transcoder set as ``attribution_graph``
        takes it, or a list of SAEs."""
        from glassbox.model.analysis.feature_examples import top_activations
        from glassbox.model.data.stories import corpus

        sequences = [self.tokens(text)[: self.cfg.n_ctx] for text in (corpus(STORIES) if texts is None else texts)]
        return top_activations(self.model, self._transcoders(saes), sequences, k)

    def _transcoders(self, transcoders) -> list:
        """A transcoder set by name or folder (model.io.sae.load_transcoders), or a list, in this model's dtype and device."""
        from glassbox.model.io.sae import load_transcoders

        dtype, device = self.model.embed.W_E.dtype, self.model.device
        if isinstance(transcoders, str):
            transcoders = load_transcoders(transcoders, dtype, device)
        return [t.to(dtype, device) for t in transcoders]

    def features(self, prompt: str | list[int], sae, top: int = 5):
        """Each token's ``top`` features, the SAE's reconstruction error per position, and the
        next-token loss with the reconstruction spliced in (glassbox.model.analysis.features):
        a ``Features`` (``top_ids``, ``top_values``: position × top; ``active``, ``error_norm``;
        ``loss``, ``spliced_loss``)."""
        from glassbox.model.analysis.features import features

        return features(self.model, self.tokens(prompt), sae, top)

    def feature_logits(self, prompt: str | list[int], sae, feature: int, k: int = 10):
        """The ``k`` tokens whose logits one unit of ``feature`` raises most and the ``k`` it
        lowers most, through the unembedding alone: a ``LogitEffect`` (``promoted_ids``,
        ``promoted``, ``suppressed_ids``, ``suppressed``)."""
        from glassbox.model.analysis.features import logit_effect

        return logit_effect(self.model, self.tokens(prompt), sae, feature, k)

    def ablate_feature(self, prompt: str | list[int], sae, feature: int):
        """The next-token distribution at the last position with ``feature``'s contribution
        taken out at every position, beside the plain one: a ``FeatureAblation`` (``plain``,
        ``ablated``, ``activations``, ``kl``)."""
        from glassbox.model.analysis.features import ablate_feature

        return ablate_feature(self.model, self.tokens(prompt), sae, feature)

    def steer_feature(
        self,
        prompt: str,
        sae,
        feature: int,
        strength: float = 1.0,
        start: int = 0,
        max_new_tokens: int = 20,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> tuple[list[GeneratedToken], list[GeneratedToken]]:
        """``steer`` with ``feature``'s decoder row, added where the SAE writes."""
        from glassbox.model.analysis.features import steering_vector

        block, hook, vector = steering_vector(sae, feature)
        return self.steer(prompt, vector, block, strength, start, max_new_tokens, temperature, top_k, top_p, seed, hook)

    def heads(self, texts: list[str | list[int]] | None = None, n_stories: int = 16):
        """The head catalog (glassbox.model.analysis.head_catalog): per block and head, the
        previous-token, self, duplicate-token, induction and entropy scores over ``texts``, or
        over ``n_stories`` of the default model's stories (seed 0), each cut to the context. A
        model whose vocabulary cannot spell the stories (the micro-models) is scored on as many
        sequences of random tokens, each repeated once (seed 0), as the Circuits view does.
        A ``HeadCatalog``: ``scores[name]`` is a block × head array; ``find(score, above)``
        lists the heads over a threshold."""
        from glassbox.model.analysis.circuits import random_tokens
        from glassbox.model.analysis.head_catalog import head_catalog
        from glassbox.model.data.stories import corpus

        if texts is not None:
            return head_catalog(self.model, [self.tokens(text) for text in texts])
        try:
            ids = [self.tokens(story)[: self.cfg.n_ctx] for story in corpus(n_stories)]
        except GlassboxError:  # words this vocabulary does not have
            half = min(32, (self.cfg.n_ctx - len(self.tokenizer.prefix())) // 2)
            rng = np.random.default_rng(0)
            rows = [random_tokens(self.tokenizer.vocab_size, half, rng) for _ in range(n_stories)]
            ids = [self.tokenizer.prefix() + row + row for row in rows]
        return head_catalog(self.model, ids)

    def verify(self, prompt: str | list[int], gradients: bool = False):
        """This model beside transformers' own class loaded from the same folder, on ``prompt``:
        the largest logit and residual-stream differences, and with ``gradients`` the loss's and
        its gradients' (glassbox.model.io.verify; needs transformers): a ``Verification``,
        each difference beside the size of what it compares."""
        from glassbox.model.io.verify import verify

        tokens = self.tokens(prompt)
        if gradients and len(tokens) < 2:
            raise GlassboxError("A gradient check needs a prompt of two tokens at least (the loss predicts the next)")
        return verify(self, tokens, gradients)

    def patch(
        self, clean: str | list[int], corrupt: str | list[int], answer: str | int, wrong: str | int, site: str = "resid_pre"
    ):
        """Activation patching of every ``site`` of the clean run into the corrupted one, with
        attribution patching's estimate beside it (glassbox.model.analysis.patching). The
        metric is logit(``answer``) − logit(``wrong``) at the last position; ``site`` is
        "resid_pre" (each block and position), "attn_out", "mlp_out" or "head" (each block and
        head). A ``Patching``: ``metric[block, j]`` after each patch, ``estimate`` the same by
        attribution patching, ``metric_clean`` and ``metric_corrupt`` the two runs' own,
        ``restored()`` the fraction of the gap each patch closes."""
        from glassbox.model.analysis.patching import activation_patching

        return activation_patching(
            self.model, self.tokens(clean), self.tokens(corrupt), self.token_id(answer), self.token_id(wrong), site
        )

    def path_patch(
        self, clean: str | list[int], corrupt: str | list[int], answer: str | int, wrong: str | int, receiver_input: str = "q"
    ):
        """Path patching: each head's and MLP's direct effect, through a later head's queries
        (keys, values: ``receiver_input``), on logit(answer) − logit(wrong), everything else
        frozen at the corrupted run (glassbox.model.analysis.path_patching): a
        ``PathPatching``, ``metric`` senders × receivers (NaN where the receiver is not in a
        later block)."""
        from glassbox.model.analysis.path_patching import path_patching

        return path_patching(
            self.model, self.tokens(clean), self.tokens(corrupt), self.token_id(answer), self.token_id(wrong), receiver_input
        )

    def attribute(
        self,
        prompt: str | list[int],
        target: str | int,
        method: str = "saliency",
        steps: int = 32,
        baseline: str | int | None = None,
    ):
        """Each input token's attribution to ``target``'s logit (saliency, input × gradient,
        integrated gradients from ``baseline``'s embedding or zero, attention rollout;
        glassbox.model.analysis.attribution): an ``Attribution``, ``scores`` one per token; for
        integrated gradients, ``completeness_error`` says how far their sum is from the logit's
        change."""
        from glassbox.model.analysis.attribution import attribute

        return attribute(
            self.model,
            self.tokens(prompt),
            self.token_id(target),
            method,
            steps,
            None if baseline is None else self.token_id(baseline),
        )

    def dla(self, prompt: str | list[int], token: str | int, wrong: str | int | None = None, position: int = -1):
        """Direct logit attribution: what each part writes into ``token``'s logit (minus
        ``wrong``'s) at ``position``, through the final norm with its scale held fixed. A
        ``LogitAttribution``: ``names`` (the embeddings, each head as
        ``blocks.{i}.attn.hook_result[{h}]``, each MLP, the biases) and ``values``, which sum to
        ``logit``."""
        from glassbox.model.analysis.dla import direct_logit_attribution

        return direct_logit_attribution(
            self.model, self.tokens(prompt), self.token_id(token), position, None if wrong is None else self.token_id(wrong)
        )

    def ablate(
        self,
        prompt: str | list[int],
        block: int,
        head: int | None = None,
        neuron: int | None = None,
        mode: str = "zero",
        reference: str | list[int] | None = None,
        expert: int | str | None = None,
    ):
        """The next-token distribution with one head or neuron of ``block`` (an ``expert``'s
        neuron in a mixture-of-experts block) ablated: zeroed (``mode="zero"``), or set to its
        mean (``mode="mean"``) over the prompt's positions or ``reference``'s. An ``Ablation``: ``before`` and ``after``,
        the next-token probabilities at the last position, and ``kl`` between them."""
        from glassbox.model.analysis.ablation import ablate

        return ablate(
            self.model,
            self.tokens(prompt),
            block,
            head,
            neuron,
            mode,
            None if reference is None else self.tokens(reference),
            expert,
        )

    def circuits(self, half: str | list[int], prefix: str | list[int] = ()):
        """Per block and head, the induction and previous-token scores on ``prefix`` and then
        ``half`` twice: two block × head arrays, (induction, previous-token)."""
        from glassbox.model.analysis.circuits import head_scores

        return head_scores(self.model, self.tokens(half), self.tokens(prefix) if prefix else [])


def per_sequence(edit: Edit) -> Edit:
    """``edit`` (of one sequence's tensor, as a trace holds it) applied to each sequence of a pass."""

    def on_batch(tensor: torch.Tensor) -> torch.Tensor:
        return torch.stack([edit(row) for row in tensor.unbind(0)])

    return on_batch


def load(
    model: str = "default",
    dtype: str | None = None,
    device: str | torch.device | None = None,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
) -> Model:
    """A bundled model (``"default"``, ``"worked-example"``, ``"micro-induction"``…), a folder,
    or a hub id (``"EleutherAI/pythia-70m"``, fetched on first use); ``dtype`` ("float32",
    "float64", …) and ``device`` ("cpu", "cuda") as the command line's. ``device_map`` ("auto",
    "balanced", or {"blocks.3": "disk", …}) splits it by blocks across the GPUs, the CPU and the
    disk with accelerate, within ``max_memory`` ({0: "70GiB", "cpu": "100GiB"}; see
    glassbox.model.engine.placement)."""
    return Model.of(load_checkpoint(model, dtype=dtype, device=device, device_map=device_map, max_memory=max_memory))
