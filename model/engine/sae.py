"""A sparse autoencoder (or transcoder) over one of the model's tensors, as SAELens defines it.

An SAE reads a tensor at ``reads`` (``blocks.8.hook_resid_pre``) and writes its
reconstruction for ``writes`` (the same tensor; a transcoder reads an MLP's input and
predicts its output, ``blocks.8.hook_mlp_out``):

    x' = normalised(x) − b_dec            (b_dec only where apply_b_dec_to_input; not a transcoder)
    h  = x' · W_enc + b_enc               (the pre-activations, one per feature)
    a  = ReLU(h)                          "standard"
         ReLU(h) · [h > threshold]        "jumprelu"
         ReLU of the k largest h, else 0  "topk" (h × ‖W_dec[f]‖ first where rescale_acts_by_decoder_norm)
    x̂  = a · W_dec + b_dec  (+ x · W_skipᵀ for a skip transcoder), then un-normalised

Each step is SAELens's own (sae_lens.saes.*: encode, decode, process_sae_in); the tests
compare with its classes on the same weights. Two things SAELens leaves to the model it runs,
done here so that the numbers are those the SAE was trained on:

- ``center_input``: SAEs trained on TransformerLens's processed GPT-2 (``center_writing_weights``,
  e.g. gpt2-small-res-jb) saw a residual stream with its mean over d_model removed; Glassbox's
  stream is the checkpoint's own, so the mean is removed before encoding and put back on the
  reconstruction (a LayerNorm reads the stream without its mean, so downstream nothing else changes).
- ``hook_z``: TransformerLens's z is position × head × d_head and SAELens flattens heads last;
  Glassbox's is head × position × d_head, so it is transposed first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from glassbox.model.engine import GlassboxError

ARCHITECTURES = ("standard", "jumprelu", "topk", "transcoder", "skip_transcoder", "jumprelu_transcoder",
                 "jumprelu_skip_transcoder")
NORMALIZATIONS = ("none", "constant_norm_rescale", "layer_norm")


@dataclass(frozen=True)
class SparseAutoencoder:
    architecture: str  # one of ARCHITECTURES
    reads: str  # the tensor it reads (a Glassbox name)
    writes: str  # the tensor it reconstructs or predicts (reads but for a transcoder)
    W_enc: torch.Tensor  # d_in × d_sae
    b_enc: torch.Tensor  # d_sae
    W_dec: torch.Tensor  # d_sae × d_out
    b_dec: torch.Tensor  # d_out
    threshold: torch.Tensor | None = None  # d_sae, JumpReLU's
    W_skip: torch.Tensor | None = None  # d_out × d_in, a skip transcoder's
    k: int | None = None  # TopK's
    rescale_acts_by_decoder_norm: bool = False  # TopK's
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"  # one of NORMALIZATIONS
    center_input: bool = False  # see the module's docstring
    name: str = ""  # where it came from, for labels

    @property
    def d_in(self) -> int:
        return self.W_enc.shape[0]

    @property
    def d_sae(self) -> int:
        return self.W_enc.shape[1]

    @property
    def transcoder(self) -> bool:
        return "transcoder" in self.architecture

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.W_enc, self.b_enc, self.W_dec, self.b_dec,
                                                           self.threshold, self.W_skip) if t is not None)

    def to(self, dtype: torch.dtype, device: torch.device | str) -> "SparseAutoencoder":
        """The same SAE with its tensors in ``dtype`` on ``device`` (the model's)."""
        def moved(t):
            return None if t is None else t.to(device=device, dtype=dtype)
        return replace(self, W_enc=moved(self.W_enc), b_enc=moved(self.b_enc), W_dec=moved(self.W_dec),
                       b_dec=moved(self.b_dec), threshold=moved(self.threshold), W_skip=moved(self.W_skip))

    # --- the tensor as Glassbox holds it ⇄ the SAE's input rows (position × d_in) ---
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """``reads``'s tensor of one sequence (a trace's shape) as position × d_in."""
        return _as_rows(x, self.reads)

    def out_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``writes``'s tensor of one sequence as position × d_out (what ``decode`` predicts)."""
        return _as_rows(x, self.writes)

    def unrows(self, rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """position × d_out rows back in ``writes``'s shape (``like``)."""
        if self.writes.endswith("attn.hook_z"):
            return rows.reshape(like.shape[1], like.shape[0], like.shape[2]).transpose(0, 1)
        return rows

    # --- SAELens's encode and decode, on rows ---
    def _normalise(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """(x as the SAE reads it, what un-normalising its output needs)."""
        mean = x.mean(-1, keepdim=True) if self.center_input else torch.zeros_like(x[..., :1])
        x = x - mean
        if self.transcoder or self.normalize_activations == "none":
            return x, (mean, None, None)
        if self.normalize_activations == "constant_norm_rescale":
            coefficient = self.d_in ** 0.5 / x.norm(dim=-1, keepdim=True)
            return x * coefficient, (mean, coefficient, None)
        mu = x.mean(-1, keepdim=True)  # layer_norm, SAELens's: (x − μ) / (σ + 1e-5), σ with Bessel's correction
        std = (x - mu).std(dim=-1, keepdim=True)
        return (x - mu) / (std + 1e-5), (mean, std, mu)

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """h, position × d_sae, for input rows ``x`` (position × d_in)."""
        x, _ = self._normalise(x)
        if self.apply_b_dec_to_input and not self.transcoder:
            x = x - self.b_dec
        h = x @ self.W_enc + self.b_enc
        if self.architecture == "topk" and self.rescale_acts_by_decoder_norm:
            h = h * self.W_dec.norm(dim=-1)
        return h

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations a, position × d_sae."""
        h = self.pre_activations(x)
        if self.architecture == "topk":
            values, ids = h.topk(min(self.k, h.shape[-1]), dim=-1)
            return torch.zeros_like(h).scatter(-1, ids, values.relu())
        a = h.relu()
        if self.threshold is not None:
            a = a * (h > self.threshold).to(a.dtype)
        return a

    def decoder_rows(self) -> torch.Tensor:
        """What one unit of each feature's activation adds to the output (d_sae × d_out)."""
        if self.architecture == "topk" and self.rescale_acts_by_decoder_norm:
            return self.W_dec / self.W_dec.norm(dim=-1, keepdim=True)
        return self.W_dec

    def decode(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction (a transcoder: its prediction) of ``writes``'s rows, from the
        activations ``a`` of input rows ``x`` (un-normalising and the skip need ``x``)."""
        out = a @ self.decoder_rows() + self.b_dec
        _, (mean, scale, mu) = self._normalise(x)
        if self.normalize_activations == "constant_norm_rescale" and not self.transcoder:
            out = out / scale
        elif self.normalize_activations == "layer_norm" and not self.transcoder:
            out = out * scale + mu
        if self.W_skip is not None:
            out = out + x @ self.W_skip.T
        return out + (mean if not self.transcoder else 0)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction of input rows ``x``."""
        return self.decode(self.encode(x), x)

    def check_feature(self, feature: int) -> None:
        if not 0 <= feature < self.d_sae:
            raise GlassboxError(f"feature must be from 0 to {self.d_sae - 1}, not {feature}")


def _as_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """A tensor named ``name`` as position × width: hook_z's head × position × d_head flattened
    heads-last, as SAELens flattens TransformerLens's position × head × d_head."""
    return x.transpose(0, 1).reshape(x.shape[1], -1) if name.endswith("attn.hook_z") else x
