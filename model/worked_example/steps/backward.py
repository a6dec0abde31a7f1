"""The backward steps, in reverse: from the loss through the head and the final LayerNorm, back
through each block (MLP, residual split, attention, residual split), to the positional table
and the tied embedding's two gradients."""

from __future__ import annotations

import math

import numpy as np

from glassbox.model.worked_example.steps.builder import Builder, to_numpy
from glassbox.model.worked_example.steps.explain import (
    add_explainer,
    column_sum_explainer,
    embedding_input_explainer,
    loss_gradient_explainer,
    outer_explainer,
    position_gradient_explainer,
    relu_backward_explainer,
    softmax_backward_explainer,
    sum_of_products_explainer,
)
from glassbox.model.worked_example.steps.grids import Grid, Panel, Step
from glassbox.model.worked_example.tied_embedding import embedding_gradient_parts


def backward_steps(s: Builder) -> list[Step]:
    steps = [_loss_gradient(s), _head(s), _final_layernorm(s)]
    for b in range(s.cfg.n_layers, 0, -1):
        steps += [make(s, b) for make in BLOCK_STEPS]
    return steps + [_positions(s), _embedding(s)]


def _loss_gradient(s: Builder) -> Step:
    word = s.vocab[s.target]
    onehot = np.zeros_like(s.value("probs"))
    onehot[0, s.target] = 1.0
    explain = loss_gradient_explainer("dL/dlogits", s.value("probs"), "probs", onehot, "y")
    return Step(
        "grad-logits",
        "backward",
        "softmax",
        "∂L/∂logits = p − y",
        f"The backward pass starts at the loss. For softmax followed by −log p, the gradient of each logit is its "
        f"probability minus 1 for the right word (“{word}”) and minus 0 for the others: push “{word}” up, the rest down.",
        r"\partial L/\partial\,\text{logits} = p - y,\quad y = \text{one-hot}(\text{%s})" % word,
        [
            Panel(
                "", [s.tensor("probs"), s.grid("y", "one-hot target", onehot, "last", "vocab")], [s.tensor("dL/dlogits", explain)]
            )
        ],
    )


def _head(s: Builder) -> Step:
    return Step(
        "grad-head",
        "backward",
        "logits",
        "Through the tied head: ∂L/∂h",
        "Logits were the last vector dotted with each word's embedding, so the gradient on that vector is the "
        "embeddings weighted by their logit gradients. (The same product also gives W_E a gradient: see the "
        "embedding step at the end.)",
        r"\partial L/\partial h_{\text{final}} = (\partial L/\partial\,\text{logits})\;W_E",
        s.product_panel("dL/dh_final", "dL/dlogits", "W_E"),
    )


def _final_layernorm(s: Builder) -> Step:
    out = f"dL/dX({s.cfg.n_layers})"
    return Step(
        "grad-final-layernorm",
        "backward",
        "ln_f",
        "Through the final LayerNorm",
        "LayerNorm's gradient removes the parts that normalisation cancels: the mean of the incoming gradient and "
        "its component along the normalised vector. Only the last position has a loss, so the other rows are 0.",
        r"\partial x = \frac{1}{\sigma}\left(g - \bar g - \hat x\,\overline{g \hat x}\right)",
        [
            Panel(
                "",
                [s.tensor("dL/dX_final"), s.normalized("X_final"), s.tensor("σ_final")],
                [s.tensor(out, s.layernorm_backward(out, "dL/dX_final", "X_final", "σ_final"))],
            )
        ],
    )


# ---- one block, FFN first ----------------------------------------------------------------------


def _ffn_output_weights(s: Builder, b: int) -> Step:
    return Step(
        f"grad-b{b}-ffn-weights",
        "backward",
        f"b{b}.ffn",
        f"Block {b}: ∂W_2 and ∂b_2",
        f"X({b}) = X_mid + ffn_out: the residual hands ∂L/∂X({b}) unchanged to both branches. W_2's gradient pairs "
        "each neuron's activation with each output gradient, summed over positions; a dead neuron (activation 0) "
        "gets no gradient.",
        r"\partial W_2 = h_{act}^\top\,\partial\,\text{ffn\_out},\quad \partial b_2 = \textstyle\sum_t \partial\,\text{ffn\_out}_t,"
        r"\quad \partial\,\text{ffn\_out} = \partial X^{(%d)}" % b,
        _linear_layer_gradients(s, f"h_act({b})", f"dL/dX({b})", f"W_2({b})", f"b_2({b})"),
    )


