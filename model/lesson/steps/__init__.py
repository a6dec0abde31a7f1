"""The worked example as steps a reader can follow: one forward pass in the article's order,
the backward pass in reverse, and the weight update.

Every grid is a tensor of one engine trace (``run_trace`` with the gradient of -log p(target)),
under the article's name. Each output grid can explain any of its cells: the arithmetic that
produces it, written out with the actual operands, and recomputed from them in plain Python,
so a test can check every explanation against the engine's value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from model.io.tokenizer import Tokenizer
from model.engine import GRAD, Target, Transformer, run_trace
from model.lesson.article import article_weights, printed_figure


@dataclass
class Arithmetic:
    """How one cell is computed: LaTeX lines with the operands written out, the value those
    operands give, and the input cells it reads ((grid label, row or None, column or None))."""

    lines: list[str]
    value: float
    uses: list[tuple[str, int | None, int | None]] = field(default_factory=list)


@dataclass
class Grid:
    label: str  # the article's name: "Q(1,1)", "dL/dX(2)"
    name: str  # the engine's: "blocks.0.attn.hook_q[0]", "grad:embed.W_E"
    values: np.ndarray  # 2-D, float64; -inf where the causal mask put it
    rows: list[str]
    cols: list[str]
    row_title: str
    col_title: str
    explain: Callable[[int, int], Arithmetic] | None = None
    printed: np.ndarray | None = None  # the article's figure, NaN where it prints nothing
    provenance: str | None = None  # for weights: printed by the article, reconstructed, trained
    changed: np.ndarray | None = None  # True where this step changed the value it started from
    quantity: bool = True  # False for labels such as token ids: drawn without a colour scale

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape


@dataclass
class Panel:
    label: str  # "" for a step with one panel; "head 1", "W_E" where a step has several
    inputs: list[Grid]
    outputs: list[Grid]


@dataclass
class Step:
    key: str  # in the URL: ?step=<key>
    phase: str  # "forward", "backward" or "update"
    stage: str  # the pipeline box it belongs to (see STAGES)
    title: str
    sentence: str
    formula: str  # LaTeX
    panels: list[Panel]


def stages(n_layers: int) -> list[tuple[str, str]]:
    """(stage id, label) of the pipeline diagram, in forward order."""
    out = [("tokens", "tokens"), ("embed", "embedding"), ("pos", "+ positions")]
    for b in range(1, n_layers + 1):
        out += [(f"b{b}.ln1", "LayerNorm"), (f"b{b}.attn", "attention"), (f"b{b}.res1", "+ residual"),
                (f"b{b}.ln2", "LayerNorm"), (f"b{b}.ffn", "FFN"), (f"b{b}.res2", "+ residual")]
    return out + [("ln_f", "final LayerNorm"), ("logits", "logits"), ("softmax", "softmax"), ("loss", "loss"),
                  ("update", "update")]


# ---- writing numbers and names in LaTeX ------------------------------------------------------

def num(v: float) -> str:
    if v == -math.inf:
        return r"-\infty"
    return f"{v:.4f}" if v >= 0 else f"({v:.4f})"


def tex(label: str) -> str:
    r"""Article name as LaTeX: "dL/dW_Q(2,1)" -> \partial L/\partial\,\text{W\_Q(2,1)}."""
    body = label[len("dL/d"):] if label.startswith("dL/d") else label
    body = r"\text{" + body.replace("_", r"\_").replace("ᵀ", "") + "}" + ("^\\top" if label.endswith("ᵀ") else "")
    return r"\partial L/\partial\," + body if label.startswith("dL/d") else body


def at(label: str, r: int | str, c: int | str) -> str:
    return f"{tex(label)}_{{{r},{c}}}"


# ---- the arithmetic of one cell, recomputed from its operands --------------------------------

def dot_cell(out: str, r: int, c: int, terms: list[tuple[str, np.ndarray, np.ndarray]],
             bias: tuple[str, float] | None = None, scale: float | None = None,
             uses: list | None = None) -> Arithmetic:
    """out[r,c] = sum over groups of a . b (+ bias) (/ scale), every product written out."""
    parts, lines = [], []
    for header, a, b in terms:
        products = [float(x) * float(y) for x, y in zip(a, b)]
        parts.append(math.fsum(products))
        written = [f"{num(float(x))}\\times{num(float(y))}" for x, y in zip(a, b)]
        lines.append(header)
        for start in range(0, len(written), 4):  # four products a line keeps a line on screen
            lines.append(("= " if start == 0 else "+ ") + " + ".join(written[start:start + 4]))
        lines.append(f"= {num(parts[-1])}")
    total = math.fsum(parts)
    if len(parts) > 1:
        lines.append(f"\\text{{sum}} = {' + '.join(num(x) for x in parts)} = {num(total)}")
    if bias is not None:
        lines.append(f"{num(total)} + {bias[0]} = {num(total)} + {num(bias[1])} = {num(total + bias[1])}")
        total += bias[1]
    if scale is not None:
        lines.append(f"{num(total)} / \\sqrt{{{scale ** 2:g}}} = {num(total / scale)}")
        total /= scale
    lines.append(f"{at(out, r, c)} = {num(total)}")
    return Arithmetic(lines, total, uses or [])


def matmul_explainer(out: str, a: np.ndarray, a_label: str, b: np.ndarray, b_label: str,
                     bias: np.ndarray | None = None, bias_label: str | None = None,
                     scale: float | None = None) -> Callable[[int, int], Arithmetic]:
    """Explain (a @ b + bias) / scale. Labels ending in ᵀ mean the grid shown is the transpose
    of the operand; ``uses`` points into the grid as shown."""

    def where(label: str, row: int | None, col: int | None):
        return (label.rstrip("ᵀ"), col, row) if label.endswith("ᵀ") else (label, row, col)

    def explain(r: int, c: int) -> Arithmetic:
        header = f"\\sum_k {at(a_label, r, 'k')}\\,{at(b_label, 'k', c)}"
        uses = [where(a_label, r, None), where(b_label, None, c)]
        bias_term = None
        if bias is not None:
            bias_term = (at(bias_label, 0, c), float(bias[c]))
            uses.append((bias_label, 0, c))
        return dot_cell(out, r, c, [(header, a[r], b[:, c])], bias_term, scale, uses)

    return explain


def add_explainer(out: str, a: np.ndarray, a_label: str, b: np.ndarray, b_label: str):
    def explain(r: int, c: int) -> Arithmetic:
        value = float(a[r, c]) + float(b[r, c])
        return Arithmetic([f"{at(out, r, c)} = {at(a_label, r, c)} + {at(b_label, r, c)} = "
                           f"{num(float(a[r, c]))} + {num(float(b[r, c]))} = {num(value)}"],
                          value, [(a_label, r, c), (b_label, r, c)])
    return explain


def layernorm_explainer(out: str, x: np.ndarray, x_label: str, eps: float):
    """(x - mean) / sqrt(biased variance + eps), gamma = 1, beta = 0."""

    def explain(r: int, c: int) -> Arithmetic:
        row = [float(v) for v in x[r]]
        n = len(row)
        mean = math.fsum(row) / n
        var = math.fsum((v - mean) ** 2 for v in row) / n
        std = math.sqrt(var + eps)
        value = (row[c] - mean) / std
        lines = [
            f"\\mu = \\tfrac{{1}}{{{n}}}({' + '.join(num(v) for v in row)}) = {num(mean)}",
            f"\\sigma^2 = \\tfrac{{1}}{{{n}}}\\sum_j (x_j - \\mu)^2 = "
            f"\\tfrac{{1}}{{{n}}}({' + '.join(num(v - mean) + '^2' for v in row)}) = {num(var)}",
            f"\\sqrt{{\\sigma^2 + \\epsilon}} = \\sqrt{{{num(var)} + 10^{{-5}}}} = {num(std)}",
            f"{at(out, r, c)} = (x_{{{c}}} - \\mu)/\\sqrt{{\\sigma^2+\\epsilon}} = "
            f"({num(row[c])} - {num(mean)}) / {num(std)} = {num(value)}",
        ]
        return Arithmetic(lines, value, [(x_label, r, None)])

    return explain


def layernorm_backward_explainer(out: str, g: np.ndarray, g_label: str, xhat: np.ndarray, xhat_label: str,
                                 std: np.ndarray):
    """Gradient through y = (x - mean)/std (gamma = 1):
    dx = (g - mean(g) - xhat * mean(g * xhat)) / std."""

    def explain(r: int, c: int) -> Arithmetic:
        gr, xr, s = [float(v) for v in g[r]], [float(v) for v in xhat[r]], float(std[r])
        n = len(gr)
        mean_g = math.fsum(gr) / n
        mean_gx = math.fsum(a * b for a, b in zip(gr, xr)) / n
        value = (gr[c] - mean_g - xr[c] * mean_gx) / s
        lines = [
            f"\\bar g = \\tfrac{{1}}{{{n}}}\\sum_j g_j = {num(mean_g)},\\quad "
            f"\\overline{{g\\hat x}} = \\tfrac{{1}}{{{n}}}\\sum_j g_j\\hat x_j = {num(mean_gx)},\\quad \\sigma = {num(s)}",
            f"{at(out, r, c)} = (g_{{{c}}} - \\bar g - \\hat x_{{{c}}}\\,\\overline{{g\\hat x}})/\\sigma = "
            f"({num(gr[c])} - {num(mean_g)} - {num(xr[c])}\\times{num(mean_gx)}) / {num(s)} = {num(value)}",
        ]
        return Arithmetic(lines, value, [(g_label, r, None), (xhat_label, r, None)])

    return explain


def softmax_explainer(out: str, s: np.ndarray, s_label: str):
    def explain(r: int, c: int) -> Arithmetic:
        row = [float(v) for v in s[r]]
        top = max(row)  # subtracting the row's maximum changes nothing but keeps exp() finite
        exps = [math.exp(v - top) if v != -math.inf else 0.0 for v in row]
        total = math.fsum(exps)
        value = exps[c] / total
        lines = [
            f"\\text{{row max}} = {num(top)},\\quad e^{{s_j - \\max}} = " + ",\\ ".join(num(e) for e in exps),
            f"\\textstyle\\sum_j e^{{s_j - \\max}} = {num(total)}",
            f"{at(out, r, c)} = {num(exps[c])} / {num(total)} = {num(value)}",
        ]
        return Arithmetic(lines, value, [(s_label, r, None)])

    return explain


def softmax_backward_explainer(out: str, a: np.ndarray, a_label: str, da: np.ndarray, da_label: str):
    """dS = A * (dA - sum_j A_j dA_j), row by row."""

    def explain(r: int, c: int) -> Arithmetic:
        ar, dr = [float(v) for v in a[r]], [float(v) for v in da[r]]
        inner = math.fsum(x * y for x, y in zip(ar, dr))
        value = ar[c] * (dr[c] - inner)
        lines = [
            f"\\textstyle\\sum_j A_{{{r},j}}\\,\\partial A_{{{r},j}} = "
            + " + ".join(f"{num(x)}\\times{num(y)}" for x, y in zip(ar, dr)) + f" = {num(inner)}",
            f"{at(out, r, c)} = A_{{{r},{c}}}(\\partial A_{{{r},{c}}} - {num(inner)}) = "
            f"{num(ar[c])}\\times({num(dr[c])} - {num(inner)}) = {num(value)}",
        ]
        return Arithmetic(lines, value, [(a_label, r, None), (da_label, r, None)])

    return explain


def column_sum_explainer(out: str, g: np.ndarray, g_label: str):
    def explain(r: int, c: int) -> Arithmetic:
        column = [float(v) for v in g[:, c]]
        value = math.fsum(column)
        return Arithmetic([f"{at(out, r, c)} = \\sum_t {at(g_label, 't', c)} = "
                           f"{' + '.join(num(v) for v in column)} = {num(value)}"], value, [(g_label, None, c)])
    return explain


def update_explainer(out: str, w: np.ndarray, w_label: str, g: np.ndarray, g_label: str, lr: float):
    def explain(r: int, c: int) -> Arithmetic:
        value = float(w[r, c]) - lr * float(g[r, c])
        return Arithmetic([f"{at(out, r, c)} = {at(w_label, r, c)} - \\eta\\,{at(g_label, r, c)} = "
                           f"{num(float(w[r, c]))} - {lr:g}\\times{num(float(g[r, c]))} = {num(value)}"],
                          value, [(w_label, r, c), (g_label, r, c)])
    return explain


# ---- the steps ---------------------------------------------------------------------------------

class _Builder:
    """Turns one trace of the worked example into grids under the article's names."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, article: dict, provenance: Callable[[str], str]):
        c = article["config"]
        self.cfg = model.cfg
        self.tokens, self.target, self.lr = c["input_ids"], c["target_id"], c["learning_rate"]
        self.trace = run_trace(model, self.tokens, backward=True, target=Target(self.target))
        self.article, self.provenance = article, provenance
        self.compare = provenance("W_E") != "trained"
        vocab = tokenizer.pieces
        self.vocab = vocab
        self.positions = [f"{i} {vocab[t]}" for i, t in enumerate(self.tokens)]
        self.last = len(self.tokens) - 1
        params = dict(model.named_parameters())
        self.weights = {k: _np(v) for k, v in article_weights(self.cfg, params).items()}
        self.weight_names = self._weight_engine_names()
        grads = {name: self.trace[GRAD + name] for name in params}
        self.grads = {k: _np(v) for k, v in article_weights(self.cfg, grads).items()}

    def _weight_engine_names(self) -> dict[str, str]:
        names = {"W_E": "embed.W_E", "W_P": "pos_embed.W_pos"}
        for b in range(1, self.cfg.n_layers + 1):
            p = f"blocks.{b - 1}."
            for h in range(1, self.cfg.n_heads + 1):
                for kind in "QKV":
                    names[f"W_{kind}({b},{h})"] = f"{p}attn.W_{kind}[{h - 1}]"
            names.update({f"W_O({b})": p + "attn.W_O", f"W_1({b})": p + "mlp.W_in", f"b_1({b})": p + "mlp.b_in",
                          f"W_2({b})": p + "mlp.W_out", f"b_2({b})": p + "mlp.b_out"})
        return names

    def t(self, name: str) -> np.ndarray:
        return _np(self.trace[name])

    def axes(self, kind: str) -> tuple[list[str], str]:
        cfg = self.cfg
        return {
            "pos": (self.positions, "position and token"),
            "key": (self.positions, "key position (attended to)"),
            "model": ([f"d{i}" for i in range(cfg.d_model)], "model dimension"),
            "head": ([f"d{i}" for i in range(cfg.d_head)], "head dimension"),
            "concat": ([f"h{h + 1}·d{i}" for h in range(cfg.n_heads) for i in range(cfg.d_head)],
                       "head · head dimension"),
            "ffn": ([f"n{i}" for i in range(cfg.d_ff)], "FFN neuron"),
            "vocab": (self.vocab, "vocabulary token"),
            "table": ([f"p{i}" for i in range(cfg.n_ctx)], "position"),
            "one": (["—"], ""),
            "last": ([self.positions[self.last]], "last position"),
            "stat": (["value"], ""),
        }[kind]

    def grid(self, label: str, name: str, values, rows: str, cols: str, explain=None, before=None,
             quantity: bool = True) -> Grid:
        values = np.atleast_2d(np.asarray(values, dtype=np.float64))
        row_labels, row_title = self.axes(rows)
        col_labels, col_title = self.axes(cols)
        assert values.shape == (len(row_labels), len(col_labels)), (label, values.shape)
        grid = Grid(label, name, values, row_labels, col_labels, row_title, col_title, explain, quantity=quantity)
        if label in self.weights:
            grid.provenance = self.provenance(label)
        if self.compare:
            grid.printed = self._printed(label, values.shape)
        if before is not None:
            grid.changed = values != np.atleast_2d(before)
        return grid

    def weight(self, label: str) -> Grid:
        shape_kind = {"W_E": ("vocab", "model"), "W_P": ("table", "model"), "W_O": ("concat", "model"),
                      "W_1": ("model", "ffn"), "b_1": ("one", "ffn"), "W_2": ("ffn", "model"), "b_2": ("one", "model")}
        kinds = shape_kind.get(label.split("(")[0], ("model", "head"))
        return self.grid(label, self.weight_names[label], self.weights[label], *kinds)

    def _printed(self, label: str, shape) -> np.ndarray | None:
        value = self.article["given_weights"].get(label, self.article["published_figures"].get(label))
        if value is None:
            return None
        row, printed = printed_figure(value)
        grid = np.full(shape, np.nan)
        if row is None:
            grid[:] = printed.numpy().reshape(shape)
        else:
            grid[row] = printed.numpy()
        return grid


