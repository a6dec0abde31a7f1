"""The backward pass as steps a reader can follow, the gradient along the residual stream,
input saliency, and each weight's gradient rebuilt as the product it is."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis.residual import residual_points, stream_end
from glassbox.model.engine import GRAD, ModelConfig, Trace, Transformer, block_label


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
    steps = [
        BackwardStep(
            "logits",
            "loss → logits",
            "∂L/∂logits = p − y at each position with a target (averaged over them), 0 elsewhere.",
            g("hook_logits"),
            w("unembed."),
            "head",
        )
    ]
    if cfg.mlm_head:  # BERT: the transform between the stream and the unembedding
        steps.append(
            BackwardStep(
                "mlm",
                "MLM head",
                f"Through the unembedding (∂L/∂logits · W_Uᵀ), then back through the transform's "
                f"{cfg.norm}, its {cfg.activation} and W_dense to the last block's output.",
                g("mlm.ln.hook_out", "mlm.ln.hook_normalized", "mlm.hook_act", "mlm.hook_dense", stream_end(cfg)),
                w("mlm."),
                "mlm",
            )
        )
    if cfg.final_norm:
        steps.append(
            BackwardStep(
                "ln_final",
                f"final {cfg.norm}",
                "Through the head (∂L/∂logits · W_Uᵀ), then back through the norm's scale and shift.",
                g("ln_final.hook_out", "ln_final.hook_normalized", stream_end(cfg)),
                w("ln_final."),
                "ln_final",
            )
        )
    for i in reversed(range(cfg.n_layers)):
        if cfg.norm_position == "post":
            steps += _post_norm_steps(cfg, i, g, w)
            continue
        steps += ([] if cfg.attn_only else _mlp_steps(cfg, i, g, w)) + _attention_steps(cfg, i, g, w)
    into = (
        "∂L/∂resid_pre of block 0"
        if cfg.n_layers
        else "the head's gradient directly (∂L/∂logits · W_Uᵀ" + (", through the final norm)" if cfg.final_norm else ")")
    )
    if cfg.embed_norm:  # BERT: the summed rows are normed before block 0
        steps.append(
            BackwardStep(
                "ln_embed",
                f"embedding {cfg.norm}",
                f"{into[0].upper()}{into[1:]} goes back through the norm's scale and shift to the sum of the rows.",
                g("ln_embed.hook_out", "ln_embed.hook_normalized"),
                w("ln_embed."),
                "ln_embed",
            )
        )
        into = "∂L/∂(their sum), what comes out of the embedding norm"
    rows = ["the position rows"] * (cfg.positional == "table") + ["the token-type rows"] * bool(cfg.n_token_types)
    what = f"The token embedding and {' and '.join(rows)} receive" if rows else "The token embedding receives"
    steps.append(
        BackwardStep(
            "embed",
            "embeddings",
            f"{what} {into}, row by row"
            + (" (W_E also receives the head's gradient: it is tied)." if cfg.tie_embeddings else "."),
            g(
                "hook_embed",
                *(("hook_pos_embed",) if cfg.positional == "table" else ()),
                *(("hook_token_type_embed",) if cfg.n_token_types else ()),
            ),
            w("embed.") + w("pos_embed.") + w("token_type_embed."),
            "embed",
        )
    )
    return steps


def _pattern_sentence(cfg: ModelConfig) -> str:
    if not cfg.causal:  # an encoder masks nothing
        return (
            "∂L/∂pattern = ∂L/∂z · vᵀ; nothing is masked (attention both ways), so the softmax passes some of it to every score."
        )
    return (
        "∂L/∂pattern = ∂L/∂z · vᵀ is not zero above the diagonal, but the softmax passes none of it to the masked "
        "scores: their gradient is exactly 0."
    )


def _post_norm_steps(cfg: ModelConfig, i: int, g, w) -> list[BackwardStep]:
    """Block i of a post-norm model (BERT: mid = LN1(x + attn(x)), out = LN2(mid + mlp(mid))),
    backwards: every gradient on its way down the stream goes through both norms."""
    p = f"blocks.{i}."
    return [
        BackwardStep(
            f"b{i}-ln2",
            f"{block_label(i)} {cfg.norm} 2 (on the sum)",
            "∂L/∂resid_post goes back through ln2's scale and shift to ∂L/∂mlp_sum, the gradient of "
            "resid_mid + mlp_out: both the skip and the MLP receive it.",
            g(p + "ln2.hook_out", p + "ln2.hook_normalized", p + "hook_mlp_sum"),
            w(p + "ln2."),
            p + "norms",
        ),
        BackwardStep(
            f"b{i}-mlp",
            f"{block_label(i)} MLP",
            f"∂L/∂mlp_out = ∂L/∂mlp_sum (the sum passes it on unchanged); back through W_out, the "
            f"{cfg.activation} (its derivative at each pre-activation) and W_in.",
            g(p + "hook_mlp_out", p + "mlp.hook_post", p + "mlp.hook_pre"),
            w(p + "mlp."),
            p + "mlp",
        ),
        BackwardStep(
            f"b{i}-ln1",
            f"{block_label(i)} {cfg.norm} 1 (on the sum) and the residual split",
            "∂L/∂resid_mid = ∂L/∂mlp_sum (the skip) + what comes back through the MLP; then back through "
            "ln1 to ∂L/∂attn_sum, the gradient of resid_pre + attn_out.",
            g(p + "hook_resid_mid", p + "ln1.hook_normalized", p + "hook_attn_sum"),
            w(p + "ln1."),
            p + "norms",
        ),
        BackwardStep(
            f"b{i}-attn-out",
            f"{block_label(i)} attention output",
            "∂L/∂attn_out = ∂L/∂attn_sum; each head's share after W_O, then its weighted values z.",
            g(p + "hook_attn_out", p + "attn.hook_result", p + "attn.hook_z"),
            w(p + "attn.W_O") + w(p + "attn.b_O"),
            p + "attn",
        ),
        BackwardStep(
            f"b{i}-pattern",
            f"{block_label(i)} attention pattern and softmax",
            _pattern_sentence(cfg),
            g(p + "attn.hook_pattern", p + "attn.hook_scores_masked", p + "attn.hook_scores"),
            (),
            p + "attn",
        ),
        BackwardStep(
            f"b{i}-qkv",
            f"{block_label(i)} Q, K, V and the residual split",
            "∂L/∂q = ∂L/∂scores · k × scale, ∂L/∂k = ∂L/∂scoresᵀ · q × scale, ∂L/∂v = patternᵀ · ∂L/∂z; "
            "then W_Q, W_K, W_V, which read resid_pre itself (no norm before them): ∂L/∂resid_pre = "
            "∂L/∂attn_sum (the skip) + what comes back through them.",
            g(p + "attn.hook_q", p + "attn.hook_k", p + "attn.hook_v", p + "hook_resid_pre"),
            tuple(n for n in w(p + "attn.") if not n.endswith(("W_O", "b_O"))),
            p + "attn",
        ),
    ]


def _split(cfg: ModelConfig, p: str) -> str:
    """The stream tensor whose gradient attention's output receives: resid_mid, or resid_pre in
    a parallel block, or resid_post in an attention-only one (where nothing follows attention)."""
    return p + ("hook_resid_post" if cfg.attn_only else "hook_resid_pre" if cfg.parallel_block else "hook_resid_mid")


def _mlp_steps(cfg: ModelConfig, i: int, g, w) -> list[BackwardStep]:
    """Block i's MLP and its norm, backwards."""
    p, post = f"blocks.{i}.", cfg.post_norms
    mlp_inner = ("hook_post", "hook_gate", "hook_linear", "hook_pre") if cfg.gated_mlp else ("hook_post", "hook_pre")
    split = _split(cfg, p)
    into = g(p + "hook_mlp_out", *((p + "ln2_post.hook_normalized", p + "mlp.hook_out") if post else ()))
    if cfg.is_moe(i):
        inside = [
            p + "mlp.experts.hook_out",
            p + "mlp.hook_expert_weights",
            p + "mlp.hook_router_probs",
            p + "mlp.hook_router_logits",
            *(p + "mlp.experts." + n for n in mlp_inner),
        ]
        if cfg.d_ff_shared is not None:
            inside += [
                p + "mlp.shared.hook_out",
                *((p + "mlp.hook_shared_gate",) if cfg.shared_expert_gate else ()),
                *(p + "mlp.shared." + n for n in mlp_inner),
            ]
        mlp = BackwardStep(
            f"b{i}-mlp",
            f"{block_label(i)} experts",
            "∂L/∂mlp_out is ∂L/∂resid_post (the residual passes it on unchanged). Each expert's output receives it "
            "times its weight, so an expert not chosen at a position receives 0 there; each weight receives "
            "∂L/∂mlp_out · the expert's output, and the router's probabilities and logits receive it through the "
            "top-k" + (" renormalisation" if cfg.norm_top_k else "") + " and the softmax; then each expert back "
            f"through its own W_out, {cfg.activation} and W_in"
            + (", and the shared expert through its own." if cfg.d_ff_shared is not None else "."),
            into + g(*inside),
            w(p + "mlp.") + w(p + "ln2_post."),
            p + "mlp",
        )
    else:
        mlp = BackwardStep(
            f"b{i}-mlp",
            f"{block_label(i)} MLP",
            f"∂L/∂mlp_out is ∂L/∂resid_post (the residual passes it on unchanged); back through W_out, "
            f"the {cfg.activation} (its derivative at each pre-activation) and W_in.",
            into + g(*(p + "mlp." + n for n in mlp_inner)),
            w(p + "mlp.") + w(p + "ln2_post."),
            p + "mlp",
        )
    return [
        mlp,
        BackwardStep(
            f"b{i}-ln2",
            _split_title(cfg, i, 2),
            (
                "In a parallel block the MLP's gradient joins attention's at resid_pre (the next step)."
                if cfg.parallel_block
                else "∂L/∂resid_mid = ∂L/∂resid_post (the skip) + what comes back through "
                + ("the norm and " if cfg.norm != "none" else "")
                + "the MLP."
            ),
            g(p + "ln2.hook_out", p + "ln2.hook_normalized", *(() if cfg.parallel_block else (split,))),
            w(p + "ln2."),
            p + "norms",
        ),
    ]


