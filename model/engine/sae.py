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

ARCHITECTURES = (
    "standard",
    "jumprelu",
    "topk",
    "transcoder",
    "skip_transcoder",
    "jumprelu_transcoder",
    "jumprelu_skip_transcoder",
)
NORMALIZATIONS = ("none", "constant_norm_rescale", "layer_norm")
AXES = {
    "W_enc": ("d_in", "d_sae"),
    "W_dec": ("d_sae", "d_out"),
    "b_enc": ("d_sae",),
    "b_dec": ("d_out",),
    "threshold": ("d_sae",),
    "W_skip": ("d_out", "d_in"),
}  # each weight's shape; d_out is d_in but for a transcoder


def weight_names(architecture: str) -> set[str]:
    """The weights an SAE of ``architecture`` has: no more, no fewer (SAELens's state dict)."""
    return (
        {"W_enc", "b_enc", "W_dec", "b_dec"}
        | ({"threshold"} if "jumprelu" in architecture else set())
        | ({"W_skip"} if "skip" in architecture else set())
    )


def whole(value) -> bool:
    """An int that is not a bool (JSON's true is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_weights(
    architecture: str, shapes: dict[str, tuple[int, ...]], k=None, stated: dict[str, int | None] | None = None, label: str = ""
) -> dict[str, int]:
    """d_in, d_sae and d_out of an SAE of ``architecture`` whose weights have ``shapes`` (read from
    a file's header before any weight is, or from the tensors); a GlassboxError naming the weight
    or setting that is wrong: an unknown architecture, a weight missing or one it does not use, a
    rank or a width that disagrees with W_enc (d_in × d_sae), W_dec (d_sae × d_out) or the sizes
    its config ``stated``, a width of 0, or TopK's ``k`` not a whole number from 1 to d_sae."""
    where = f"{label}: " if label else ""
    if architecture not in ARCHITECTURES:
        raise GlassboxError(f"{where}architecture must be one of {', '.join(ARCHITECTURES)}, not {architecture!r}")
    transcoder = "transcoder" in architecture
    wanted = weight_names(architecture)
    missing, unused = sorted(wanted - set(shapes)), sorted(set(shapes) - wanted)
    if missing:
        raise GlassboxError(f"{where}its weights lack {', '.join(missing)} (a {architecture} SAE's)")
    if unused:
        raise GlassboxError(f"{where}its weights hold {', '.join(unused)}, which a {architecture} SAE does not use")

    def axes(key: str) -> tuple[str, ...]:
        return AXES[key] if transcoder else tuple(a.replace("d_out", "d_in") for a in AXES[key])

    for key in ("W_enc", "W_dec"):
        if len(shapes[key]) != 2:
            raise GlassboxError(f"{where}{key} has shape {list(shapes[key])} but must be a matrix, {' × '.join(axes(key))}")
    sizes = {
        "d_in": shapes["W_enc"][0],
        "d_sae": shapes["W_enc"][1],
        "d_out": shapes["W_dec"][1] if transcoder else shapes["W_enc"][0],
    }
    for axis, size in (stated or {}).items():
        if size is not None and size != sizes[axis]:
            key = "W_dec" if axis == "d_out" else "W_enc"
            raise GlassboxError(f"{where}{key} has shape {list(shapes[key])}, but its config says {axis} = {size}")
    if min(sizes.values()) < 1:
        raise GlassboxError(
            f"{where}W_enc and W_dec have shapes {list(shapes['W_enc'])} and {list(shapes['W_dec'])}: "
            "d_in, d_sae and d_out must be above 0"
        )
    for key, names in AXES.items():
        want = [sizes[a] for a in names]
        if key in shapes and list(shapes[key]) != want:
            raise GlassboxError(f"{where}{key} has shape {list(shapes[key])} but must be {' × '.join(axes(key))} = {want}")
    if architecture == "topk" and not (whole(k) and 1 <= k <= sizes["d_sae"]):
        raise GlassboxError(f"{where}a TopK SAE's k must be a whole number from 1 to d_sae ({sizes['d_sae']}), not {k!r}")
    return sizes


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

    def __post_init__(self):  # shapes only: cheap, so every SAE built anywhere is a consistent one
        if self.normalize_activations not in NORMALIZATIONS:
            raise GlassboxError(
                f"{self.name or 'the SAE'}: normalize_activations must be one of "
                f"{', '.join(NORMALIZATIONS)}, not {self.normalize_activations!r}"
            )
        check_weights(
            self.architecture,
            {key: tuple(getattr(self, key).shape) for key in AXES if getattr(self, key) is not None},
            self.k,
            label=self.name,
        )

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
        return sum(
            t.numel() * t.element_size()
            for t in (self.W_enc, self.b_enc, self.W_dec, self.b_dec, self.threshold, self.W_skip)
            if t is not None
        )

    def to(self, dtype: torch.dtype, device: torch.device | str) -> SparseAutoencoder:
        """The same SAE with its tensors in ``dtype`` on ``device`` (the model's)."""

        def moved(t):
            return None if t is None else t.to(device=device, dtype=dtype)

        return replace(
            self,
            W_enc=moved(self.W_enc),
            b_enc=moved(self.b_enc),
            W_dec=moved(self.W_dec),
            b_dec=moved(self.b_dec),
            threshold=moved(self.threshold),
            W_skip=moved(self.W_skip),
        )

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
            coefficient = self.d_in**0.5 / x.norm(dim=-1, keepdim=True)
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
            assert self.k is not None, "check_weights gives a TopK SAE its k"
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
