"""The transformer's parts, one per file, each reading like the math it computes."""

from glassbox.model.engine.components.attention import Attention
from glassbox.model.engine.components.block import Block
from glassbox.model.engine.components.mlp import MLP
from glassbox.model.engine.components.moe import MoE
from glassbox.model.engine.components.norm import Norm

__all__ = ["Attention", "Block", "MLP", "MoE", "Norm"]