def _split_title(cfg: ModelConfig, i: int, number: int) -> str:
    """The step where a block's norm (1 before attention, 2 before the MLP) and its skip meet."""
    norm = f"{cfg.norm} {number} and the " if cfg.norm != "none" else ""  # a model without norms: the split alone
    return f"{block_label(i)} {norm}residual split"


def _attention_steps(cfg: ModelConfig, i: int, g, w) -> list[BackwardStep]:
    """Block i's attention and its norm, backwards."""
    p, post = f"blocks.{i}.", cfg.post_norms
    split = _split(cfg, p)
    skip = (
        "∂L/∂resid_pre = ∂L/∂resid_post (the skip) + what comes back through both norms, attention and the MLP."
        if cfg.parallel_block
        else f"∂L/∂resid_pre = ∂L/∂{split.split('hook_')[-1]} (the skip) + what comes back through "
        + ("the norm and " if cfg.norm != "none" else "")
        + "attention."
    )
    return [
        BackwardStep(
            f"b{i}-attn-out",
            f"{block_label(i)} attention output",
            f"∂L/∂attn_out = ∂L/∂{split.split('hook_')[-1]}"
            + ("; back through the post norm ln1_post" if post else "")
            + "; each head's share after W_O, then its weighted values z.",
            g(
                p + "hook_attn_out",
                *((p + "ln1_post.hook_normalized", p + "attn.hook_out") if post else ()),
                p + "attn.hook_result",
                p + "attn.hook_z",
            ),
            w(p + "attn.W_O") + w(p + "attn.b_O") + w(p + "ln1_post."),
            p + "attn",
        ),
        BackwardStep(
            f"b{i}-pattern",
            f"{block_label(i)} attention pattern and softmax",
            _pattern_sentence(cfg),
            g(p + "attn.hook_pattern", p + "attn.hook_scores_masked", p + "attn.hook_scores"),
            (),
            p + "attn",
        ),
        BackwardStep(
            f"b{i}-qkv",
            f"{block_label(i)} Q, K, V",
            "∂L/∂q = ∂L/∂scores · k × scale, ∂L/∂k = ∂L/∂scoresᵀ · q × scale (through RoPE, QK-norm and "
            "soft-capping where the model has them), ∂L/∂v = patternᵀ · ∂L/∂z; then W_Q, W_K, W_V.",
            g(p + "attn.hook_q", p + "attn.hook_k", p + "attn.hook_v"),
            tuple(n for n in w(p + "attn.") if not n.endswith(("W_O", "b_O"))),
            p + "attn",
        ),
        BackwardStep(
            f"b{i}-ln1",
            _split_title(cfg, i, 1),
            skip,
            g(p + "ln1.hook_out", p + "ln1.hook_normalized", p + "hook_resid_pre"),
            w(p + "ln1."),
            p + "norms",
        ),
    ]


