"""The worked example as one JSON object (``glassbox worked-example --json``): every weight,
forward tensor, gradient and updated weight under the article's names. docs/worked-example.md
"The worked example's JSON" section is its contract."""

from __future__ import annotations

import torch

from glassbox.model.engine import GRAD, ModelConfig, Target, run_trace
from glassbox.model.worked_example.article import article_weights, published
from glassbox.model.worked_example.names import article_tensor
from glassbox.model.worked_example.tied_embedding import embedding_gradient_parts


def forward_names(cfg: ModelConfig) -> list[str]:
    """The forward tensors of the JSON, in the article's order (the loss comes after them)."""
    names = ["X(0)"]
    for b in range(1, cfg.n_layers + 1):
        names.append(f"X_LN({b - 1})")
        per_head = ("Q", "K", "V", "scores", "A", "out")
        names += [f"{kind}({b},{h})" for h in range(1, cfg.n_heads + 1) for kind in per_head]
        names += [f"{kind}({b})" for kind in ("concat", "attn_out", "X_mid", "X_mid_LN", "h", "h_act", "ffn_out", "X")]
    return names + ["X_final", "logits", "probs"]


def gradient_names(cfg: ModelConfig) -> list[str]:
    """The gradients of the JSON's tensors (those of the weights follow them)."""
    names = ["dL/dlogits", "dL/dh_final", "dL/dX(0)"]
    for b in range(1, cfg.n_layers + 1):
        names += [f"dL/dX({b})", f"dL/dh({b})", f"dL/dh_act({b})"]
    return names


def article_json(loaded, learning_rate: float | None = None) -> dict:
    """The JSON object docs/worked-example.md specifies ("The worked example's JSON"), from one traced forward and
    backward pass of the engine: weights, forward tensors, gradients, updated weights."""
    article = published()
    model, cfg = loaded.model, loaded.cfg
    lr = article["config"]["learning_rate"] if learning_rate is None else learning_rate
    tokens = article["config"]["input_ids"]
    trace = run_trace(model, tokens, backward=True, target=Target(article["config"]["target_id"]))
    last = len(tokens) - 1
    params = dict(model.named_parameters())
    weights = article_weights(cfg, params)
    grads = article_weights(cfg, {name: trace[GRAD + name] for name in params})

    out: dict[str, torch.Tensor | float] = dict(weights)
    out.update({name: article_tensor(name, trace, last) for name in forward_names(cfg)})
    out["loss"] = trace.loss
    out.update({name: article_tensor(name, trace, last) for name in gradient_names(cfg)})
    out["dL/dW_E_input"], out["dL/dW_E_output"] = embedding_gradient_parts(trace, tokens)
    out.update({f"dL/d{k}": v for k, v in grads.items()})
    out.update({f"{k}_new": weights[k] - lr * grads[k] for k in weights})
    return {k: v if isinstance(v, float) else v.detach().cpu().double().tolist() for k, v in out.items()}
