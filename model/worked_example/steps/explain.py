"""Each cell's arithmetic, written out in LaTeX with its operands and recomputed from them in
plain Python (math.fsum), so that a test can check every explanation against the engine."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from glassbox.model.worked_example.steps.grids import Arithmetic, Grid

Explainer = Callable[[int, int], Arithmetic]


# ---- writing numbers and names in LaTeX ------------------------------------------------------


def num(v: float) -> str:
    """A value in LaTeX with 4 decimals, a negative one in brackets. A value that rounds to 0 is
    written 0.0000, never (-0.0000): the operands are written with 4 decimals too, so
    "0.2083 + (-0.2083) = 0.0000" reads right, and the grids write such a cell without a sign
    (labels.cell_text); the exact value is in the grid."""
    if v == -math.inf:
        return r"-\infty"
    text = f"{v:.4f}"
    if float(text) == 0:
        return "0.0000"
    return text if v >= 0 else f"({text})"


def power(v: float) -> str:
    r"""A small constant in LaTeX: 1e-05 -> 10^{-5}, 2.5e-06 -> 2.5\times10^{-6}, 0.01 -> 0.01."""
    text = f"{v:g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    ten = f"10^{{{int(exponent)}}}"
    return ten if mantissa == "1" else f"{mantissa}\\times{ten}"


def tex(label: str) -> str:
    r"""Article name as LaTeX: "dL/dW_Q(2,1)" -> \partial L/\partial\,\text{W\_Q(2,1)}."""
    body = label[len("dL/d") :] if label.startswith("dL/d") else label
    body = r"\text{" + body.replace("_", r"\_").replace("ᵀ", "") + "}" + ("^\\top" if label.endswith("ᵀ") else "")
    return r"\partial L/\partial\," + body if label.startswith("dL/d") else body


def at(label: str, r: int | str, c: int | str) -> str:
    return f"{tex(label)}_{{{r},{c}}}"


def one_row_subscripts(grids: list[Grid]) -> dict[str, str]:
    """How a one-row grid's cells are written, in place of row 0's "label_{0,": with the position
    the row is (logits_{4,2}, beside a row labelled "4 the"), or with no row at all for a vector
    such as a bias (b_{2}, its row labelled "—")."""
    written = {}
    for grid in grids:
        if grid.shape[0] != 1:
            continue
        row = grid.rows[0].split(" ", 1)[0]
        if row.isdigit() and row != "0":
            written[f"{tex(grid.label)}_{{0,"] = f"{tex(grid.label)}_{{{row},"
        elif grid.rows[0] == "—":
            written[f"{tex(grid.label)}_{{0,"] = f"{tex(grid.label)}_{{"
    return written


def with_subscripts(explain: Explainer, written: dict[str, str]) -> Explainer:
    """``explain`` with one-row grids' cells written as ``one_row_subscripts`` says."""

    def rewritten(r: int, c: int) -> Arithmetic:
        arithmetic = explain(r, c)
        lines = arithmetic.lines
        for old, new in written.items():
            lines = [line.replace(old, new) for line in lines]
        return Arithmetic(lines, arithmetic.value, arithmetic.uses)

    return rewritten


# ---- the arithmetic of one cell, recomputed from its operands --------------------------------


def dot_cell(
    out: str,
    r: int,
    c: int,
    terms: list[tuple[str, np.ndarray, np.ndarray]],
    bias: tuple[str, float] | None = None,
    scale: float | None = None,
    uses: list | None = None,
) -> Arithmetic:
    """out[r,c] = sum over groups of a . b (+ bias) (/ scale), every product written out."""
    parts, lines = [], []
    for header, a, b in terms:
        products = [float(x) * float(y) for x, y in zip(a, b)]
        parts.append(math.fsum(products))
        written = [f"{num(float(x))}\\times{num(float(y))}" for x, y in zip(a, b)]
        lines.append(header)
        for start in range(0, len(written), 4):  # four products a line keeps a line on screen
            lines.append(("= " if start == 0 else "+ ") + " + ".join(written[start : start + 4]))
        lines.append(f"= {num(parts[-1])}")
    total = math.fsum(parts)
    if len(parts) > 1:
        lines.append(f"\\text{{sum}} = {' + '.join(num(x) for x in parts)} = {num(total)}")
    if bias is not None:
        lines.append(f"{num(total)} + {bias[0]} = {num(total)} + {num(bias[1])} = {num(total + bias[1])}")
        total += bias[1]
    if scale is not None:
        lines.append(f"{num(total)} / \\sqrt{{{scale**2:g}}} = {num(total / scale)}")
        total /= scale
    lines.append(f"{at(out, r, c)} = {num(total)}")
    return Arithmetic(lines, total, uses or [])