def _linear_layer_gradients(s: Builder, x: str, d_out: str, weight: str, bias: str) -> list[Panel]:
    """One panel: out = x W + b gives ∂W = xᵀ ∂out and ∂b = the column sums of ∂out."""
    return [
        Panel(
            "",
            [s.tensor(x), s.tensor(d_out)],
            [
                s.product(f"dL/d{weight}", f"{x}ᵀ", d_out),
                s.tensor(f"dL/d{bias}", column_sum_explainer(f"dL/d{bias}", s.value(d_out), d_out)),
            ],
        )
    ]


def _ffn_activation(s: Builder, b: int) -> Step:
    return Step(
        f"grad-b{b}-ffn-activation",
        "backward",
        f"b{b}.ffn",
        f"Block {b}: ∂h_act",
        "The gradient flows back through W_2 to each neuron's activation.",
        r"\partial h_{act} = \partial\,\text{ffn\_out}\;W_2^\top",
        s.product_panel(f"dL/dh_act({b})", f"dL/dX({b})", f"W_2({b})ᵀ"),
    )


def _relu(s: Builder, b: int) -> Step:
    d_post, pre = f"dL/dh_act({b})", f"h({b})"
    explain = relu_backward_explainer(f"dL/dh({b})", s.value(d_post), d_post, s.value(pre), pre)
    return Step(
        f"grad-b{b}-relu",
        "backward",
        f"b{b}.ffn",
        f"Block {b}: the ReLU mask",
        "ReLU's slope is 1 where the neuron was on and 0 where it was off: gradients of dead neurons are zeroed "
        "(outlined cells).",
        r"\partial h = \partial h_{act} \odot [h > 0]",
        [Panel("", [s.tensor(d_post), s.tensor(pre)], [s.tensor(f"dL/dh({b})", explain, before=d_post)])],
    )


def _ffn_input_weights(s: Builder, b: int) -> Step:
    return Step(
        f"grad-b{b}-ffn-input-weights",
        "backward",
        f"b{b}.ffn",
        f"Block {b}: ∂W_1 and ∂b_1",
        "W_1's gradient pairs each input dimension with each neuron's gradient, summed over positions.",
        r"\partial W_1 = X_{mid,LN}^\top\,\partial h,\quad \partial b_1 = \textstyle\sum_t \partial h_t",
        _linear_layer_gradients(s, f"X_mid_LN({b})", f"dL/dh({b})", f"W_1({b})", f"b_1({b})"),
    )


def _ffn_input(s: Builder, b: int) -> Step:
    return Step(
        f"grad-b{b}-ffn-input",
        "backward",
        f"b{b}.ffn",
        f"Block {b}: ∂X_mid_LN",
        "Back through W_1 to the MLP's input.",
        r"\partial X_{mid,LN} = \partial h\;W_1^\top",
        s.product_panel(f"dL/dX_mid_LN({b})", f"dL/dh({b})", f"W_1({b})ᵀ"),
    )


def _residual2(s: Builder, b: int) -> Step:
    return _residual_split(
        s,
        f"grad-b{b}-residual2",
        f"b{b}.res2",
        f"Block {b}: LayerNorm 2 and the residual split",
        f"X_mid fed two paths: straight to X({b}) (the residual) and into LayerNorm → MLP. Its gradient is the sum "
        "of the two: the skip path's gradient unchanged, plus the MLP path's gradient back through LayerNorm.",
        skip=s.tensor(f"dL/dX({b})"),
        through=f"dL/dX_mid_LN({b})",
        total=s.tensor(f"dL/dX_mid({b})"),
    )


def _residual1(s: Builder, b: int) -> Step:
    return _residual_split(
        s,
        f"grad-b{b}-residual1",
        f"b{b}.res1",
        f"Block {b}: LayerNorm 1 and the residual split",
        f"X({b - 1}) fed the residual and LayerNorm → attention: its gradient is the skip path's plus the attention "
        "path's back through LayerNorm." + (" This is the gradient on the embeddings plus positions." if b == 1 else ""),
        skip=s.tensor(f"dL/dX_mid({b})"),
        through=f"dL/dX_LN({b - 1})",
        total=s.block_input(b, gradient=True),
    )


def _residual_split(s: Builder, key: str, stage: str, title: str, sentence: str, skip: Grid, through: str, total: Grid) -> Step:
    """dL/dx = skip + LayerNorm-backward(through): the two paths out of a residual stream.
    ``through`` is the gradient on the LayerNorm's output; ``total`` the engine's dL/dx."""
    normed = through[len("dL/d") :]
    via_label = f"{total.label} via LN"
    via = total.values - skip.values  # the LayerNorm path's share of the engine's gradient
    total.explain = add_explainer(total.label, skip.values, skip.label, via, via_label)
    return Step(
        key,
        "backward",
        stage,
        title,
        sentence,
        r"\partial x = \partial x_{\text{skip}} + \frac{1}{\sigma}\left(g - \bar g - \hat x\,\overline{g\hat x}\right)",
        [
            Panel(
                "",
                [skip, s.tensor(through), s.normalized(normed), s.tensor(f"σ {normed}")],
                [
                    s.grid(
                        via_label,
                        f"{total.name} − {skip.name}",
                        via,
                        "pos",
                        "model",
                        s.layernorm_backward(via_label, through, normed, f"σ {normed}"),
                    ),
                    total,
                ],
            )
        ],
    )


