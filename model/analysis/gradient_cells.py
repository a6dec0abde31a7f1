"""Any loaded model's backward pass, one cell at a time: how autograd got ∂L/∂(a tensor)[cell]
from the gradients one step closer to the loss and the forward pass's own tensors, written out
with the actual numbers and recomputed from them in float64 (math.fsum), as the worked example
does for the article's model.

Each tensor's gradient is the sum of what its consumers pass back: a skip connection passes
its gradient on unchanged, a norm passes it back through its closed-form derivative, a
product through the other factor (a dot product), a softmax through its Jacobian, an
activation through its derivative, RoPE through the inverse rotation. ``gradient_arithmetic``
knows every tensor of the backward steps of every architecture the engine runs: LayerNorm and
RMSNorm, plain and gated MLPs, multi-head, grouped and multi-query attention, RoPE (whole or
partial), QK-norm, post norms, parallel blocks and soft-capping; tests/test_gradient_cells.py
checks every cell of every such tensor against autograd's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from glassbox.model.analysis.arithmetic import Arithmetic
from glassbox.model.engine import GRAD, Trace, Transformer
from glassbox.model.engine.components.attention import Attention
from glassbox.model.engine.components.block import Block
from glassbox.model.engine.rope import rope_angles

SHOWN_TERMS = 6  # a longer sum shows its largest terms and the rest as one number
ROTATED = {"q": "hook_rot_q", "k": "hook_rot_k"}  # q and k after RoPE


def num(v: float) -> str:
    r"""A number in a formula, to 4 significant digits (gradients are small): 1.234\times10^{-5},
    negatives in parentheses."""
    mantissa, _, exponent = f"{v:.4g}".partition("e")
    text = mantissa + (rf"\times10^{{{int(exponent)}}}" if exponent else "")
    return f"({text})" if v < 0 else text


@dataclass
class Part:
    """One consumer's share of a cell's gradient: its LaTeX lines and its value."""

    what: str
    lines: list[str]
    value: float


def symbol(name: str) -> str:
    """A tensor's short name in a formula: "blocks.0.attn.hook_q" -> q, "ln_final.hook_out" -> ln_final.out."""
    parts = name.removeprefix(GRAD).split(".")
    last = parts[-1].removeprefix("hook_")
    owner = parts[-2] if len(parts) > 1 and parts[-2] not in ("attn", "mlp") and not parts[-2].isdigit() else ""
    return r"\text{" + ((owner + ".") if owner else "") + last.replace("_", r"\_") + "}"


def g(name: str, cell: str) -> str:
    return rf"\partial L/\partial {symbol(name)}_{{{cell}}}"


def written_sum(pairs: list[tuple[float, float]], left: str, right: str) -> tuple[list[str], float]:
    """Σ a·b written out: every product when there are few, else the largest ``SHOWN_TERMS``
    and the others summed; the value from all of them (math.fsum)."""
    products = [a * b for a, b in pairs]
    total = math.fsum(products)
    order = list(range(len(pairs)))
    if len(pairs) > SHOWN_TERMS + 2:
        order = sorted(order, key=lambda i: -abs(products[i]))[:SHOWN_TERMS]
    written = [f"{num(pairs[i][0])}\\times{num(pairs[i][1])}" for i in order]
    lines = [f"\\textstyle\\sum {left}\\,{right}"]
    for start in range(0, len(written), 3):  # three products a line keeps a line on screen
        lines.append(("= " if start == 0 else "+ ") + " + ".join(written[start : start + 3]))
    if len(order) < len(pairs):
        rest = math.fsum(products[i] for i in range(len(pairs)) if i not in set(order))
        lines.append(f"+ \\text{{the other {len(pairs) - len(order)} terms}}\\ {num(rest)}")
    lines.append(f"= {num(total)}")
    return lines, total


