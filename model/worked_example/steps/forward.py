"""The forward steps, in the article's order: tokens, embedding, positions, each block, the
final LayerNorm, the tied head, the softmax and the loss."""

from __future__ import annotations

import math

import numpy as np

from glassbox.model.worked_example.steps.builder import Builder
from glassbox.model.worked_example.steps.explain import (
    add_explainer,
    concat_explainer,
    head_explainer,
    lookup_explainer,
    loss_explainer,
    mask_explainer,
    relu_explainer,
    token_id_explainer,
)
from glassbox.model.worked_example.steps.grids import Panel, Step


def forward_steps(s: Builder) -> list[Step]:
    steps = [_tokens(s), _embedding(s), _positions(s)]
    for b in range(1, s.cfg.n_layers + 1):
        steps += [make(s, b) for make in BLOCK_STEPS]
    return steps + [_final_layernorm(s), _logits(s), _softmax(s), _loss(s)]


def _tokens(s: Builder) -> Step:
    ids = np.array(s.tokens, dtype=np.float64)[None, :]
    return Step(
        "tokens",
        "forward",
        "tokens",
        "Tokens",
        f"The prompt is split into words, and each word is replaced by its row number in the {s.cfg.vocab_size}-word "
        f"vocabulary. The model's task: predict the word after the last one (here “{s.vocab[s.target]}”).",
        r"\text{ids} = \text{vocabulary index of each word}",
        [
            Panel(
                "", [], [s.grid("token ids", "tokens", ids, "stat", "pos", token_id_explainer(s.vocab, s.tokens), quantity=False)]
            )
        ],
    )


def _embedding(s: Builder) -> Step:
    return Step(
        "embedding",
        "forward",
        "embed",
        "Embedding lookup",
        "Each token id picks its row of the embedding matrix W_E: a vector of d_model numbers per token. "
        "“the” appears twice, so the same row is used twice.",
        r"E_t = W_E[\text{id}_t]",
        [Panel("", [s.tensor("W_E")], [s.tensor("E", lookup_explainer("E", s.value("W_E"), "W_E", s.tokens))])],
    )


def _positions(s: Builder) -> Step:
    used_rows = s.value("W_P")[: len(s.tokens)]
    return Step(
        "positions",
        "forward",
        "pos",
        "Add positions",
        "Attention alone cannot tell word order, so each position adds its own row of the positional table W_P. "
        "The two “the”s now differ.",
        r"X^{(0)} = E + W_P[0{:}T]",
        [
            Panel(
                "",
                [s.tensor("E"), s.tensor("W_P")],
                [s.tensor("X(0)", add_explainer("X(0)", s.value("E"), "E", used_rows, "W_P"), before="E")],
            )
        ],
    )


# ---- one block ---------------------------------------------------------------------------------


def _layernorm1(s: Builder, b: int) -> Step:
    x, x_ln = f"X({b - 1})", f"X_LN({b - 1})"
    return Step(
        f"b{b}-layernorm1",
        "forward",
        f"b{b}.ln1",
        f"Block {b}: LayerNorm",
        "Each position's vector is shifted to mean 0 and scaled to variance 1 (γ = 1, β = 0), so attention sees "
        "directions, not sizes.",
        r"\mathrm{LN}(x) = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}},\quad \mu, \sigma^2 \text{ over the } d_{model}"
        r"\text{ numbers of a position (biased variance)}",
        [Panel("", [s.block_input(b)], [s.tensor(x_ln, s.layernorm(x_ln, x))])],
    )


def _qkv(s: Builder, b: int) -> Step:
    x_ln = f"X_LN({b - 1})"

    def head(hh):
        return (
            [s.tensor(x_ln)] + [s.tensor(f"W_{kind}{hh}") for kind in "QKV"],
            [s.product(f"{kind}{hh}", x_ln, f"W_{kind}{hh}") for kind in "QKV"],
        )

    return Step(
        f"b{b}-qkv",
        "forward",
        f"b{b}.attn",
        f"Block {b}: queries, keys, values",
        f"Each of the {s.cfg.n_heads} heads projects every position three ways: a query (what it looks for), a key "
        f"(what it offers) and a value (what it passes on), each {s.cfg.d_head} numbers.",
        r"Q = X_{LN} W_Q,\quad K = X_{LN} W_K,\quad V = X_{LN} W_V",
        s.per_head(b, head),
    )


