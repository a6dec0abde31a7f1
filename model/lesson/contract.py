"""The worked example as one JSON object (``glassbox worked-example --json``): every weight,
forward tensor, gradient and updated weight under the article's names. The README's
"The worked example's JSON" section is its contract."""

from __future__ import annotations

import torch

from model.engine import GRAD, Target, run_trace
from model.lesson.article import article_weights, published


def article_json(loaded, learning_rate: float | None = None) -> dict:
    """The JSON object of shared/worked_example/README.md, from one traced forward and
    backward pass of the engine: weights, forward tensors, gradients, updated weights."""
    article = published()
    model, cfg = loaded.model, loaded.cfg
    lr = article["config"]["learning_rate"] if learning_rate is None else learning_rate
    tokens = article["config"]["input_ids"]
    trace = run_trace(model, tokens, backward=True, target=Target(article["config"]["target_id"]))
    last = len(tokens) - 1
    out: dict[str, torch.Tensor | float] = {}
    param_names = [name for name, _ in model.named_parameters()]
    weights = article_weights(cfg, dict(model.named_parameters()))
    out.update(weights)

    out["X(0)"] = trace["blocks.0.hook_resid_pre"]
    for b in range(1, cfg.n_layers + 1):
        p = f"blocks.{b - 1}."
        out[f"X_LN({b - 1})"] = trace[p + "ln1.hook_out"]
        for h in range(1, cfg.n_heads + 1):
            for article_name, engine_name in (("Q", "hook_q"), ("K", "hook_k"), ("V", "hook_v"), ("scores", "hook_scores"),
                                            ("A", "hook_pattern"), ("out", "hook_z")):
                out[f"{article_name}({b},{h})"] = trace[p + "attn." + engine_name][h - 1]
        z = trace[p + "attn.hook_z"]
        out[f"concat({b})"] = z.permute(1, 0, 2).reshape(len(tokens), -1)
        out[f"attn_out({b})"] = trace[p + "hook_attn_out"]
        out[f"X_mid({b})"] = trace[p + "hook_resid_mid"]
        out[f"X_mid_LN({b})"] = trace[p + "ln2.hook_out"]
        out[f"h({b})"] = trace[p + "mlp.hook_pre"]
        out[f"h_act({b})"] = trace[p + "mlp.hook_post"]
        out[f"ffn_out({b})"] = trace[p + "hook_mlp_out"]
        out[f"X({b})"] = trace[p + "hook_resid_post"]
    out["X_final"] = trace["ln_final.hook_out"]
    out["logits"] = trace["hook_logits"][last]
    out["probs"] = trace["hook_probs"][last]
    out["loss"] = trace.loss

    out["dL/dlogits"] = trace[GRAD + "hook_logits"][last]
    out["dL/dh_final"] = trace[GRAD + "ln_final.hook_out"][last]
    out["dL/dX(0)"] = trace[GRAD + "blocks.0.hook_resid_pre"]
    for b in range(1, cfg.n_layers + 1):
        p = f"{GRAD}blocks.{b - 1}."
        out[f"dL/dX({b})"] = trace[p + "hook_resid_post"]
        out[f"dL/dh({b})"] = trace[p + "mlp.hook_pre"]
        out[f"dL/dh_act({b})"] = trace[p + "mlp.hook_post"]
    # The tied embedding is used twice: looked up at the input, and as the output head.
    embed_grad = torch.zeros_like(weights["W_E"]).index_add_(0, torch.tensor(tokens), trace[GRAD + "hook_embed"])
    head_grad = trace[GRAD + "hook_logits"].T @ trace["ln_final.hook_out"]
    out["dL/dW_E_input"], out["dL/dW_E_output"] = embed_grad, head_grad
    grads = article_weights(cfg, {name: trace[GRAD + name] for name in param_names})
    out.update({f"dL/d{k}": v for k, v in grads.items()})
    out.update({f"{k}_new": weights[k] - lr * grads[k] for k in weights})
    return {k: v if isinstance(v, float) else v.detach().cpu().double().tolist() for k, v in out.items()}