def derivative(activation: str, x: float) -> tuple[str, float]:
    """The activation's derivative at x, as a formula and its value."""
    if activation == "relu":
        return (rf"\mathrm{{relu}}'({num(x)}) = {'1' if x > 0 else '0'}", 1.0 if x > 0 else 0.0)
    if activation == "gelu":
        cdf, pdf = 0.5 * (1 + math.erf(x / math.sqrt(2))), math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        return (rf"\mathrm{{gelu}}'(x) = \Phi(x) + x\,\varphi(x) = {num(cdf)} + {num(x)}\times{num(pdf)}", cdf + x * pdf)
    if activation == "gelu_tanh":
        c = math.sqrt(2 / math.pi)
        t = math.tanh(c * (x + 0.044715 * x**3))
        value = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
        return (
            rf"\mathrm{{gelu}}'(x) = \tfrac12(1+t) + \tfrac12 x(1-t^2)\sqrt{{2/\pi}}(1+0.134145x^2),\ "
            rf"t = \tanh(\sqrt{{2/\pi}}(x+0.044715x^3)) = {num(t)}",
            value,
        )
    s = 1 / (1 + math.exp(-x))
    return (rf"\mathrm{{silu}}'(x) = \sigma(x)(1 + x(1-\sigma(x))),\ \sigma({num(x)}) = {num(s)}", s * (1 + x * (1 - s)))