# ---- one block's attention ---------------------------------------------------------------------


def _output_projection(s: Builder, b: int) -> Step:
    d_out = f"dL/dattn_out({b})"
    return Step(
        f"grad-b{b}-output-projection",
        "backward",
        f"b{b}.attn",
        f"Block {b}: ∂W_O and ∂concat",
        f"The residual hands ∂L/∂X_mid({b}) to attention's output unchanged. W_O's gradient pairs the heads' "
        "outputs with it; going back through W_O splits the gradient into one part per head.",
        r"\partial W_O = \text{concat}^\top\,\partial\,\text{attn\_out},\quad"
        r"\partial\,\text{concat} = \partial\,\text{attn\_out}\;W_O^\top",
        [
            Panel(
                "",
                [s.tensor(f"concat({b})"), s.tensor(d_out), s.tensor(f"W_O({b})")],
                [s.product(f"dL/dW_O({b})", f"concat({b})ᵀ", d_out), s.product(f"dL/dconcat({b})", d_out, f"W_O({b})ᵀ")],
            )
        ],
    )


def _values(s: Builder, b: int) -> Step:
    return Step(
        f"grad-b{b}-values",
        "backward",
        f"b{b}.attn",
        f"Block {b}: ∂V and ∂A",
        "out = A V, so each value vector's gradient collects the output gradients of the positions that attended "
        "to it, and each attention weight's gradient is how much its value vector agrees with the output gradient. "
        "∂A is not zero above the diagonal, but those weights were fixed at 0 by the mask: the next step shows "
        "the gradient stopping there.",
        r"\partial V = A^\top\,\partial\,\text{out},\quad \partial A = \partial\,\text{out}\;V^\top",
        s.per_head(
            b,
            lambda hh: (
                [s.tensor(f"A{hh}"), s.tensor(f"V{hh}"), s.tensor(f"dL/dout{hh}")],
                [s.product(f"dL/dV{hh}", f"A{hh}ᵀ", f"dL/dout{hh}"), s.product(f"dL/dA{hh}", f"dL/dout{hh}", f"V{hh}ᵀ")],
            ),
        ),
    )


def _softmax(s: Builder, b: int) -> Step:
    def head(hh):
        a, da, ds = f"A{hh}", f"dL/dA{hh}", f"dL/dscores{hh}"
        return ([s.tensor(a), s.tensor(da)], [s.tensor(ds, softmax_backward_explainer(ds, s.value(a), a, s.value(da), da))])

    return Step(
        f"grad-b{b}-softmax",
        "backward",
        f"b{b}.attn",
        f"Block {b}: back through the softmax",
        "A softmax row's gradient is each weight times (its gradient minus the row's weighted average gradient). "
        "Masked positions have weight 0, so their score gradient is exactly 0.",
        r"\partial S_{t,u} = A_{t,u}\left(\partial A_{t,u} - \textstyle\sum_{u'} A_{t,u'}\,\partial A_{t,u'}\right)",
        s.per_head(b, head),
    )


def _queries_keys(s: Builder, b: int) -> Step:
    scale = math.sqrt(s.cfg.d_head)
    return Step(
        f"grad-b{b}-queries-keys",
        "backward",
        f"b{b}.attn",
        f"Block {b}: ∂Q and ∂K",
        "S = Q Kᵀ/√d_head: a query's gradient is the keys weighted by its row of score gradients, a key's "
        "gradient the queries weighted by its column.",
        r"\partial Q = \partial S\,K/\sqrt{d_{head}},\quad \partial K = \partial S^\top Q/\sqrt{d_{head}}",
        s.per_head(
            b,
            lambda hh: (
                [s.tensor(f"dL/dscores{hh}"), s.tensor(f"Q{hh}"), s.tensor(f"K{hh}")],
                [
                    s.product(f"dL/dQ{hh}", f"dL/dscores{hh}", f"K{hh}", scale=scale),
                    s.product(f"dL/dK{hh}", f"dL/dscores{hh}ᵀ", f"Q{hh}", scale=scale),
                ],
            ),
        ),
    )