def _np(t) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def worked_example_steps(model: Transformer, tokenizer: Tokenizer, article: dict,
                         provenance: Callable[[str], str]) -> list[Step]:
    """Every step of the article's forward pass, backward pass and update, for ``model``'s
    weights. ``provenance(weight label)`` says where a weight comes from ("printed by the
    article", "reconstructed", "trained"); with "trained" weights the article's figures are
    not shown beside the computed ones."""
    s = _Builder(model, tokenizer, article, provenance)
    return _forward(s) + _backward(s) + [_update(s)]


def _forward(s: _Builder) -> list[Step]:
    cfg, steps = s.cfg, []
    ids = np.array(s.tokens, dtype=np.float64)[None, :]
    steps.append(Step(
        "tokens", "forward", "tokens", "Tokens",
        f"The prompt is split into words, and each word is replaced by its row number in the {cfg.vocab_size}-word "
        f"vocabulary. The model's task: predict the word after the last one (here “{s.vocab[s.target]}”).",
        r"\text{ids} = \text{vocabulary index of each word}",
        [Panel("", [], [s.grid("token ids", "tokens", ids, "stat", "pos", quantity=False, explain=lambda r, c: Arithmetic(
            [f"\\text{{position {c}: “{s.vocab[s.tokens[c]]}” is word number {s.tokens[c]} of the vocabulary}}"],
            float(s.tokens[c])))])]))

    W_E = s.weights["W_E"]
    embed = s.t("hook_embed")
    steps.append(Step(
        "embedding", "forward", "embed", "Embedding lookup",
        "Each token id picks its row of the embedding matrix W_E: a vector of d_model numbers per token. "
        "“the” appears twice, so the same row is used twice.",
        r"E_t = W_E[\text{id}_t]",
        [Panel("", [s.weight("W_E")], [s.grid("E", "hook_embed", embed, "pos", "model", explain=lambda r, c: Arithmetic(
            [f"{at('E', r, c)} = {at('W_E', s.tokens[r], c)} = {num(float(W_E[s.tokens[r], c]))}"],
            float(W_E[s.tokens[r], c]), [("W_E", s.tokens[r], c)]))])]))

    T = len(s.tokens)
    W_P = s.weights["W_P"]
    x0 = s.t("blocks.0.hook_resid_pre")
    steps.append(Step(
        "positions", "forward", "pos", "Add positions",
        "Attention alone cannot tell word order, so each position adds its own row of the positional table W_P. "
        "The two “the”s now differ.",
        r"X^{(0)} = E + W_P[0{:}T]",
        [Panel("", [s.grid("E", "hook_embed", embed, "pos", "model"), s.weight("W_P")],
               [s.grid("X(0)", "blocks.0.hook_resid_pre", x0, "pos", "model",
                       add_explainer("X(0)", embed, "E", W_P[:T], "W_P"), before=embed)])]))

    x = x0
    for b in range(1, cfg.n_layers + 1):
        steps += _block_forward(s, b, x)
        x = s.t(f"blocks.{b - 1}.hook_resid_post")

    n = cfg.n_layers
    final = s.t("ln_final.hook_out")
    steps.append(Step(
        "final-layernorm", "forward", "ln_f", "Final LayerNorm",
        "The last block's output is normalised once more, position by position, before it is compared with "
        "every word's embedding.",
        r"X_{\text{final}} = \mathrm{LN}(X^{(%d)})" % n,
        [Panel("", [s.grid(f"X({n})", f"blocks.{n - 1}.hook_resid_post", x, "pos", "model")],
               [s.grid("X_final", "ln_final.hook_out", final, "pos", "model",
                       layernorm_explainer("X_final", x, f"X({n})", cfg.norm_eps))])]))

    logits = s.t("hook_logits")[s.last][None, :]
    steps.append(Step(
        "logits", "forward", "logits", "Logits (tied head)",
        "The head reuses the embedding matrix (weight tying): the last position's vector is dotted with every "
        "word's embedding, giving one score per word.",
        r"\text{logits} = X_{\text{final}}[T-1]\;W_E^\top",
        [Panel("", [s.grid("X_final", "ln_final.hook_out", final, "pos", "model"), s.weight("W_E")],
               [s.grid("logits", f"hook_logits[{s.last}]", logits, "last", "vocab",
                       lambda r, c: dot_cell("logits", r, c, [(f"\\sum_k {at('X_final', s.last, 'k')}\\,{at('W_E', c, 'k')}",
                                                               final[s.last], W_E[c])],
                                             uses=[("X_final", s.last, None), ("W_E", c, None)]))])]))

    probs = s.t("hook_probs")[s.last][None, :]
    steps.append(Step(
        "softmax", "forward", "softmax", "Softmax: next-word probabilities",
        "Exponentiate the logits and divide by their sum: positive numbers that add up to 1.",
        r"p_v = e^{\text{logit}_v} / \textstyle\sum_u e^{\text{logit}_u}",
        [Panel("", [s.grid("logits", f"hook_logits[{s.last}]", logits, "last", "vocab")],
               [s.grid("probs", f"hook_probs[{s.last}]", probs, "last", "vocab",
                       softmax_explainer("probs", logits, "logits"))])]))

    loss = s.t("hook_loss")[s.last]
    word = s.vocab[s.target]

    def explain_loss(r, c):
        p = float(probs[0, s.target])
        return Arithmetic([f"L = -\\log p(\\text{{{word}}}) = -\\log {num(p)} = {num(-math.log(p))}"], -math.log(p),
                          [("probs", 0, s.target)])

    steps.append(Step(
        "loss", "forward", "loss", "Loss",
        f"The loss is the negative log-probability the model gave the right next word, “{word}”. "
        "It is 0 only if that probability is 1.",
        r"L = -\log p(\text{%s})" % word,
        [Panel("", [s.grid("probs", f"hook_probs[{s.last}]", probs, "last", "vocab")],
               [s.grid("loss", f"hook_loss[{s.last}]", [[loss]], "stat", "one", explain_loss)])]))
    return steps