class Sliced:
    """A tensor read a slice at a time, as float64 numpy: a cell needs a row or two of a tensor
    that may be 512 × 50,257 (converting all of it would take longer than the arithmetic)."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def __getitem__(self, index) -> np.ndarray:
        return self.tensor[index].detach().to(torch.float64).cpu().numpy()


class GradientCells:
    """The arithmetic of any cell of any gradient in one backward trace of ``model``."""

    def __init__(self, model: Transformer, trace: Trace):
        self.model, self.cfg, self.trace = model, model.cfg, trace

    def a(self, name: str) -> Sliced:
        return Sliced(self.trace[name])

    def grad(self, name: str) -> Sliced:
        if GRAD + name not in self.trace.grads:  # off the loss's path: no gradient flows through it
            return Sliced(torch.zeros_like(self.trace[name]))
        return Sliced(self.trace[GRAD + name])

    def weight(self, name: str) -> Sliced:
        return Sliced(self.model.W_U if name == "W_U" else dict(self.model.named_parameters())[name])

    # ---- the cell ------------------------------------------------------------------------------

    def explain(self, name: str, index: tuple[int, ...]) -> Arithmetic | None:
        """How autograd computed ``name`` (a "grad:" name) at ``index`` (the tensor's own axes,
        the head first where it has one); None where no rule applies."""
        base = name.removeprefix(GRAD)
        parts = self.consumers(base, index)
        if parts is None:
            return None
        cell = ",".join(map(str, index))
        lines, values = [], [p.value for p in parts]
        for part in parts:
            what = part.what.replace("_", r"\_")  # an underscore in \text{} is LaTeX's, not a letter
            lines.append(rf"\text{{{what}:}}")
            lines += part.lines
        total = math.fsum(values)
        if len(parts) > 1:
            lines.append(f"{g(base, cell)} = {' + '.join(num(v) for v in values)} = {num(total)}")
        else:
            lines.append(f"{g(base, cell)} = {num(total)}")
        return Arithmetic(lines, total)

    def consumers(self, name: str, index: tuple[int, ...]) -> list[Part] | None:
        """What each consumer of ``name`` passes back to ``index``; None where no rule applies."""
        for pattern, rule in self._rules():
            match = re.fullmatch(pattern, name)
            if match:
                fields = {k: int(v) if k == "i" else v for k, v in match.groupdict().items()}
                return rule(index, **fields)
        return None

    def _rules(self) -> list[tuple[str, Callable[..., list[Part] | None]]]:
        cfg, block = self.cfg, r"blocks\.(?P<i>\d+)\."
        attn_out = "attn.hook_out" if cfg.post_norms else "hook_attn_out"
        mlp_out = "mlp.hook_out" if cfg.post_norms else "hook_mlp_out"
        return [
            (r"hook_logits", self._logits),
            (r"hook_logits_uncapped", lambda ix: [self._softcap("hook_logits", ix, cfg.final_softcap)]),
            (r"ln_final\.hook_out", lambda ix: [self._head(ix)]),
            (r"(?P<prefix>.*\.)hook_normalized", lambda ix, prefix: [self._normalized(prefix, ix)]),
            (
                r"hook_embed|hook_pos_embed",
                lambda ix: [self._identity("blocks.0.hook_resid_pre", ix, "the sum entering block 1 passes it on")],
            ),
            (block + r"hook_resid_pre", self._resid_pre),
            (
                block + r"hook_resid_mid",
                lambda ix, i: [
                    self._norm_back(f"blocks.{i}.ln2.", ix),
                    self._identity(f"blocks.{i}.hook_resid_post", ix, "the skip"),
                ],
            ),
            (block + r"hook_resid_post", self._resid_post),
            (
                block + r"hook_attn_out",
                lambda ix, i: [
                    self._identity(f"blocks.{i}.hook_attn_mlp_sum" if cfg.parallel_block else f"blocks.{i}.hook_resid_mid", ix)
                ],
            ),
            (
                block + r"hook_mlp_out",
                lambda ix, i: [
                    self._identity(f"blocks.{i}.hook_attn_mlp_sum" if cfg.parallel_block else f"blocks.{i}.hook_resid_post", ix)
                ],
            ),
            (block + r"hook_attn_mlp_sum", lambda ix, i: [self._identity(f"blocks.{i}.hook_resid_post", ix)]),
            (block + r"ln1_post\.hook_out", lambda ix, i: [self._identity(f"blocks.{i}.hook_attn_out", ix, "the same tensor")]),
            (block + r"ln2_post\.hook_out", lambda ix, i: [self._identity(f"blocks.{i}.hook_mlp_out", ix, "the same tensor")]),
            (block + r"attn\.hook_out", lambda ix, i: [self._norm_back(f"blocks.{i}.ln1_post.", ix)]),
            (block + r"mlp\.hook_out", lambda ix, i: [self._norm_back(f"blocks.{i}.ln2_post.", ix)]),
            (
                block + r"attn\.hook_result",
                lambda ix, i: [
                    self._identity(f"blocks.{i}.{attn_out}", ix[1:], "every head's result is summed into the attention output")
                ],
            ),
            (block + r"attn\.hook_z", self._z),
            (block + r"attn\.hook_pattern", self._pattern),
            (block + r"attn\.hook_scores_masked", self._softmax),
            (block + r"attn\.hook_scores", self._mask),
            (
                block + r"attn\.hook_scores_uncapped",
                lambda ix, i: [self._softcap(f"blocks.{i}.attn.hook_scores", ix, cfg.attn_softcap)],
            ),
            (
                block + r"attn\.(?P<rotated>hook_rot_q|hook_rot_k)",
                lambda ix, i, rotated: [self._query_or_key(i, rotated[-1], ix)],
            ),
            (
                block + r"attn\.(?P<which>q|k)_norm\.hook_out",
                lambda ix, i, which: [
                    self._rope_back(i, which, ix) if cfg.positional == "rope" else self._query_or_key(i, which, ix)
                ],
            ),
            (
                block + r"attn\.hook_(?P<which>q|k)",
                lambda ix, i, which: [
                    self._norm_back(f"blocks.{i}.attn.{which}_norm.", ix)
                    if cfg.qk_norm
                    else self._rope_back(i, which, ix)
                    if cfg.positional == "rope"
                    else self._query_or_key(i, which, ix)
                ],
            ),
            (block + r"attn\.hook_v", self._values),
            (block + r"ln1\.hook_out", self._attention_input),
            (block + r"mlp\.hook_post", lambda ix, i: [self._post(i, mlp_out, ix)]),
            (
                block + r"mlp\.hook_gate",
                lambda ix, i: [
                    self._times(f"blocks.{i}.mlp.hook_post", f"blocks.{i}.mlp.hook_linear", ix, "post = gate × linear")
                ],
            ),
            (
                block + r"mlp\.hook_linear",
                lambda ix, i: [self._times(f"blocks.{i}.mlp.hook_post", f"blocks.{i}.mlp.hook_gate", ix, "post = gate × linear")],
            ),
            (block + r"mlp\.hook_pre", self._pre),
            (block + r"ln2\.hook_out", self._mlp_input),
        ]

    # ---- rules, each returning the parts its consumers pass back -------------------------------------

    def _identity(self, source: str, index: tuple[int, ...], why: str = "passed on unchanged") -> Part:
        value = float(self.grad(source)[index])
        return Part(why, [f"{g(source, ','.join(map(str, index)))} = {num(value)}"], value)

    def _resid_pre(self, index, i: int) -> list[Part]:
        cfg = self.cfg
        skip = f"blocks.{i}.hook_resid_post" if cfg.parallel_block else f"blocks.{i}.hook_resid_mid"
        parts = [self._norm_back(f"blocks.{i}.ln1.", index)]
        if cfg.parallel_block:
            parts.append(self._norm_back(f"blocks.{i}.ln2.", index))
        return parts + [self._identity(skip, index, "the skip")]

    def _resid_post(self, index, i: int) -> list[Part]:
        if i < self.cfg.n_layers - 1:
            return [self._identity(f"blocks.{i + 1}.hook_resid_pre", index, "the next block's input: the same tensor")]
        return [self._norm_back("ln_final.", index)] if self.cfg.final_norm else [self._head(index)]

    def _norm_back(self, prefix: str, index: tuple[int, ...]) -> Part:
        """Back through a norm to its input: LayerNorm (g − mean g − x̂ mean(g x̂)) / σ, RMSNorm
        (g − x̂ mean(g x̂)) / σ, with g = ∂L/∂x̂ = ∂L/∂out × γ."""
        *before, c = index
        row = tuple(before)
        out = self.grad(prefix + "hook_out")[row]
        gx = [float(o) * float(w) for o, w in zip(out, self.weight(prefix + "w")[:])]
        xhat = [float(v) for v in self.a(prefix + "hook_normalized")[row]]
        sigma = float(self.a(prefix + "hook_scale")[row])
        n = len(gx)
        mean_gx = math.fsum(a * b for a, b in zip(gx, xhat)) / n
        cell = ",".join(map(str, row))
        name = prefix.removesuffix(".")
        if self.cfg.norm == "layernorm":
            mean_g = math.fsum(gx) / n
            value = (gx[c] - mean_g - xhat[c] * mean_gx) / sigma
            lines = [
                rf"g = \partial L/\partial\,\text{{{name}.out}}\times\gamma,\ \bar g = {num(mean_g)},\ "
                rf"\overline{{g\hat x}} = {num(mean_gx)},\ \sigma_{{{cell}}} = {num(sigma)}",
                rf"(g_{{{c}}} - \bar g - \hat x_{{{c}}}\overline{{g\hat x}})/\sigma = ({num(gx[c])} - {num(mean_g)} - "
                rf"{num(xhat[c])}\times{num(mean_gx)}) / {num(sigma)} = {num(value)}",
            ]
            return Part(f"back through {name} (LayerNorm)", lines, value)
        value = (gx[c] - xhat[c] * mean_gx) / sigma
        lines = [
            rf"g = \partial L/\partial\,\text{{{name}.out}}\times\gamma,\ \overline{{g\hat x}} = {num(mean_gx)},\ "
            rf"\sigma_{{{cell}}} = {num(sigma)}",
            rf"(g_{{{c}}} - \hat x_{{{c}}}\overline{{g\hat x}})/\sigma = ({num(gx[c])} - {num(xhat[c])}\times"
            rf"{num(mean_gx)}) / {num(sigma)} = {num(value)}",
        ]
        return Part(f"back through {name} (RMSNorm)", lines, value)

    def _normalized(self, prefix: str, index) -> Part:
        """out = x̂ × γ (+ β): ∂L/∂x̂ = ∂L/∂out × γ."""
        gamma = float(self.weight(prefix + "w")[index[-1]])
        go = float(self.grad(prefix + "hook_out")[index])
        value = go * gamma
        return Part(
            "out = x̂ × γ (+ β)",
            [
                rf"{g(prefix + 'hook_out', ','.join(map(str, index)))}\times\gamma_{{{index[-1]}}}"
                rf" = {num(go)}\times{num(gamma)} = {num(value)}"
            ],
            value,
        )

    def _logits(self, index) -> list[Part]:
        """Back through the log-softmax: ∂L/∂logit_v = ∂L/∂log p_v − p_v Σ_u ∂L/∂log p_u."""
        t, v = index
        g_lp = self.grad("hook_log_probs")[t]
        p = math.exp(float(self.a("hook_log_probs")[t, v]))
        total = math.fsum(float(x) for x in g_lp)
        value = float(g_lp[v]) - p * total
        lines = [
            rf"\textstyle\sum_u \partial L/\partial \log p_{{{t},u}} = {num(total)}\ "
            r"\text{(−1/N at the target, N positions with one; 0 elsewhere)}",
            rf"\partial L/\partial \log p_{{{t},{v}}} - p_{{{t},{v}}}\textstyle\sum_u \partial L/\partial \log p_{{{t},u}}"
            rf" = {num(float(g_lp[v]))} - {num(p)}\times{num(total)} = {num(value)}",
        ]
        return [Part("back through the log-softmax", lines, value)]

    def _softcap(self, capped: str, index, cap: float | None) -> Part:
        """y = cap·tanh(u/cap): ∂L/∂u = ∂L/∂y (1 − (y/cap)²)."""
        assert cap is not None, "a model has the uncapped tensor only where it sets the cap"
        y, gy = float(self.a(capped)[index]), float(self.grad(capped)[index])
        value = gy * (1 - (y / cap) ** 2)
        return Part(
            f"back through the soft-cap {cap:g}·tanh(u/{cap:g})",
            [rf"{num(gy)}\times(1 - ({num(y)}/{cap:g})^2) = {num(value)}"],
            value,
        )

    def _head(self, index) -> Part:
        """The head's input: Σ_v ∂L/∂logit_v W_U[i, v]."""
        t, c = index
        raw = "hook_logits_uncapped" if self.cfg.final_softcap is not None else "hook_logits"
        lines, value = written_sum(
            list(zip(self.grad(raw)[t].tolist(), self.weight("W_U")[c].tolist())), g(raw, f"{t},v"), rf"W_U[{c},v]"
        )
        return Part("back through the unembedding W_U", lines, value)

    def _z(self, index, i: int) -> list[Part]:
        h, t, e = index
        lines, value = written_sum(
            list(
                zip(self.grad(f"blocks.{i}.attn.hook_result")[h, t].tolist(), self.weight(f"blocks.{i}.attn.W_O")[h, e].tolist())
            ),
            g("hook_result", f"{h},{t},d"),
            rf"W_O[{h},{e},d]",
        )
        return [Part("back through W_O", lines, value)]

    def _pattern(self, index, i: int) -> list[Part]:
        h, t, s = index
        v = self.a(f"blocks.{i}.attn.hook_v")[self.cfg.kv_head(h), s]
        lines, value = written_sum(
            list(zip(self.grad(f"blocks.{i}.attn.hook_z")[h, t].tolist(), v.tolist())),
            g("hook_z", f"{h},{t},e"),
            rf"v_{{{self.cfg.kv_head(h)},{s},e}}",
        )
        return [Part("z = pattern · v", lines, value)]

    def _softmax(self, index, i: int) -> list[Part]:
        h, t, s = index
        A = [float(x) for x in self.a(f"blocks.{i}.attn.hook_pattern")[h, t]]
        dA = [float(x) for x in self.grad(f"blocks.{i}.attn.hook_pattern")[h, t]]
        inner = math.fsum(x * y for x, y in zip(A, dA))
        value = A[s] * (dA[s] - inner)
        lines = [
            rf"\textstyle\sum_j A_{{{t},j}}\,\partial A_{{{t},j}} = {num(inner)}",
            rf"A_{{{t},{s}}}(\partial A_{{{t},{s}}} - {num(inner)}) = {num(A[s])}\times({num(dA[s])} - {num(inner)})"
            rf" = {num(value)}",
        ]
        return [Part("back through the softmax", lines, value)]

    def _mask(self, index, i: int) -> list[Part]:
        hidden = self.a(f"blocks.{i}.attn.hook_scores_masked")[index] == -math.inf
        if hidden:
            return [Part("the mask set this score to −∞", [r"\text{a hidden key passes no gradient: } 0"], 0.0)]
        return [self._identity(f"blocks.{i}.attn.hook_scores_masked", index, "a visible key: the mask passes it on")]

    def _score_gradient(self, i: int) -> Sliced:
        name = "hook_scores_uncapped" if self.cfg.attn_softcap is not None else "hook_scores"
        return self.grad(f"blocks.{i}.attn.{name}")

    def _attention(self, i: int) -> Attention:
        return cast(Block, self.model.blocks[i]).attn  # an nn.ModuleList's items are typed as any Module

    def _used(self, i: int, which: str) -> str:
        """The q (or k) the scores multiply: after QK-norm and RoPE where the model has them."""
        p = f"blocks.{i}.attn."
        if self.cfg.positional == "rope":
            return p + ROTATED[which]
        return p + f"{which}_norm.hook_out" if self.cfg.qk_norm else p + f"hook_{which}"

    def _scaled(self, lines: list[str], value: float, i: int, what: str) -> Part:
        scale = self._attention(i).scale
        lines.append(rf"\times\ \text{{scale}}\ {num(scale)} = {num(value * scale)}")
        return Part(what, lines, value * scale)

    def _query_or_key(self, i: int, which: str, index) -> Part:
        """∂L/∂q = scale Σ_s ∂L/∂score k_s; ∂L/∂k = scale Σ over the heads sharing it and the queries."""
        cfg, gS = self.cfg, self._score_gradient(i)
        if which == "q":
            h, t, e = index
            k = self.a(self._used(i, "k"))[cfg.kv_head(h), :, e]
            lines, value = written_sum(
                list(zip(gS[h, t].tolist(), k.tolist())), g("scores", f"{h},{t},s"), rf"k_{{{cfg.kv_head(h)},s,{e}}}"
            )
            return self._scaled(lines, value, i, "scores = q · kᵀ × scale")
        kv, s, e = index
        heads = [h for h in range(cfg.n_heads) if cfg.kv_head(h) == kv]
        pairs = list(zip(gS[heads, :, s].ravel().tolist(), self.a(self._used(i, "q"))[heads, :, e].ravel().tolist()))
        lines, value = written_sum(pairs, g("scores", f"h,t,{s}"), rf"q_{{h,t,{e}}}")
        return self._scaled(lines, value, i, "scores = q · kᵀ × scale, over the heads that share this key")

    def _rope_back(self, i: int, which: str, index) -> Part:
        """Back through the rotation of pairs (j, j + half): the inverse rotation."""
        head, t, c = index
        rot = self.grad(f"blocks.{i}.attn." + ROTATED[which])[head, t]
        attn = self._attention(i)
        # the angles exactly as the forward pass computed them (in the model's precision)
        cos, sin = (
            x.to(torch.float64).cpu().numpy()[t] for x in rope_angles(attn.inv_freq, 0, len(self.trace.tokens), attn.W_Q.dtype)
        )
        dim = self.cfg.rotary_dim
        assert dim is not None, "ModelConfig sets it for RoPE"
        half = dim // 2
        if c >= dim:
            value = float(rot[c])
            return Part("past the rotary dimensions: unrotated", [rf"{num(value)}"], value)
        if c < half:
            a, b = float(rot[c]) * float(cos[c]), float(rot[c + half]) * float(sin[c + half])
            value = a + b
            line = (
                rf"g_{{{c}}}\cos\theta + g_{{{c + half}}}\sin\theta = {num(float(rot[c]))}\times{num(float(cos[c]))} + "
                rf"{num(float(rot[c + half]))}\times{num(float(sin[c + half]))} = {num(value)}"
            )
        else:
            a, b = float(rot[c]) * float(cos[c]), float(rot[c - half]) * float(sin[c - half])
            value = a - b
            line = (
                rf"g_{{{c}}}\cos\theta - g_{{{c - half}}}\sin\theta = {num(float(rot[c]))}\times{num(float(cos[c]))} - "
                rf"{num(float(rot[c - half]))}\times{num(float(sin[c - half]))} = {num(value)}"
            )
        return Part(f"back through RoPE at position {t} (the inverse rotation)", [line], value)

    def _values(self, index, i: int) -> list[Part]:
        cfg = self.cfg
        kv, s, e = index
        heads = [h for h in range(cfg.n_heads) if cfg.kv_head(h) == kv]
        pairs = list(
            zip(
                self.a(f"blocks.{i}.attn.hook_pattern")[heads, :, s].ravel().tolist(),
                self.grad(f"blocks.{i}.attn.hook_z")[heads, :, e].ravel().tolist(),
            )
        )
        lines, value = written_sum(pairs, rf"A_{{h,t,{s}}}", g("hook_z", f"h,t,{e}"))
        return [Part("z = pattern · v, over the heads that share this value", lines, value)]

    def _attention_input(self, index, i: int) -> list[Part]:
        t, c = index
        p, parts = f"blocks.{i}.attn.", []
        for which in "QKV":
            grads, W = self.grad(p + f"hook_{which.lower()}"), self.weight(p + f"W_{which}")
            pairs = list(zip(grads[:, t, :].ravel().tolist(), W[:, c, :].ravel().tolist()))
            lines, value = written_sum(pairs, g(f"hook_{which.lower()}", f"h,{t},e"), rf"W_{which}[h,{c},e]")
            parts.append(Part(f"back through W_{which}", lines, value))
        return parts

    def _post(self, i: int, out: str, index) -> Part:
        t, n = index
        out = f"blocks.{i}.{out}"
        lines, value = written_sum(
            list(zip(self.grad(out)[t].tolist(), self.weight(f"blocks.{i}.mlp.W_out")[n].tolist())),
            g(out, f"{t},d"),
            rf"W_{{out}}[{n},d]",
        )
        return Part("back through W_out", lines, value)

    def _times(self, product: str, other: str, index, what: str) -> Part:
        gp, o = float(self.grad(product)[index]), float(self.a(other)[index])
        value = gp * o
        return Part(
            what,
            [
                rf"{g(product, ','.join(map(str, index)))}\times {symbol(other)} = {num(gp)}\times{num(o)} = "
                rf"{num(value)}"
            ],
            value,
        )

    def _pre(self, index, i: int) -> list[Part]:
        p, cfg = f"blocks.{i}.mlp.", self.cfg
        upstream = p + ("hook_gate" if cfg.gated_mlp else "hook_post")
        x, gu = float(self.a(p + "hook_pre")[index]), float(self.grad(upstream)[index])
        formula, slope = derivative(cfg.activation, x)
        value = gu * slope
        return [
            Part(
                f"back through the {cfg.activation} at pre = {x:.4f}",
                [formula, rf"{num(gu)}\times{num(slope)} = {num(value)}"],
                value,
            )
        ]

    def _mlp_input(self, index, i: int) -> list[Part] | None:
        if self.cfg.is_moe(i):  # every expert and the router read it: not written out
            return None
        t, c = index
        p = f"blocks.{i}.mlp."
        paths = [("hook_pre", "W_gate" if self.cfg.gated_mlp else "W_in")]
        if self.cfg.gated_mlp:
            paths.append(("hook_linear", "W_in"))
        parts = []
        for grad_name, weight in paths:
            lines, value = written_sum(
                list(zip(self.grad(p + grad_name)[t].tolist(), self.weight(p + weight)[c].tolist())),
                g(grad_name, f"{t},n"),
                rf"{weight}[{c},n]".replace("_", r"\_"),
            )
            parts.append(Part(f"back through {weight}", lines, value))
        return parts


def gradient_arithmetic(model: Transformer, trace: Trace, name: str, index: tuple[int, ...]) -> Arithmetic | None:
    return GradientCells(model, trace).explain(name, index)