def _qkv_weights(s: Builder, b: int) -> Step:
    x_ln = f"X_LN({b - 1})"

    def head(hh):
        return (
            [s.tensor(x_ln)] + [s.tensor(f"dL/d{kind}{hh}") for kind in "QKV"],
            [s.product(f"dL/dW_{kind}{hh}", f"{x_ln}ᵀ", f"dL/d{kind}{hh}") for kind in "QKV"],
        )

    return Step(
        f"grad-b{b}-qkv-weights",
        "backward",
        f"b{b}.attn",
        f"Block {b}: ∂W_Q, ∂W_K, ∂W_V",
        "Each projection's gradient pairs the LayerNorm output with the gradient of what it produced, summed over positions.",
        r"\partial W_Q = X_{LN}^\top\,\partial Q,\quad \partial W_K = X_{LN}^\top\,\partial K,\quad"
        r"\partial W_V = X_{LN}^\top\,\partial V",
        s.per_head(b, head),
    )


def _attention_input(s: Builder, b: int) -> Step:
    grads = [(f"dL/d{kind}({b},{h})", f"W_{kind}({b},{h})") for h in range(1, s.cfg.n_heads + 1) for kind in "QKV"]
    out = f"dL/dX_LN({b - 1})"
    explain = sum_of_products_explainer(out, [(s.value(g), g, s.value(w), w) for g, w in grads])
    return Step(
        f"grad-b{b}-attention-input",
        "backward",
        f"b{b}.attn",
        f"Block {b}: ∂X_LN",
        f"X_LN fed all {3 * s.cfg.n_heads} projections (Q, K and V of every head): its gradient is the sum of what "
        "comes back through each.",
        r"\partial X_{LN} = \textstyle\sum_h \left(\partial Q_h W_{Q,h}^\top + \partial K_h W_{K,h}^\top + "
        r"\partial V_h W_{V,h}^\top\right)",
        [Panel("", [s.tensor(g) for g, _ in grads], [s.tensor(out, explain)])],
    )


BLOCK_STEPS = (
    _ffn_output_weights,
    _ffn_activation,
    _relu,
    _ffn_input_weights,
    _ffn_input,
    _residual2,
    _output_projection,
    _values,
    _softmax,
    _queries_keys,
    _qkv_weights,
    _attention_input,
    _residual1,
)


# ---- the embeddings ----------------------------------------------------------------------------


def _positions(s: Builder) -> Step:
    return Step(
        "grad-positions",
        "backward",
        "pos",
        "Gradient of the positional table",
        "X(0) = E + W_P: addition passes the gradient on unchanged, so row t of W_P gets ∂L/∂X(0) at position t, "
        "and the embedding rows get the same.",
        r"\partial L/\partial W_P[t] = \partial L/\partial X^{(0)}_t = \partial L/\partial E_t",
        [
            Panel(
                "",
                [s.tensor("dL/dX(0)")],
                [s.tensor("dL/dW_P", position_gradient_explainer("dL/dW_P", s.value("dL/dX(0)"), "dL/dX(0)"))],
            )
        ],
    )


def _embedding(s: Builder) -> Step:
    d_input, d_output = (to_numpy(part) for part in embedding_gradient_parts(s.trace, s.tokens))
    explain_input = embedding_input_explainer("dL/dW_E_input", s.value("dL/dE"), "dL/dE", s.tokens, s.vocab)
    explain_output = outer_explainer("dL/dW_E_output", s.value("dL/dlogits"), "dL/dlogits", s.value("X_final"), "X_final", s.last)
    return Step(
        "grad-embedding",
        "backward",
        "embed",
        "The tied embedding's two gradients",
        "W_E is used twice: looked up at the input, and as the unembedding (tied). Its gradient is the sum of both uses. "
        "Input part: each token's row collects ∂L/∂E from every position holding it, so the two “the”s add up. "
        "Output part: each word's row is its logit gradient times the final vector.",
        r"\partial W_E = \underbrace{\textstyle\sum_{t:\,\text{id}_t = v} \partial E_t}_{\text{input}} + "
        r"\underbrace{(\partial\,\text{logits})^\top h_{\text{final}}}_{\text{output}}",
        [
            Panel(
                "",
                [s.tensor("dL/dE"), s.tensor("dL/dlogits"), s.tensor("X_final")],
                [
                    s.grid("dL/dW_E_input", "grad:hook_embed, added per token id", d_input, "vocab", "model", explain_input),
                    s.grid(
                        "dL/dW_E_output", "(grad:hook_logits)ᵀ · ln_final.hook_out", d_output, "vocab", "model", explain_output
                    ),
                    s.tensor("dL/dW_E", add_explainer("dL/dW_E", d_input, "dL/dW_E_input", d_output, "dL/dW_E_output")),
                ],
            )
        ],
    )