def matmul_explainer(
    out: str,
    a: np.ndarray,
    a_label: str,
    b: np.ndarray,
    b_label: str,
    bias: np.ndarray | None = None,
    bias_label: str | None = None,
    scale: float | None = None,
) -> Explainer:
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
        return Arithmetic(
            [
                f"{at(out, r, c)} = {at(a_label, r, c)} + {at(b_label, r, c)} = "
                f"{num(float(a[r, c]))} + {num(float(b[r, c]))} = {num(value)}"
            ],
            value,
            [(a_label, r, c), (b_label, r, c)],
        )

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
            f"\\sqrt{{\\sigma^2 + \\epsilon}} = \\sqrt{{{num(var)} + {power(eps)}}} = {num(std)}",
            f"{at(out, r, c)} = (x_{{{c}}} - \\mu)/\\sqrt{{\\sigma^2+\\epsilon}} = "
            f"({num(row[c])} - {num(mean)}) / {num(std)} = {num(value)}",
        ]
        return Arithmetic(lines, value, [(x_label, r, None)])

    return explain


def layernorm_backward_explainer(out: str, g: np.ndarray, g_label: str, xhat: np.ndarray, xhat_label: str, std: np.ndarray):
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
            + " + ".join(f"{num(x)}\\times{num(y)}" for x, y in zip(ar, dr))
            + f" = {num(inner)}",
            f"{at(out, r, c)} = A_{{{r},{c}}}(\\partial A_{{{r},{c}}} - {num(inner)}) = "
            f"{num(ar[c])}\\times({num(dr[c])} - {num(inner)}) = {num(value)}",
        ]
        return Arithmetic(lines, value, [(a_label, r, None), (da_label, r, None)])

    return explain


def column_sum_explainer(out: str, g: np.ndarray, g_label: str):
    def explain(r: int, c: int) -> Arithmetic:
        column = [float(v) for v in g[:, c]]
        value = math.fsum(column)
        return Arithmetic(
            [f"{at(out, r, c)} = \\sum_t {at(g_label, 't', c)} = {' + '.join(num(v) for v in column)} = {num(value)}"],
            value,
            [(g_label, None, c)],
        )

    return explain


def update_explainer(out: str, w: np.ndarray, w_label: str, g: np.ndarray, g_label: str, lr: float):
    def explain(r: int, c: int) -> Arithmetic:
        value = float(w[r, c]) - lr * float(g[r, c])
        return Arithmetic(
            [
                f"{at(out, r, c)} = {at(w_label, r, c)} - \\eta\\,{at(g_label, r, c)} = "
                f"{num(float(w[r, c]))} - {lr:g}\\times{num(float(g[r, c]))} = {num(value)}"
            ],
            value,
            [(w_label, r, c), (g_label, r, c)],
        )

    return explain


# ---- cells that are looked up, kept or dropped rather than summed -------------------------------


def token_id_explainer(vocab: list[str], tokens: list[int]) -> Explainer:
    def explain(r: int, c: int) -> Arithmetic:
        word = f"“{vocab[tokens[c]]}” is word number {tokens[c]} of the vocabulary"
        return Arithmetic([f"\\text{{position {c}: {word}}}"], float(tokens[c]))

    return explain


def lookup_explainer(out: str, table: np.ndarray, table_label: str, tokens: list[int]) -> Explainer:
    """out[r] = table[tokens[r]]."""

    def explain(r: int, c: int) -> Arithmetic:
        value = float(table[tokens[r], c])
        return Arithmetic(
            [f"{at(out, r, c)} = {at(table_label, tokens[r], c)} = {num(value)}"], value, [(table_label, tokens[r], c)]
        )

    return explain


def mask_explainer(out: str, scores: np.ndarray, scores_label: str) -> Explainer:
    def explain(r: int, c: int) -> Arithmetic:
        kept = c <= r
        value = float(scores[r, c]) if kept else -math.inf
        why = (
            f"\\text{{key {c} is not after query {r}: kept}}"
            if kept
            else f"\\text{{key {c} comes after query {r}: the future is hidden}}"
        )
        return Arithmetic([why, f"{at(out, r, c)} = {num(value)}"], value, [(scores_label, r, c)])

    return explain


def concat_explainer(out: str, heads: list[np.ndarray], head_labels: list[str]) -> Explainer:
    """out = [heads[0] | heads[1] | ...]."""

    def explain(r: int, c: int) -> Arithmetic:
        h, i = divmod(c, heads[0].shape[1])
        value = float(heads[h][r, i])
        return Arithmetic([f"{at(out, r, c)} = {at(head_labels[h], r, i)} = {num(value)}"], value, [(head_labels[h], r, i)])

    return explain


def relu_explainer(out: str, pre: np.ndarray, pre_label: str) -> Explainer:
    def explain(r: int, c: int) -> Arithmetic:
        value = max(0.0, float(pre[r, c]))
        return Arithmetic([f"{at(out, r, c)} = \\max(0, {num(float(pre[r, c]))}) = {num(value)}"], value, [(pre_label, r, c)])

    return explain


