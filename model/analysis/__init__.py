"""What the explorer shows, computed from a trace and the model's weights.

Everything here is tensor math on the engine's own tensors (no Streamlit), so the UI only
selects and formats, and each quantity can be tested against an independent reference:
parameter counts per part, the embedding matrix's PCA and cosine neighbours, the positional
table, a head's Q·K dot product, norm and neuron summaries, each block's contribution to the
residual stream, the logit lens, the backward pass step by step, the gradient along the
residual stream, dead neurons, input saliency, and every weight gradient as the product it
is; also block means for drawing large arrays, and CSV/npz export.
"""

from glassbox.model.analysis.architecture import architecture
from glassbox.model.analysis.attention import Pair, attention_pair, per_head, scored
from glassbox.model.analysis.backward import (
    BackwardStep,
    backward_steps,
    gradient_norms,
    recomputed_weight_gradient,
    saliency,
    weight_gradient_product,
)
from glassbox.model.analysis.downsample import downsample, tile
from glassbox.model.analysis.embeddings import EmbeddingPCA, embedding_pca, length_correlation, nearest_tokens, positional_table
from glassbox.model.analysis.export import npz_bytes, to_csv
from glassbox.model.analysis.neurons import Dead, Neuron, active, dead_neurons, top_neurons
from glassbox.model.analysis.norms import norm_prefixes, norm_summary
from glassbox.model.analysis.parts import Part, parts
from glassbox.model.analysis.residual import Lens, contribution_norms, logit_lens, residual_points

__all__ = [
    "EmbeddingPCA",
    "BackwardStep",
    "Dead",
    "Lens",
    "Neuron",
    "Pair",
    "Part",
    "active",
    "architecture",
    "attention_pair",
    "per_head",
    "scored",
    "backward_steps",
    "contribution_norms",
    "dead_neurons",
    "downsample",
    "embedding_pca",
    "gradient_norms",
    "length_correlation",
    "logit_lens",
    "nearest_tokens",
    "norm_prefixes",
    "norm_summary",
    "npz_bytes",
    "parts",
    "positional_table",
    "recomputed_weight_gradient",
    "residual_points",
    "saliency",
    "tile",
    "to_csv",
    "top_neurons",
    "weight_gradient_product",
]