def _block_forward(s: _Builder, b: int, x: np.ndarray) -> list[Step]:
    cfg, p, steps = s.cfg, f"blocks.{b - 1}.", []
    X, XLN = f"X({b - 1})", f"X_LN({b - 1})"
    xln = s.t(p + "ln1.hook_out")
    steps.append(Step(
        f"b{b}-layernorm1", "forward", f"b{b}.ln1", f"Block {b}: LayerNorm",
        "Each position's vector is shifted to mean 0 and scaled to variance 1 (γ = 1, β = 0), so attention sees "
        "directions, not sizes.",
        r"\mathrm{LN}(x) = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}},\quad \mu, \sigma^2 \text{ over the } d_{model}"
        r"\text{ numbers of a position (biased variance)}",
        [Panel("", [s.grid(X, p + "hook_resid_pre", x, "pos", "model")],
               [s.grid(XLN, p + "ln1.hook_out", xln, "pos", "model", layernorm_explainer(XLN, x, X, cfg.norm_eps))])]))

    q, k, v = (s.t(p + f"attn.hook_{n}") for n in "qkv")
    panels = []
    for h in range(cfg.n_heads):
        hh = f"({b},{h + 1})"
        outs = []
        for kind, t in zip("QKV", (q, k, v)):
            W = s.weights[f"W_{kind}{hh}"]
            outs.append(s.grid(f"{kind}{hh}", f"{p}attn.hook_{kind.lower()}[{h}]", t[h], "pos", "head",
                               matmul_explainer(f"{kind}{hh}", xln, XLN, W, f"W_{kind}{hh}")))
        panels.append(Panel(f"head {h + 1}", [s.grid(XLN, p + "ln1.hook_out", xln, "pos", "model")]
                            + [s.weight(f"W_{kind}{hh}") for kind in "QKV"], outs))
    steps.append(Step(
        f"b{b}-qkv", "forward", f"b{b}.attn", f"Block {b}: queries, keys, values",
        f"Each of the {cfg.n_heads} heads projects every position three ways: a query (what it looks for), a key "
        f"(what it offers) and a value (what it passes on), each {cfg.d_head} numbers.",
        r"Q = X_{LN} W_Q,\quad K = X_{LN} W_K,\quad V = X_{LN} W_V",
        panels))

    scores, masked, pattern = (s.t(p + n) for n in ("attn.hook_scores", "attn.hook_scores_masked", "attn.hook_pattern"))
    scale = math.sqrt(cfg.d_head)
    z = s.t(p + "attn.hook_z")

    def per_head(make):
        return [Panel(f"head {h + 1}", *make(h, f"({b},{h + 1})")) for h in range(cfg.n_heads)]

    steps.append(Step(
        f"b{b}-scores", "forward", f"b{b}.attn", f"Block {b}: attention scores",
        "Every query is dotted with every key: how well position t's question matches position u's offer. "
        f"Dividing by √d_head = √{cfg.d_head} keeps the scores from growing with the head size.",
        r"S = Q K^\top / \sqrt{d_{head}}",
        per_head(lambda h, hh: (
            [s.grid(f"Q{hh}", f"{p}attn.hook_q[{h}]", q[h], "pos", "head"),
             s.grid(f"K{hh}", f"{p}attn.hook_k[{h}]", k[h], "pos", "head")],
            [s.grid(f"scores{hh}", f"{p}attn.hook_scores[{h}]", scores[h], "pos", "key",
                    matmul_explainer(f"scores{hh}", q[h], f"Q{hh}", k[h].T, f"K{hh}ᵀ", scale=scale))]))))

    def explain_mask(h, hh):
        def explain(r, c):
            kept = c <= r
            value = float(scores[h][r, c]) if kept else -math.inf
            why = (f"\\text{{key {c} is not after query {r}: kept}}" if kept
                   else f"\\text{{key {c} comes after query {r}: the future is hidden}}")
            return Arithmetic([why, f"{at('masked' + hh, r, c)} = {num(value)}"], value, [(f"scores{hh}", r, c)])
        return explain

    steps.append(Step(
        f"b{b}-mask", "forward", f"b{b}.attn", f"Block {b}: causal mask",
        "A position may only look at itself and earlier positions: scores for later keys become −∞, which the "
        "softmax turns into exactly 0.",
        r"S_{t,u} \leftarrow -\infty \text{ for } u > t",
        per_head(lambda h, hh: (
            [s.grid(f"scores{hh}", f"{p}attn.hook_scores[{h}]", scores[h], "pos", "key")],
            [s.grid(f"masked{hh}", f"{p}attn.hook_scores_masked[{h}]", masked[h], "pos", "key", explain_mask(h, hh),
                    before=scores[h])]))))

    steps.append(Step(
        f"b{b}-softmax", "forward", f"b{b}.attn", f"Block {b}: attention weights (softmax)",
        "Each row of masked scores becomes a probability distribution over the positions it may attend to.",
        r"A_{t,u} = e^{S_{t,u}} / \textstyle\sum_{u' \le t} e^{S_{t,u'}}",
        per_head(lambda h, hh: (
            [s.grid(f"masked{hh}", f"{p}attn.hook_scores_masked[{h}]", masked[h], "pos", "key")],
            [s.grid(f"A{hh}", f"{p}attn.hook_pattern[{h}]", pattern[h], "pos", "key",
                    softmax_explainer(f"A{hh}", masked[h], f"masked{hh}"))]))))

    steps.append(Step(
        f"b{b}-weighted-values", "forward", f"b{b}.attn", f"Block {b}: weighted values",
        "Each position's head output is the attention-weighted average of the value vectors.",
        r"\text{out} = A\,V",
        per_head(lambda h, hh: (
            [s.grid(f"A{hh}", f"{p}attn.hook_pattern[{h}]", pattern[h], "pos", "key"),
             s.grid(f"V{hh}", f"{p}attn.hook_v[{h}]", v[h], "pos", "head")],
            [s.grid(f"out{hh}", f"{p}attn.hook_z[{h}]", z[h], "pos", "head",
                    matmul_explainer(f"out{hh}", pattern[h], f"A{hh}", v[h], f"V{hh}"))]))))

    concat = np.concatenate(list(z), axis=1)

    def explain_concat(r, c):
        h, i = divmod(c, cfg.d_head)
        label = f"out({b},{h + 1})"
        return Arithmetic([f"{at(f'concat({b})', r, c)} = {at(label, r, i)} = {num(float(z[h][r, i]))}"],
                          float(z[h][r, i]), [(label, r, i)])

    steps.append(Step(
        f"b{b}-concat", "forward", f"b{b}.attn", f"Block {b}: concatenate the heads",
        f"The {cfg.n_heads} heads' outputs are laid side by side: back to d_model = {cfg.d_model} numbers per position.",
        r"\text{concat} = [\,\text{out}_1 \mid \text{out}_2\,]",
        [Panel("", [s.grid(f"out({b},{h + 1})", f"{p}attn.hook_z[{h}]", z[h], "pos", "head") for h in range(cfg.n_heads)],
               [s.grid(f"concat({b})", p + "attn.hook_z (heads side by side)", concat, "pos", "concat", explain_concat)])]))

    attn_out = s.t(p + "hook_attn_out")
    W_O = s.weights[f"W_O({b})"]
    steps.append(Step(
        f"b{b}-output-projection", "forward", f"b{b}.attn", f"Block {b}: output projection W_O",
        "W_O mixes the heads' outputs into one update for the residual stream.",
        r"\text{attn\_out} = \text{concat}\;W_O",
        [Panel("", [s.grid(f"concat({b})", p + "attn.hook_z (heads side by side)", concat, "pos", "concat"),
                    s.weight(f"W_O({b})")],
               [s.grid(f"attn_out({b})", p + "hook_attn_out", attn_out, "pos", "model",
                       matmul_explainer(f"attn_out({b})", concat, f"concat({b})", W_O, f"W_O({b})"))])]))

    mid = s.t(p + "hook_resid_mid")
    steps.append(Step(
        f"b{b}-residual1", "forward", f"b{b}.res1", f"Block {b}: residual connection",
        "Attention's output is added to its input rather than replacing it: the residual stream carries "
        "everything forward, and each layer writes a change into it.",
        r"X_{mid} = X + \text{attn\_out}",
        [Panel("", [s.grid(X, p + "hook_resid_pre", x, "pos", "model"),
                    s.grid(f"attn_out({b})", p + "hook_attn_out", attn_out, "pos", "model")],
               [s.grid(f"X_mid({b})", p + "hook_resid_mid", mid, "pos", "model",
                       add_explainer(f"X_mid({b})", x, X, attn_out, f"attn_out({b})"), before=x)])]))

    mid_ln = s.t(p + "ln2.hook_out")
    steps.append(Step(
        f"b{b}-layernorm2", "forward", f"b{b}.ln2", f"Block {b}: LayerNorm before the FFN",
        "The same normalisation, now feeding the feed-forward network.",
        r"X_{mid,LN} = \mathrm{LN}(X_{mid})",
        [Panel("", [s.grid(f"X_mid({b})", p + "hook_resid_mid", mid, "pos", "model")],
               [s.grid(f"X_mid_LN({b})", p + "ln2.hook_out", mid_ln, "pos", "model",
                       layernorm_explainer(f"X_mid_LN({b})", mid, f"X_mid({b})", cfg.norm_eps))])]))

    pre, post = s.t(p + "mlp.hook_pre"), s.t(p + "mlp.hook_post")
    W_1, b_1 = s.weights[f"W_1({b})"], s.weights[f"b_1({b})"]
    steps.append(Step(
        f"b{b}-ffn-expand", "forward", f"b{b}.ffn", f"Block {b}: FFN expand",
        f"Each position, on its own, is mapped to d_ff = {cfg.d_ff} hidden neurons.",
        r"h = X_{mid,LN}\,W_1 + b_1",
        [Panel("", [s.grid(f"X_mid_LN({b})", p + "ln2.hook_out", mid_ln, "pos", "model"), s.weight(f"W_1({b})"),
                    s.weight(f"b_1({b})")],
               [s.grid(f"h({b})", p + "mlp.hook_pre", pre, "pos", "ffn",
                       matmul_explainer(f"h({b})", mid_ln, f"X_mid_LN({b})", W_1, f"W_1({b})", b_1, f"b_1({b})"))])]))

    def explain_relu(r, c):
        value = max(0.0, float(pre[r, c]))
        return Arithmetic([f"{at(f'h_act({b})', r, c)} = \\max(0, {num(float(pre[r, c]))}) = {num(value)}"], value,
                          [(f"h({b})", r, c)])

    steps.append(Step(
        f"b{b}-relu", "forward", f"b{b}.ffn", f"Block {b}: ReLU",
        "Negative pre-activations are set to 0: those neurons are off for that position.",
        r"h_{act} = \max(0, h)",
        [Panel("", [s.grid(f"h({b})", p + "mlp.hook_pre", pre, "pos", "ffn")],
               [s.grid(f"h_act({b})", p + "mlp.hook_post", post, "pos", "ffn", explain_relu, before=pre)])]))

    ffn_out = s.t(p + "hook_mlp_out")
    W_2, b_2 = s.weights[f"W_2({b})"], s.weights[f"b_2({b})"]
    steps.append(Step(
        f"b{b}-ffn-contract", "forward", f"b{b}.ffn", f"Block {b}: FFN contract",
        f"The active neurons are mapped back to d_model = {cfg.d_model} numbers.",
        r"\text{ffn\_out} = h_{act}\,W_2 + b_2",
        [Panel("", [s.grid(f"h_act({b})", p + "mlp.hook_post", post, "pos", "ffn"), s.weight(f"W_2({b})"),
                    s.weight(f"b_2({b})")],
               [s.grid(f"ffn_out({b})", p + "hook_mlp_out", ffn_out, "pos", "model",
                       matmul_explainer(f"ffn_out({b})", post, f"h_act({b})", W_2, f"W_2({b})", b_2, f"b_2({b})"))])]))

    out = s.t(p + "hook_resid_post")
    steps.append(Step(
        f"b{b}-residual2", "forward", f"b{b}.res2", f"Block {b}: residual connection",
        f"The FFN's output is added to the residual stream: this is block {b}'s output.",
        r"X^{(%d)} = X_{mid} + \text{ffn\_out}" % b,
        [Panel("", [s.grid(f"X_mid({b})", p + "hook_resid_mid", mid, "pos", "model"),
                    s.grid(f"ffn_out({b})", p + "hook_mlp_out", ffn_out, "pos", "model")],
               [s.grid(f"X({b})", p + "hook_resid_post", out, "pos", "model",
                       add_explainer(f"X({b})", mid, f"X_mid({b})", ffn_out, f"ffn_out({b})"), before=mid)])]))
    return steps