def _scores(s: Builder, b: int) -> Step:
    scale = math.sqrt(s.cfg.d_head)
    return Step(
        f"b{b}-scores",
        "forward",
        f"b{b}.attn",
        f"Block {b}: attention scores",
        "Every query is dotted with every key: how well position t's question matches position u's offer. "
        f"Dividing by √d_head = √{s.cfg.d_head} keeps the scores from growing with the head size.",
        r"S = Q K^\top / \sqrt{d_{head}}",
        s.per_head(
            b, lambda hh: ([s.tensor(f"Q{hh}"), s.tensor(f"K{hh}")], [s.product(f"scores{hh}", f"Q{hh}", f"K{hh}ᵀ", scale=scale)])
        ),
    )


def _mask(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-mask",
        "forward",
        f"b{b}.attn",
        f"Block {b}: causal mask",
        "A position may only look at itself and earlier positions: scores for later keys become −∞, which the "
        "softmax turns into exactly 0.",
        r"S_{t,u} \leftarrow -\infty \text{ for } u > t",
        s.per_head(
            b,
            lambda hh: (
                [s.tensor(f"scores{hh}")],
                [
                    s.tensor(
                        f"masked{hh}", mask_explainer(f"masked{hh}", s.value(f"scores{hh}"), f"scores{hh}"), before=f"scores{hh}"
                    )
                ],
            ),
        ),
    )


def _attention_softmax(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-softmax",
        "forward",
        f"b{b}.attn",
        f"Block {b}: attention weights (softmax)",
        "Each row of masked scores becomes a probability distribution over the positions it may attend to.",
        r"A_{t,u} = e^{S_{t,u}} / \textstyle\sum_{u' \le t} e^{S_{t,u'}}",
        s.per_head(b, lambda hh: ([s.tensor(f"masked{hh}")], [s.tensor(f"A{hh}", s.softmax(f"A{hh}", f"masked{hh}"))])),
    )


def _weighted_values(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-weighted-values",
        "forward",
        f"b{b}.attn",
        f"Block {b}: weighted values",
        "Each position's head output is the attention-weighted average of the value vectors.",
        r"\text{out} = A\,V",
        s.per_head(b, lambda hh: ([s.tensor(f"A{hh}"), s.tensor(f"V{hh}")], [s.product(f"out{hh}", f"A{hh}", f"V{hh}")])),
    )


def _concat(s: Builder, b: int) -> Step:
    heads = [f"out({b},{h})" for h in range(1, s.cfg.n_heads + 1)]
    explain = concat_explainer(f"concat({b})", [s.value(h) for h in heads], heads)
    return Step(
        f"b{b}-concat",
        "forward",
        f"b{b}.attn",
        f"Block {b}: concatenate the heads",
        f"The {s.cfg.n_heads} heads' outputs are laid side by side: back to d_model = {s.cfg.d_model} numbers per position.",
        r"\text{concat} = [\,\text{out}_1 \mid \text{out}_2\,]",
        [Panel("", [s.tensor(h) for h in heads], [s.tensor(f"concat({b})", explain)])],
    )


def _output_projection(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-output-projection",
        "forward",
        f"b{b}.attn",
        f"Block {b}: output projection W_O",
        "W_O mixes the heads' outputs into one update for the residual stream.",
        r"\text{attn\_out} = \text{concat}\;W_O",
        s.product_panel(f"attn_out({b})", f"concat({b})", f"W_O({b})"),
    )


def _residual1(s: Builder, b: int) -> Step:
    x = f"X({b - 1})"
    return Step(
        f"b{b}-residual1",
        "forward",
        f"b{b}.res1",
        f"Block {b}: residual connection",
        "Attention's output is added to its input rather than replacing it: the residual stream carries "
        "everything forward, and each layer writes a change into it.",
        r"X_{mid} = X + \text{attn\_out}",
        [
            Panel(
                "",
                [s.block_input(b), s.tensor(f"attn_out({b})")],
                [s.tensor(f"X_mid({b})", s.add(f"X_mid({b})", x, f"attn_out({b})"), before=x)],
            )
        ],
    )


def _layernorm2(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-layernorm2",
        "forward",
        f"b{b}.ln2",
        f"Block {b}: LayerNorm before the MLP",
        "The same normalisation, now feeding the feed-forward network.",
        r"X_{mid,LN} = \mathrm{LN}(X_{mid})",
        [Panel("", [s.tensor(f"X_mid({b})")], [s.tensor(f"X_mid_LN({b})", s.layernorm(f"X_mid_LN({b})", f"X_mid({b})"))])],
    )