def relu_backward_explainer(out: str, d_post: np.ndarray, d_post_label: str, pre: np.ndarray, pre_label: str) -> Explainer:
    def explain(r: int, c: int) -> Arithmetic:
        alive = pre[r, c] > 0
        value = float(d_post[r, c]) if alive else 0.0
        why = (
            f"h_{{{r},{c}}} = {num(float(pre[r, c]))} > 0:\\ \\text{{the gradient passes}}"
            if alive
            else f"h_{{{r},{c}}} = {num(float(pre[r, c]))} \\le 0:\\ \\text{{dead neuron, gradient blocked}}"
        )
        return Arithmetic([why, f"{at(out, r, c)} = {num(value)}"], value, [(d_post_label, r, c), (pre_label, r, c)])

    return explain


# ---- the head, the loss and the embeddings' gradients -------------------------------------------


def head_explainer(out: str, x: np.ndarray, x_label: str, row: int, w: np.ndarray, w_label: str) -> Explainer:
    """out[0, c] = x[row] . w[c]: the last position's vector against every word's row."""

    def explain(r: int, c: int) -> Arithmetic:
        return dot_cell(
            out,
            r,
            c,
            [(f"\\sum_k {at(x_label, row, 'k')}\\,{at(w_label, c, 'k')}", x[row], w[c])],
            uses=[(x_label, row, None), (w_label, c, None)],
        )

    return explain


def loss_explainer(word: str, probs: np.ndarray, probs_label: str, target: int) -> Explainer:
    def explain(r: int, c: int) -> Arithmetic:
        p = float(probs[0, target])
        return Arithmetic(
            [f"L = -\\log p(\\text{{{word}}}) = -\\log {num(p)} = {num(-math.log(p))}"], -math.log(p), [(probs_label, 0, target)]
        )

    return explain


def loss_gradient_explainer(out: str, probs: np.ndarray, probs_label: str, onehot: np.ndarray, onehot_label: str) -> Explainer:
    """Softmax then -log p: out = p - y."""

    def explain(r: int, c: int) -> Arithmetic:
        value = float(probs[0, c]) - float(onehot[0, c])
        return Arithmetic(
            [f"{at(out, r, c)} = p_{{{c}}} - y_{{{c}}} = {num(float(probs[0, c]))} - {onehot[0, c]:g} = {num(value)}"],
            value,
            [(probs_label, 0, c), (onehot_label, 0, c)],
        )

    return explain


def sum_of_products_explainer(out: str, pairs: list[tuple[np.ndarray, str, np.ndarray, str]]) -> Explainer:
    """out[r, c] = sum over pairs (a, b) of a[r] . b[c]: a gradient that comes back along several paths."""

    def explain(r: int, c: int) -> Arithmetic:
        terms, uses = [], []
        for a, a_label, b, b_label in pairs:
            terms.append((f"\\sum_k {at(a_label, r, 'k')}\\,{at(b_label, c, 'k')}", a[r], b[c]))
            uses += [(a_label, r, None), (b_label, c, None)]
        return dot_cell(out, r, c, terms, uses=uses)

    return explain


def position_gradient_explainer(out: str, g: np.ndarray, g_label: str) -> Explainer:
    """Row t of the positional table gets the gradient at position t; rows past the prompt get 0."""

    def explain(r: int, c: int) -> Arithmetic:
        used = r < len(g)
        value = float(g[r, c]) if used else 0.0
        line = (
            f"{at(out, r, c)} = {at(g_label, r, c)} = {num(value)}"
            if used
            else f"\\text{{position {r} is not in the prompt: }} {at(out, r, c)} = 0"
        )
        return Arithmetic([line], value, [(g_label, r, c)] if used else [])

    return explain


def embedding_input_explainer(out: str, g: np.ndarray, g_label: str, tokens: list[int], vocab: list[str]) -> Explainer:
    """Row v collects the gradient of every position holding token v."""

    def explain(r: int, c: int) -> Arithmetic:
        used = [t for t, tok in enumerate(tokens) if tok == r]
        values = [float(g[t, c]) for t in used]
        value = math.fsum(values)
        if not used:
            return Arithmetic([f"\\text{{“{vocab[r]}” is not in the prompt: }} {at(out, r, c)} = 0"], 0.0)
        where = " + ".join(at(g_label, t, c) for t in used)
        return Arithmetic(
            [f"{at(out, r, c)} = {where} = {' + '.join(num(v) for v in values)} = {num(value)}"],
            value,
            [(g_label, t, c) for t in used],
        )

    return explain


def outer_explainer(out: str, a: np.ndarray, a_label: str, x: np.ndarray, x_label: str, row: int) -> Explainer:
    """out[r, c] = a[0, r] * x[row, c]."""

    def explain(r: int, c: int) -> Arithmetic:
        value = float(a[0, r]) * float(x[row, c])
        return Arithmetic(
            [
                f"{at(out, r, c)} = {at(a_label, 0, r)}\\times{at(x_label, row, c)} = "
                f"{num(float(a[0, r]))}\\times{num(float(x[row, c]))} = {num(value)}"
            ],
            value,
            [(a_label, 0, r), (x_label, row, c)],
        )

    return explain