def _backward(s: _Builder) -> list[Step]:
    cfg, steps, n, last = s.cfg, [], s.cfg.n_layers, s.last
    word = s.vocab[s.target]
    probs = s.t("hook_probs")[last][None, :]
    onehot = np.zeros_like(probs)
    onehot[0, s.target] = 1.0
    dlogits = s.t(GRAD + "hook_logits")[last][None, :]

    def explain_dlogits(r, c):
        value = float(probs[0, c]) - float(onehot[0, c])
        return Arithmetic([f"{at('dL/dlogits', r, c)} = p_{{{c}}} - y_{{{c}}} = {num(float(probs[0, c]))} - "
                           f"{onehot[0, c]:g} = {num(value)}"], value, [("probs", 0, c), ("y", 0, c)])

    steps.append(Step(
        "grad-logits", "backward", "softmax", "∂L/∂logits = p − y",
        f"The backward pass starts at the loss. For softmax followed by −log p, the gradient of each logit is its "
        f"probability minus 1 for the right word (“{word}”) and minus 0 for the others: push “{word}” up, the rest down.",
        r"\partial L/\partial\,\text{logits} = p - y,\quad y = \text{one-hot}(\text{%s})" % word,
        [Panel("", [s.grid("probs", f"hook_probs[{last}]", probs, "last", "vocab"),
                    s.grid("y", "one-hot target", onehot, "last", "vocab")],
               [s.grid("dL/dlogits", f"grad:hook_logits[{last}]", dlogits, "last", "vocab", explain_dlogits)])]))

    W_E = s.weights["W_E"]
    dfinal = s.t(GRAD + "ln_final.hook_out")
    steps.append(Step(
        "grad-head", "backward", "logits", "Through the tied head: ∂L/∂h",
        "Logits were the last vector dotted with each word's embedding, so the gradient on that vector is the "
        "embeddings weighted by their logit gradients. (The same product also gives W_E a gradient: see the "
        "embedding step at the end.)",
        r"\partial L/\partial h_{\text{final}} = (\partial L/\partial\,\text{logits})\;W_E",
        [Panel("", [s.grid("dL/dlogits", f"grad:hook_logits[{last}]", dlogits, "last", "vocab"), s.weight("W_E")],
               [s.grid("dL/dh_final", f"grad:ln_final.hook_out[{last}]", dfinal[last:], "last", "model",
                       matmul_explainer("dL/dh_final", dlogits, "dL/dlogits", W_E, "W_E"))])]))

    x_n = f"dL/dX({n})"
    steps.append(Step(
        "grad-final-layernorm", "backward", "ln_f", "Through the final LayerNorm",
        "LayerNorm's gradient removes the parts that normalisation cancels: the mean of the incoming gradient and "
        "its component along the normalised vector. Only the last position has a loss, so the other rows are 0.",
        r"\partial x = \frac{1}{\sigma}\left(g - \bar g - \hat x\,\overline{g \hat x}\right)",
        [Panel("", [s.grid("dL/dX_final", "grad:ln_final.hook_out", dfinal, "pos", "model"),
                    s.grid("X_final", "ln_final.hook_normalized", s.t("ln_final.hook_normalized"), "pos", "model"),
                    s.grid("σ_final", "ln_final.hook_scale", s.t("ln_final.hook_scale")[:, None], "pos", "one")],
               [s.grid(x_n, f"grad:blocks.{n - 1}.hook_resid_post", s.t(f"grad:blocks.{n - 1}.hook_resid_post"),
                       "pos", "model", layernorm_backward_explainer(
                           x_n, dfinal, "dL/dX_final", s.t("ln_final.hook_normalized"), "X_final",
                           s.t("ln_final.hook_scale")))])]))

    for b in range(n, 0, -1):
        steps += _block_backward(s, b)

    dx0 = s.t(GRAD + "blocks.0.hook_resid_pre")
    T = len(s.tokens)

    def explain_dpos(r, c):
        value = float(dx0[r, c]) if r < T else 0.0
        line = (f"{at('dL/dW_P', r, c)} = {at('dL/dX(0)', r, c)} = {num(value)}" if r < T
                else f"\\text{{position {r} is not in the prompt: }} {at('dL/dW_P', r, c)} = 0")
        return Arithmetic([line], value, [("dL/dX(0)", r, c)] if r < T else [])

    steps.append(Step(
        "grad-positions", "backward", "pos", "Gradient of the positional table",
        "X(0) = E + W_P: addition passes the gradient on unchanged, so row t of W_P gets ∂L/∂X(0) at position t, "
        "and the embedding rows get the same.",
        r"\partial L/\partial W_P[t] = \partial L/\partial X^{(0)}_t = \partial L/\partial E_t",
        [Panel("", [s.grid("dL/dX(0)", "grad:blocks.0.hook_resid_pre", dx0, "pos", "model")],
               [s.grid("dL/dW_P", "grad:pos_embed.W_pos", s.grads["W_P"], "table", "model", explain_dpos)])]))

    dembed = s.t(GRAD + "hook_embed")
    d_input = np.zeros_like(W_E)
    np.add.at(d_input, s.tokens, dembed)
    final = s.t("ln_final.hook_out")
    d_output = dlogits.T @ final[last:]

    def explain_input(r, c):
        used = [t for t, tok in enumerate(s.tokens) if tok == r]
        values = [float(dembed[t, c]) for t in used]
        value = math.fsum(values)
        if not used:
            return Arithmetic([f"\\text{{“{s.vocab[r]}” is not in the prompt: }} {at('dL/dW_E_input', r, c)} = 0"], 0.0)
        where = " + ".join(at("dL/dE", t, c) for t in used)
        return Arithmetic([f"{at('dL/dW_E_input', r, c)} = {where} = {' + '.join(num(v) for v in values)} = {num(value)}"],
                          value, [("dL/dE", t, c) for t in used])

    def explain_output(r, c):
        value = float(dlogits[0, r]) * float(final[last, c])
        return Arithmetic([f"{at('dL/dW_E_output', r, c)} = {at('dL/dlogits', 0, r)}\\times{at('X_final', last, c)} = "
                           f"{num(float(dlogits[0, r]))}\\times{num(float(final[last, c]))} = {num(value)}"],
                          value, [("dL/dlogits", 0, r), ("X_final", last, c)])

    steps.append(Step(
        "grad-embedding", "backward", "embed", "The tied embedding's two gradients",
        "W_E is used twice: looked up at the input, and as the output head. Its gradient is the sum of both uses. "
        "Input part: each token's row collects ∂L/∂E from every position holding it, so the two “the”s add up. "
        "Output part: each word's row is its logit gradient times the final vector.",
        r"\partial W_E = \underbrace{\textstyle\sum_{t:\,\text{id}_t = v} \partial E_t}_{\text{input}} + "
        r"\underbrace{(\partial\,\text{logits})^\top h_{\text{final}}}_{\text{output}}",
        [Panel("", [s.grid("dL/dE", "grad:hook_embed", dembed, "pos", "model"),
                    s.grid("dL/dlogits", f"grad:hook_logits[{last}]", dlogits, "last", "vocab"),
                    s.grid("X_final", "ln_final.hook_out", final, "pos", "model")],
               [s.grid("dL/dW_E_input", "grad:hook_embed, added per token id", d_input, "vocab", "model", explain_input),
                s.grid("dL/dW_E_output", "(grad:hook_logits)ᵀ · ln_final.hook_out", d_output, "vocab", "model",
                       explain_output),
                s.grid("dL/dW_E", "grad:embed.W_E", s.grads["W_E"], "vocab", "model",
                       add_explainer("dL/dW_E", d_input, "dL/dW_E_input", d_output, "dL/dW_E_output"))])]))
    return steps


