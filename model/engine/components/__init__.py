"""The transformer's parts, one per file, each reading like the math it computes."""

from model.engine.components.attention import Attention
from model.engine.components.block import Block
from model.engine.components.mlp import MLP
from model.engine.components.moe import MoE
from model.engine.components.norm import Norm

__all__ = ["Attention", "Block", "MLP", "MoE", "Norm"]