def gradient_norms(trace: Trace, cfg: ModelConfig) -> tuple[list[str], np.ndarray]:
    """‖∂L/∂residual‖ per position along the residual stream, from the embeddings (bottom) to
    the last block's output: the skip connections carry the gradient down undiminished."""
    points = residual_points(cfg)
    return [label for label, _ in points], torch.stack(
        [trace[GRAD + name].to(torch.float64).norm(dim=-1) for _, name in points]
    ).cpu().numpy()


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
    if name == "unembed.W_U":  # (its bias b_U's gradient is a sum over positions, not such a product)
        return ("mlm.ln.hook_out" if cfg.mlm_head else "ln_final.hook_out" if cfg.final_norm else stream_end(cfg), "hook_logits")
    if name == "mlm.W_dense":
        return (stream_end(cfg), "mlm.hook_dense")
    if parts_[0] != "blocks":
        return None
    p, kind = f"blocks.{parts_[1]}.", parts_[-1]
    # what attention and the MLP read: their norms' outputs, or in a post-norm block the stream itself
    attn_in, mlp_in = (
        (p + "hook_resid_pre", p + "hook_resid_mid") if cfg.norm_position == "post" else (p + "ln1.hook_out", p + "ln2.hook_out")
    )
    # with post norms, the sublayers' own outputs (before the norm) are what W_O and W_out make
    attn_out, mlp_out = (p + "attn.hook_out", p + "mlp.hook_out") if cfg.post_norms else (p + "hook_attn_out", p + "hook_mlp_out")
    # an MLP's weights by its prefix: the dense MLP's, or in a mixture of experts the experts' (all
    # of them, the expert axis first) or the shared expert's, each writing its own hook_out
    mlp = ".".join(parts_[2:-1]) + "."  # "mlp.", "mlp.experts.", "mlp.shared." (or "attn.", not read)
    if mlp in ("mlp.experts.", "mlp.shared."):
        mlp_out = p + mlp + "hook_out"
    return {
        "W_Q": (attn_in, p + "attn.hook_q"),
        "W_K": (attn_in, p + "attn.hook_k"),
        "W_V": (attn_in, p + "attn.hook_v"),
        "W_O": (p + "attn.hook_z", attn_out),
        "W_in": (mlp_in, p + mlp + ("hook_linear" if cfg.gated_mlp else "hook_pre")),
        "W_gate": (mlp_in, p + mlp + "hook_pre"),
        "W_out": (p + mlp + "hook_post", mlp_out),
        "W_router": (mlp_in, p + "mlp.hook_router_logits"),
    }.get(kind)


def recomputed_weight_gradient(trace: Trace, cfg: ModelConfig, name: str) -> torch.Tensor | None:
    """The weight's gradient rebuilt from the captured input and output gradient, in float64,
    to set beside autograd's."""
    product = weight_gradient_product(cfg, name)
    if product is None:
        return None
    x, dy = trace[product[0]].to(torch.float64), trace[GRAD + product[1]].to(torch.float64)
    if name.endswith("W_O"):  # z is per head: (H, T, dh); attn_out is (T, D)
        return torch.einsum("htd,te->hde", x, dy)
    if x.dim() == 3 and dy.dim() == 3:  # the experts' W_out: per expert, (E, T, F) and (E, T, D)
        return torch.einsum("etf,etd->efd", x, dy)
    if dy.dim() == 3:  # W_Q/W_K/W_V: input (T, D), gradient per head (H, T, dh); the experts' W_in, W_gate per expert
        return torch.einsum("td,hte->hde", x, dy)
    return x.T @ dy