def _block_backward(s: _Builder, b: int) -> list[Step]:
    cfg, p, steps = s.cfg, f"blocks.{b - 1}.", []
    g = lambda name: s.t(GRAD + p + name)  # noqa: E731
    dX, dXprev = f"dL/dX({b})", f"dL/dX({b - 1})"
    d_out = g("hook_resid_post")
    post, pre = s.t(p + "mlp.hook_post"), s.t(p + "mlp.hook_pre")
    W_2, W_1 = s.weights[f"W_2({b})"], s.weights[f"W_1({b})"]
    dX_grid = s.grid(dX, GRAD + p + "hook_resid_post", d_out, "pos", "model")

    steps.append(Step(
        f"grad-b{b}-ffn-weights", "backward", f"b{b}.ffn", f"Block {b}: ∂W_2 and ∂b_2",
        f"X({b}) = X_mid + ffn_out: the residual hands ∂L/∂X({b}) unchanged to both branches. W_2's gradient pairs "
        "each neuron's activation with each output gradient, summed over positions; a dead neuron (activation 0) "
        "gets no gradient.",
        r"\partial W_2 = h_{act}^\top\,\partial\,\text{ffn\_out},\quad \partial b_2 = \textstyle\sum_t \partial\,\text{ffn\_out}_t,"
        r"\quad \partial\,\text{ffn\_out} = \partial X^{(%d)}" % b,
        [Panel("", [s.grid(f"h_act({b})", p + "mlp.hook_post", post, "pos", "ffn"), dX_grid],
               [s.grid(f"dL/dW_2({b})", f"grad:{p}mlp.W_out", s.grads[f"W_2({b})"], "ffn", "model",
                       matmul_explainer(f"dL/dW_2({b})", post.T, f"h_act({b})ᵀ", d_out, dX)),
                s.grid(f"dL/db_2({b})", f"grad:{p}mlp.b_out", s.grads[f"b_2({b})"], "one", "model",
                       column_sum_explainer(f"dL/db_2({b})", d_out, dX))])]))

    d_post = g("mlp.hook_post")
    steps.append(Step(
        f"grad-b{b}-ffn-activation", "backward", f"b{b}.ffn", f"Block {b}: ∂h_act",
        "The gradient flows back through W_2 to each neuron's activation.",
        r"\partial h_{act} = \partial\,\text{ffn\_out}\;W_2^\top",
        [Panel("", [dX_grid, s.weight(f"W_2({b})")],
               [s.grid(f"dL/dh_act({b})", f"grad:{p}mlp.hook_post", d_post, "pos", "ffn",
                       matmul_explainer(f"dL/dh_act({b})", d_out, dX, W_2.T, f"W_2({b})ᵀ"))])]))

    d_pre = g("mlp.hook_pre")

    def explain_relu_grad(r, c):
        alive = pre[r, c] > 0
        value = float(d_post[r, c]) if alive else 0.0
        why = (f"h_{{{r},{c}}} = {num(float(pre[r, c]))} > 0:\\ \\text{{the gradient passes}}" if alive
               else f"h_{{{r},{c}}} = {num(float(pre[r, c]))} \\le 0:\\ \\text{{dead neuron, gradient blocked}}")
        return Arithmetic([why, f"{at(f'dL/dh({b})', r, c)} = {num(value)}"], value,
                          [(f"dL/dh_act({b})", r, c), (f"h({b})", r, c)])

    steps.append(Step(
        f"grad-b{b}-relu", "backward", f"b{b}.ffn", f"Block {b}: the ReLU mask",
        "ReLU's slope is 1 where the neuron was on and 0 where it was off: gradients of dead neurons are zeroed "
        "(outlined cells).",
        r"\partial h = \partial h_{act} \odot [h > 0]",
        [Panel("", [s.grid(f"dL/dh_act({b})", f"grad:{p}mlp.hook_post", d_post, "pos", "ffn"),
                    s.grid(f"h({b})", p + "mlp.hook_pre", pre, "pos", "ffn")],
               [s.grid(f"dL/dh({b})", f"grad:{p}mlp.hook_pre", d_pre, "pos", "ffn", explain_relu_grad, before=d_post)])]))

    mid_ln = s.t(p + "ln2.hook_out")
    steps.append(Step(
        f"grad-b{b}-ffn-input-weights", "backward", f"b{b}.ffn", f"Block {b}: ∂W_1 and ∂b_1",
        "W_1's gradient pairs each input dimension with each neuron's gradient, summed over positions.",
        r"\partial W_1 = X_{mid,LN}^\top\,\partial h,\quad \partial b_1 = \textstyle\sum_t \partial h_t",
        [Panel("", [s.grid(f"X_mid_LN({b})", p + "ln2.hook_out", mid_ln, "pos", "model"),
                    s.grid(f"dL/dh({b})", f"grad:{p}mlp.hook_pre", d_pre, "pos", "ffn")],
               [s.grid(f"dL/dW_1({b})", f"grad:{p}mlp.W_in", s.grads[f"W_1({b})"], "model", "ffn",
                       matmul_explainer(f"dL/dW_1({b})", mid_ln.T, f"X_mid_LN({b})ᵀ", d_pre, f"dL/dh({b})")),
                s.grid(f"dL/db_1({b})", f"grad:{p}mlp.b_in", s.grads[f"b_1({b})"], "one", "ffn",
                       column_sum_explainer(f"dL/db_1({b})", d_pre, f"dL/dh({b})"))])]))

    d_mid_ln = g("ln2.hook_out")
    steps.append(Step(
        f"grad-b{b}-ffn-input", "backward", f"b{b}.ffn", f"Block {b}: ∂X_mid_LN",
        "Back through W_1 to the FFN's input.",
        r"\partial X_{mid,LN} = \partial h\;W_1^\top",
        [Panel("", [s.grid(f"dL/dh({b})", f"grad:{p}mlp.hook_pre", d_pre, "pos", "ffn"), s.weight(f"W_1({b})")],
               [s.grid(f"dL/dX_mid_LN({b})", f"grad:{p}ln2.hook_out", d_mid_ln, "pos", "model",
                       matmul_explainer(f"dL/dX_mid_LN({b})", d_pre, f"dL/dh({b})", W_1.T, f"W_1({b})ᵀ"))])]))

    d_mid = g("hook_resid_mid")
    steps.append(_residual_split(
        s, f"grad-b{b}-residual2", f"b{b}.res2", f"Block {b}: LayerNorm 2 and the residual split",
        f"X_mid fed two paths: straight to X({b}) (the residual) and into LayerNorm → FFN. Its gradient is the sum "
        "of the two: the skip path's gradient unchanged, plus the FFN path's gradient back through LayerNorm.",
        skip=dX_grid, through=(f"dL/dX_mid_LN({b})", GRAD + p + "ln2.hook_out", d_mid_ln), norm=p + "ln2",
        normed=f"X_mid_LN({b})", total=(f"dL/dX_mid({b})", GRAD + p + "hook_resid_mid", d_mid)))

    steps += _attention_backward(s, b, d_mid)

    d_ln1 = g("ln1.hook_out")
    steps.append(_residual_split(
        s, f"grad-b{b}-residual1", f"b{b}.res1", f"Block {b}: LayerNorm 1 and the residual split",
        f"X({b - 1}) fed the residual and LayerNorm → attention: its gradient is the skip path's plus the attention "
        "path's back through LayerNorm." + (" This is the gradient on the embeddings plus positions." if b == 1 else ""),
        skip=s.grid(f"dL/dX_mid({b})", GRAD + p + "hook_resid_mid", d_mid, "pos", "model"),
        through=(f"dL/dX_LN({b - 1})", GRAD + p + "ln1.hook_out", d_ln1), norm=p + "ln1", normed=f"X_LN({b - 1})",
        total=(dXprev, GRAD + p + "hook_resid_pre", g("hook_resid_pre"))))
    return steps