def _ffn_expand(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-ffn-expand",
        "forward",
        f"b{b}.ffn",
        f"Block {b}: MLP expand",
        f"Each position, on its own, is mapped to d_ff = {s.cfg.d_ff} hidden neurons.",
        r"h = X_{mid,LN}\,W_1 + b_1",
        s.product_panel(f"h({b})", f"X_mid_LN({b})", f"W_1({b})", bias=f"b_1({b})"),
    )


def _relu(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-relu",
        "forward",
        f"b{b}.ffn",
        f"Block {b}: ReLU",
        "Negative pre-activations are set to 0: those neurons are off for that position.",
        r"h_{act} = \max(0, h)",
        [
            Panel(
                "",
                [s.tensor(f"h({b})")],
                [s.tensor(f"h_act({b})", relu_explainer(f"h_act({b})", s.value(f"h({b})"), f"h({b})"), before=f"h({b})")],
            )
        ],
    )


def _ffn_contract(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-ffn-contract",
        "forward",
        f"b{b}.ffn",
        f"Block {b}: MLP contract",
        f"The active neurons are mapped back to d_model = {s.cfg.d_model} numbers.",
        r"\text{ffn\_out} = h_{act}\,W_2 + b_2",
        s.product_panel(f"ffn_out({b})", f"h_act({b})", f"W_2({b})", bias=f"b_2({b})"),
    )


def _residual2(s: Builder, b: int) -> Step:
    return Step(
        f"b{b}-residual2",
        "forward",
        f"b{b}.res2",
        f"Block {b}: residual connection",
        f"The MLP's output is added to the residual stream: this is block {b}'s output.",
        r"X^{(%d)} = X_{mid} + \text{ffn\_out}" % b,
        [
            Panel(
                "",
                [s.tensor(f"X_mid({b})"), s.tensor(f"ffn_out({b})")],
                [s.tensor(f"X({b})", s.add(f"X({b})", f"X_mid({b})", f"ffn_out({b})"), before=f"X_mid({b})")],
            )
        ],
    )


BLOCK_STEPS = (
    _layernorm1,
    _qkv,
    _scores,
    _mask,
    _attention_softmax,
    _weighted_values,
    _concat,
    _output_projection,
    _residual1,
    _layernorm2,
    _ffn_expand,
    _relu,
    _ffn_contract,
    _residual2,
)


# ---- after the blocks --------------------------------------------------------------------------


def _final_layernorm(s: Builder) -> Step:
    n = s.cfg.n_layers
    return Step(
        "final-layernorm",
        "forward",
        "ln_f",
        "Final LayerNorm",
        "The last block's output is normalised once more, position by position, before it is compared with "
        "every word's embedding.",
        r"X_{\text{final}} = \mathrm{LN}(X^{(%d)})" % n,
        [Panel("", [s.tensor(f"X({n})")], [s.tensor("X_final", s.layernorm("X_final", f"X({n})"))])],
    )


def _logits(s: Builder) -> Step:
    explain = head_explainer("logits", s.value("X_final"), "X_final", s.last, s.value("W_E"), "W_E")
    return Step(
        "logits",
        "forward",
        "logits",
        "Logits (tied head)",
        "The head reuses the embedding matrix (weight tying): the last position's vector is dotted with every "
        "word's embedding, giving one score per word.",
        r"\text{logits} = X_{\text{final}}[T-1]\;W_E^\top",
        [Panel("", [s.tensor("X_final"), s.tensor("W_E")], [s.tensor("logits", explain)])],
    )


def _softmax(s: Builder) -> Step:
    return Step(
        "softmax",
        "forward",
        "softmax",
        "Softmax: next-word probabilities",
        "Exponentiate the logits and divide by their sum: positive numbers that add up to 1.",
        r"p_v = e^{\text{logit}_v} / \textstyle\sum_u e^{\text{logit}_u}",
        [Panel("", [s.tensor("logits")], [s.tensor("probs", s.softmax("probs", "logits"))])],
    )


def _loss(s: Builder) -> Step:
    word = s.vocab[s.target]
    return Step(
        "loss",
        "forward",
        "loss",
        "Loss",
        f"The loss is the negative log-probability the model gave the right next word, “{word}”. "
        "It is 0 only if that probability is 1.",
        r"L = -\log p(\text{%s})" % word,
        [Panel("", [s.tensor("probs")], [s.tensor("loss", loss_explainer(word, s.value("probs"), "probs", s.target))])],
    )
