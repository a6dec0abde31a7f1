"""The explorer's views, one module each: ``lit(ctx)`` names the pipeline parts the view is
about (lit on the strip above it), ``render(ctx)`` draws it."""

from glassbox.app.explore import (
    attention,
    backward,
    circuits,
    compare,
    export,
    features,
    ffn,
    graph,
    heads,
    layernorm,
    overview,
    residual,
    tokens,
    why,
)

VIEWS = {
    "Overview": overview,
    "Tokens & embeddings": tokens,
    "Attention": attention,
    "LayerNorm": layernorm,
    "MLP": ffn,
    "Residual stream": residual,
    "Backward": backward,
    "Ask why": why,
    "Circuits": circuits,
    "Head catalog": heads,
    "Features": features,
    "Attribution graph": graph,
    "Compare": compare,
    "Export": export,
}
RENAMED_VIEWS = {"FFN": "MLP"}  # older links' names: one word for the MLP everywhere (the article's FFN)