def _residual_split(s: _Builder, key: str, stage: str, title: str, sentence: str, skip: Grid,
                    through: tuple[str, str, np.ndarray], norm: str, normed: str,
                    total: tuple[str, str, np.ndarray]) -> Step:
    """dL/dx = skip + LayerNorm-backward(through): the two paths out of a residual stream."""
    through_label, through_name, through_grad = through
    total_label, total_name, total_grad = total
    via_label = f"{total_label} via LN"
    via = total_grad - skip.values  # the LayerNorm path's share of the engine's gradient
    xhat, std = s.t(norm + ".hook_normalized"), s.t(norm + ".hook_scale")
    return Step(
        key, "backward", stage, title, sentence,
        r"\partial x = \partial x_{\text{skip}} + \frac{1}{\sigma}\left(g - \bar g - \hat x\,\overline{g\hat x}\right)",
        [Panel("", [skip, s.grid(through_label, through_name, through_grad, "pos", "model"),
                    s.grid(normed, norm + ".hook_normalized", xhat, "pos", "model"),
                    s.grid(f"σ {normed}", norm + ".hook_scale", std[:, None], "pos", "one")],
               [s.grid(via_label, f"{total_name} − {skip.name}", via, "pos", "model",
                       layernorm_backward_explainer(via_label, through_grad, through_label, xhat, normed, std)),
                s.grid(total_label, total_name, total_grad, "pos", "model",
                       add_explainer(total_label, skip.values, skip.label, via, via_label))])])


