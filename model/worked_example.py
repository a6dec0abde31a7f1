"""The worked example of "Large Language Models from scratch — Part 2" as a Glassbox model.

``published.json`` (a copy of the article's data) gives the configuration and every weight
the article prints. Those are used exactly. The weights it does not print (block 1's FFN,
block 2's attention except W_V(2,1), block 2's W_O and FFN) are reconstructed by
``reconstruct``: fitted so that the figures the article prints for them come out.

Article names -> engine names: W_E -> embed.W_E, W_P -> pos_embed.W_pos,
W_Q(b,h) -> blocks.{b-1}.attn.W_Q[h-1] (same for K, V), W_O(b) -> blocks.{b-1}.attn.W_O
(its rows split per head), W_1(b), b_1(b), W_2(b), b_2(b) -> blocks.{b-1}.mlp.W_in, b_in,
W_out, b_out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from .capture import capture
from .checkpoint import NAMED_MODELS, save
from .tokenizer import Tokenizer
from .transformer import ModelConfig, Transformer

DIR = NAMED_MODELS["worked-example"]
PUBLISHED = DIR / "published.json"
PROMPT = "the cat sat on the"
SOLVER_SEED = 0


def published() -> dict:
    return json.loads(PUBLISHED.read_text())


def config(article: dict) -> ModelConfig:
    c = article["config"]
    return ModelConfig(
        vocab_size=len(c["vocab"]),
        n_ctx=len(article["given_weights"]["W_P"]),
        d_model=c["d_model"],
        n_layers=c["n_blocks"],
        n_heads=c["n_heads"],
        d_head=c["d_head"],
        d_ff=c["d_ff"],
        norm="layernorm",
        norm_eps=1e-5,
        activation=c["activation"],
        positional="table",
        attn_bias=False,
        mlp_bias=True,
        final_norm=True,
        tie_embeddings=c["weight_tying"],
    )


def engine_slot(article_name: str, cfg: ModelConfig) -> tuple[str, int | None]:
    """Where an article weight lives: (parameter name, head index or None)."""
    if article_name == "W_E":
        return "embed.W_E", None
    if article_name == "W_P":
        return "pos_embed.W_pos", None
    m = re.fullmatch(r"W_([QKV])\((\d),(\d)\)", article_name)
    if m:
        return f"blocks.{int(m[2]) - 1}.attn.W_{m[1]}", int(m[3]) - 1
    m = re.fullmatch(r"(W_O|W_1|b_1|W_2|b_2)\((\d)\)", article_name)
    if m:
        local = {"W_O": "attn.W_O", "W_1": "mlp.W_in", "b_1": "mlp.b_in", "W_2": "mlp.W_out", "b_2": "mlp.b_out"}
        return f"blocks.{int(m[2]) - 1}.{local[m[1]]}", None
    raise KeyError(article_name)


# Article figure -> (engine tensor, head): the tensors the article prints for weights it does not.
FIGURES = {
    "h(1)": ("blocks.0.mlp.hook_pre", None),
    "ffn_out(1)": ("blocks.0.hook_mlp_out", None),
    "X(1)": ("blocks.0.hook_resid_post", None),
    "X(2)": ("blocks.1.hook_resid_post", None),
    "h(2)": ("blocks.1.mlp.hook_pre", None),
    "X_final": ("ln_final.hook_out", None),
    "dL/dX(2)": ("grad:blocks.1.hook_resid_post", None),
    "dL/dh_act(2)": ("grad:blocks.1.mlp.hook_post", None),
    "dL/dh(2)": ("grad:blocks.1.mlp.hook_pre", None),
    "dL/dW_Q(2,1)": ("grad:blocks.1.attn.W_Q", 0),
    "dL/dW_K(2,1)": ("grad:blocks.1.attn.W_K", 0),
    "dL/dW_V(2,1)": ("grad:blocks.1.attn.W_V", 0),
    "dL/dX(1)": ("grad:blocks.0.hook_resid_post", None),
    "dL/dX(0)": ("grad:blocks.0.hook_resid_pre", None),
}


def printed_figure(value) -> tuple[int | None, torch.Tensor]:
    """(row or None, values) of a published figure: {"row": r, "value": [...]} or a full grid."""
    if isinstance(value, dict):
        return value["row"], torch.tensor(value["value"], dtype=torch.float64)
    return None, torch.tensor(value, dtype=torch.float64)


def figure_errors(model: Transformer, article: dict) -> dict[str, torch.Tensor]:
    """Computed minus printed, for every published figure; differentiable w.r.t. the weights
    (the solver minimises these). The loss is -log p(target) at the last position."""
    ids = torch.tensor([article["config"]["input_ids"]])
    targets = torch.full_like(ids, -1)
    targets[0, -1] = article["config"]["target_id"]
    with capture() as recorder:
        loss = model(ids, targets).loss
    tensors = dict(recorder.tensors)
    params = dict(model.named_parameters())
    wanted = sorted({name[len("grad:"):] for name, _ in FIGURES.values() if name.startswith("grad:")})
    inputs = [tensors[n] if n in tensors else params[n] for n in wanted]
    grads = torch.autograd.grad(loss, inputs, create_graph=True)
    tensors.update({"grad:" + n: g for n, g in zip(wanted, grads)})
    errors = {}
    for figure, value in article["published_figures"].items():
        name, head = FIGURES[figure]
        computed = tensors[name]
        if "hook_" in name:
            computed = computed[0]  # activations carry the batch dimension, weights do not
        if head is not None:
            computed = computed[head]
        row, printed = printed_figure(value)
        errors[figure] = (computed if row is None else computed[row]) - printed
    return errors


def _printed_slots(model: Transformer, article: dict) -> dict[str, torch.Tensor]:
    """Boolean masks, per parameter, of the entries the article prints (kept fixed)."""
    params = dict(model.named_parameters())
    fixed = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in params.items()}
    for name in fixed:
        if name.endswith((".w", ".b")):  # LayerNorm: gamma = 1, beta = 0 by the article's convention
            fixed[name][:] = True
    for article_name in article["given_weights"]:
        name, head = engine_slot(article_name, model.cfg)
        fixed[name][slice(None) if head is None else head] = True
    return fixed


def reconstruct(article: dict, seed: int = SOLVER_SEED, log=print) -> Transformer:
    """Fit the unprinted weights so that the published figures come out.

    Printed weights are set exactly and never move; the rest start from a seeded uniform
    draw and minimise the squared difference to every published figure: Adam to get close,
    then L-BFGS to polish. Deterministic for a seed (float64, CPU)."""
    torch.manual_seed(seed)
    model = Transformer(config(article)).to(torch.float64)
    params = dict(model.named_parameters())
    fixed = _printed_slots(model, article)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in params.items():
            if not name.endswith((".w", ".b")):
                param.copy_(torch.rand(param.shape, generator=gen, dtype=torch.float64) * 0.5 - 0.1)
        for article_name, value in article["given_weights"].items():
            name, head = engine_slot(article_name, model.cfg)
            target = params[name] if head is None else params[name][head]
            target.copy_(torch.tensor(value, dtype=torch.float64).reshape(target.shape))
    free = [p for n, p in params.items() if not fixed[n].all()]

    def objective() -> torch.Tensor:
        for p in params.values():
            p.grad = None
        error = torch.cat([e.reshape(-1) for e in figure_errors(model, article).values()])
        total = error.pow(2).sum()
        total.backward()
        for name, p in params.items():
            if p.grad is not None:
                p.grad[fixed[name]] = 0  # printed weights stay as printed
        return total

    adam = torch.optim.Adam(free, lr=0.01)
    for step in range(6000):
        total = objective()
        adam.step()
        if step % 1000 == 0:
            log(f"adam step {step}: squared error {total.item():.6f}")
    lbfgs = torch.optim.LBFGS(free, lr=1, max_iter=50, history_size=50, line_search_fn="strong_wolfe")
    for step in range(40):
        total = lbfgs.step(objective)
    log(f"l-bfgs: squared error {total.item():.8f}")
    for p in params.values():
        p.grad = None
    return model


def build(path: Path = DIR, log=print) -> Transformer:
    """Reconstruct the unprinted weights and write the model to assets/worked-example."""
    article = published()
    model = reconstruct(article, log=log)
    errors = torch.cat([e.reshape(-1) for e in figure_errors(model, article).values()]).detach().abs()
    about = {
        "source": 'the worked example of "Large Language Models from scratch — Part 2"',
        "sample_prompt": PROMPT,
        "printed_weights": list(article["given_weights"]),
        "reconstructed_weights": (
            f"fitted to the article's {len(errors)} printed figure values by "
            f"`python -m model build-worked-example` (seed {SOLVER_SEED}): largest difference "
            f"{errors.max().item():.4f}, {(errors <= 0.002).double().mean().item():.0%} within 0.002"
        ),
    }
    save(path, model, Tokenizer.word_level(article["config"]["vocab"]), "float64", about)
    return model


def article_weights(cfg: ModelConfig, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Engine parameters (or their gradients) under the article's names: W_Q(b,h) is
    d_model x d_head, W_O(b) the (heads * d_head) x d_model matrix applied to the
    concatenated heads."""
    weights = {"W_E": params["embed.W_E"], "W_P": params["pos_embed.W_pos"]}
    for b in range(1, cfg.n_layers + 1):
        for h in range(1, cfg.n_heads + 1):
            for kind in "QKV":
                name, head = engine_slot(f"W_{kind}({b},{h})", cfg)
                weights[f"W_{kind}({b},{h})"] = params[name][head]
        for kind in ("W_O", "W_1", "b_1", "W_2", "b_2"):
            name, _ = engine_slot(f"{kind}({b})", cfg)
            weights[f"{kind}({b})"] = params[name]
    return {k: (v.reshape(-1, cfg.d_model) if k.startswith("W_O") else v) for k, v in weights.items()}


def article_json(loaded, learning_rate: float | None = None) -> dict:
    """The JSON object of shared/worked_example/README.md, from one traced forward and
    backward pass of the engine: weights, forward tensors, gradients, updated weights."""
    from .trace import GRAD, Target, run_trace

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
            for article_name, hook_name in (("Q", "hook_q"), ("K", "hook_k"), ("V", "hook_v"), ("scores", "hook_scores"),
                                            ("A", "hook_pattern"), ("out", "hook_z")):
                out[f"{article_name}({b},{h})"] = trace[p + "attn." + hook_name][h - 1]
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