def _attention_backward(s: _Builder, b: int, d_attn_out: np.ndarray) -> list[Step]:
    cfg, p, steps = s.cfg, f"blocks.{b - 1}.", []
    g = lambda name: s.t(GRAD + p + name)  # noqa: E731
    z, dz = s.t(p + "attn.hook_z"), g("attn.hook_z")
    concat, dconcat = np.concatenate(list(z), axis=1), np.concatenate(list(dz), axis=1)
    W_O = s.weights[f"W_O({b})"]
    d_attn_grid = s.grid(f"dL/dattn_out({b})", GRAD + p + "hook_attn_out", d_attn_out, "pos", "model")
    steps.append(Step(
        f"grad-b{b}-output-projection", "backward", f"b{b}.attn", f"Block {b}: ∂W_O and ∂concat",
        f"The residual hands ∂L/∂X_mid({b}) to attention's output unchanged. W_O's gradient pairs the heads' "
        "outputs with it; going back through W_O splits the gradient into one part per head.",
        r"\partial W_O = \text{concat}^\top\,\partial\,\text{attn\_out},\quad"
        r"\partial\,\text{concat} = \partial\,\text{attn\_out}\;W_O^\top",
        [Panel("", [s.grid(f"concat({b})", p + "attn.hook_z (heads side by side)", concat, "pos", "concat"),
                    d_attn_grid, s.weight(f"W_O({b})")],
               [s.grid(f"dL/dW_O({b})", f"grad:{p}attn.W_O", s.grads[f"W_O({b})"], "concat", "model",
                       matmul_explainer(f"dL/dW_O({b})", concat.T, f"concat({b})ᵀ", d_attn_out, f"dL/dattn_out({b})")),
                s.grid(f"dL/dconcat({b})", f"grad:{p}attn.hook_z (heads side by side)", dconcat, "pos", "concat",
                       matmul_explainer(f"dL/dconcat({b})", d_attn_out, f"dL/dattn_out({b})", W_O.T, f"W_O({b})ᵀ"))])]))

    q, k, v = (s.t(p + f"attn.hook_{n}") for n in "qkv")
    dq, dk, dv = (g(f"attn.hook_{n}") for n in "qkv")
    pattern, dpattern, dscores = s.t(p + "attn.hook_pattern"), g("attn.hook_pattern"), g("attn.hook_scores")
    scale = math.sqrt(cfg.d_head)
    xln = s.t(p + "ln1.hook_out")
    XLN = f"X_LN({b - 1})"

    def per_head(make):
        return [Panel(f"head {h + 1}", *make(h, f"({b},{h + 1})")) for h in range(cfg.n_heads)]

    def dz_grid(h, hh):
        return s.grid(f"dL/dout{hh}", f"grad:{p}attn.hook_z[{h}]", dz[h], "pos", "head")

    steps.append(Step(
        f"grad-b{b}-values", "backward", f"b{b}.attn", f"Block {b}: ∂V and ∂A",
        "out = A V, so each value vector's gradient collects the output gradients of the positions that attended "
        "to it, and each attention weight's gradient is how much its value vector agrees with the output gradient. "
        "∂A is not zero above the diagonal, but those weights were fixed at 0 by the mask: the next step shows "
        "the gradient stopping there.",
        r"\partial V = A^\top\,\partial\,\text{out},\quad \partial A = \partial\,\text{out}\;V^\top",
        per_head(lambda h, hh: (
            [s.grid(f"A{hh}", f"{p}attn.hook_pattern[{h}]", pattern[h], "pos", "key"),
             s.grid(f"V{hh}", f"{p}attn.hook_v[{h}]", v[h], "pos", "head"), dz_grid(h, hh)],
            [s.grid(f"dL/dV{hh}", f"grad:{p}attn.hook_v[{h}]", dv[h], "pos", "head",
                    matmul_explainer(f"dL/dV{hh}", pattern[h].T, f"A{hh}ᵀ", dz[h], f"dL/dout{hh}")),
             s.grid(f"dL/dA{hh}", f"grad:{p}attn.hook_pattern[{h}]", dpattern[h], "pos", "key",
                    matmul_explainer(f"dL/dA{hh}", dz[h], f"dL/dout{hh}", v[h].T, f"V{hh}ᵀ"))]))))

    steps.append(Step(
        f"grad-b{b}-softmax", "backward", f"b{b}.attn", f"Block {b}: back through the softmax",
        "A softmax row's gradient is each weight times (its gradient minus the row's weighted average gradient). "
        "Masked positions have weight 0, so their score gradient is exactly 0.",
        r"\partial S_{t,u} = A_{t,u}\left(\partial A_{t,u} - \textstyle\sum_{u'} A_{t,u'}\,\partial A_{t,u'}\right)",
        per_head(lambda h, hh: (
            [s.grid(f"A{hh}", f"{p}attn.hook_pattern[{h}]", pattern[h], "pos", "key"),
             s.grid(f"dL/dA{hh}", f"grad:{p}attn.hook_pattern[{h}]", dpattern[h], "pos", "key")],
            [s.grid(f"dL/dscores{hh}", f"grad:{p}attn.hook_scores[{h}]", dscores[h], "pos", "key",
                    softmax_backward_explainer(f"dL/dscores{hh}", pattern[h], f"A{hh}", dpattern[h], f"dL/dA{hh}"))]))))

    steps.append(Step(
        f"grad-b{b}-queries-keys", "backward", f"b{b}.attn", f"Block {b}: ∂Q and ∂K",
        "S = Q Kᵀ/√d_head: a query's gradient is the keys weighted by its row of score gradients, a key's "
        "gradient the queries weighted by its column.",
        r"\partial Q = \partial S\,K/\sqrt{d_{head}},\quad \partial K = \partial S^\top Q/\sqrt{d_{head}}",
        per_head(lambda h, hh: (
            [s.grid(f"dL/dscores{hh}", f"grad:{p}attn.hook_scores[{h}]", dscores[h], "pos", "key"),
             s.grid(f"Q{hh}", f"{p}attn.hook_q[{h}]", q[h], "pos", "head"),
             s.grid(f"K{hh}", f"{p}attn.hook_k[{h}]", k[h], "pos", "head")],
            [s.grid(f"dL/dQ{hh}", f"grad:{p}attn.hook_q[{h}]", dq[h], "pos", "head",
                    matmul_explainer(f"dL/dQ{hh}", dscores[h], f"dL/dscores{hh}", k[h], f"K{hh}", scale=scale)),
             s.grid(f"dL/dK{hh}", f"grad:{p}attn.hook_k[{h}]", dk[h], "pos", "head",
                    matmul_explainer(f"dL/dK{hh}", dscores[h].T, f"dL/dscores{hh}ᵀ", q[h], f"Q{hh}", scale=scale))]))))

    def weight_grads(h, hh):
        outs = []
        for kind, d in zip("QKV", (dq, dk, dv)):
            label = f"dL/dW_{kind}{hh}"
            outs.append(s.grid(label, f"grad:{p}attn.W_{kind}[{h}]", s.grads[f"W_{kind}{hh}"], "model", "head",
                               matmul_explainer(label, xln.T, f"{XLN}ᵀ", d[h], f"dL/d{kind}{hh}")))
        ins = [s.grid(XLN, p + "ln1.hook_out", xln, "pos", "model")] + [
            s.grid(f"dL/d{kind}{hh}", f"grad:{p}attn.hook_{kind.lower()}[{h}]", d[h], "pos", "head")
            for kind, d in zip("QKV", (dq, dk, dv))]
        return ins, outs

    steps.append(Step(
        f"grad-b{b}-qkv-weights", "backward", f"b{b}.attn", f"Block {b}: ∂W_Q, ∂W_K, ∂W_V",
        "Each projection's gradient pairs the LayerNorm output with the gradient of what it produced, summed over "
        "positions.",
        r"\partial W_Q = X_{LN}^\top\,\partial Q,\quad \partial W_K = X_{LN}^\top\,\partial K,\quad"
        r"\partial W_V = X_{LN}^\top\,\partial V",
        per_head(weight_grads)))

    d_ln = g("ln1.hook_out")

    def explain_dln(r, c):
        terms, uses = [], []
        for h in range(cfg.n_heads):
            hh = f"({b},{h + 1})"
            for kind, d in zip("QKV", (dq, dk, dv)):
                W = s.weights[f"W_{kind}{hh}"]
                terms.append((f"\\sum_k {at(f'dL/d{kind}{hh}', r, 'k')}\\,{at(f'W_{kind}{hh}', c, 'k')}", d[h][r], W[c]))
                uses += [(f"dL/d{kind}{hh}", r, None), (f"W_{kind}{hh}", c, None)]
        return dot_cell(f"dL/dX_LN({b - 1})", r, c, terms, uses=uses)

    steps.append(Step(
        f"grad-b{b}-attention-input", "backward", f"b{b}.attn", f"Block {b}: ∂X_LN",
        f"X_LN fed all {3 * cfg.n_heads} projections (Q, K and V of every head): its gradient is the sum of what "
        "comes back through each.",
        r"\partial X_{LN} = \textstyle\sum_h \left(\partial Q_h W_{Q,h}^\top + \partial K_h W_{K,h}^\top + "
        r"\partial V_h W_{V,h}^\top\right)",
        [Panel("", [s.grid(f"dL/d{kind}({b},{h + 1})", f"grad:{p}attn.hook_{kind.lower()}[{h}]", d[h], "pos", "head")
                    for h in range(cfg.n_heads) for kind, d in zip("QKV", (dq, dk, dv))],
               [s.grid(f"dL/dX_LN({b - 1})", f"grad:{p}ln1.hook_out", d_ln, "pos", "model", explain_dln)])]))
    return steps


def _update(s: _Builder) -> Step:
    panels = []
    for label, w in s.weights.items():
        grad = s.grads[label]
        base = s.weight(label)
        kinds = (base.row_title, base.col_title)
        new = w - s.lr * grad
        g_grid = Grid(f"dL/d{label}", "grad:" + base.name, np.atleast_2d(grad), base.rows, base.cols, *kinds)
        new_grid = Grid(f"{label}_new", base.name + " after the step", np.atleast_2d(new), base.rows, base.cols, *kinds,
                        explain=update_explainer(f"{label}_new", np.atleast_2d(w), label, np.atleast_2d(grad),
                                                 f"dL/d{label}", s.lr),
                        changed=np.atleast_2d(new != w))
        panels.append(Panel(label, [base, g_grid], [new_grid]))
    return Step(
        "update", "update", "update", f"Update: one gradient-descent step, η = {s.lr:g}",
        f"Every weight moves against its gradient, scaled by the learning rate η = {s.lr:g}: a small step "
        "downhill on the loss. Only entries with a gradient of exactly 0 stay put. Choose a weight to see it "
        "before, its gradient, and after. LayerNorm's γ and β stay 1 and 0, as in the article.",
        r"W_{\text{new}} = W - \eta\,\partial L/\partial W",
        panels)
