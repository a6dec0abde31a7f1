"""T5's relative position bias: a learned number per head for each bucket of distances, added to
every block's attention scores (computed once per stack, shared by its blocks).

With r = key position − query position and B buckets (the encoder, which looks both ways, gives
half of them to keys after the query and half to keys before; the decoder sees only r ≤ 0 and
uses all B for those), a distance n = |r| (decoder: max(−r, 0)) falls in
    bucket(n) = n                                                            if n < B'/2
              = min(B' − 1, B'/2 + ⌊log(n / (B'/2)) / log(max_distance / (B'/2)) · B'/2⌋)   otherwise
where B' is the buckets for one direction: exact small distances, then logarithmically wider
ones, every distance past max_distance in the last. The bias of head h is W_pos_bias[bucket, h].
(transformers' ``T5Attention._relative_position_bucket``, computed the same way, in float32.)
"""

from __future__ import annotations

import math

import torch


def relative_buckets(relative: torch.Tensor, bidirectional: bool, n_buckets: int, max_distance: int) -> torch.Tensor:
    """The bucket of each relative position r = key − query (a long tensor of any shape)."""
    offset = torch.zeros_like(relative)
    if bidirectional:  # half the buckets for keys after the query
        n_buckets //= 2
        offset = (relative > 0).long() * n_buckets
        distance = relative.abs()
    else:  # a causal decoder sees only keys at or before the query
        distance = (-relative).clamp(min=0)
    exact = n_buckets // 2
    logarithmic = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (n_buckets - exact)).long()
    logarithmic = logarithmic.clamp(max=n_buckets - 1)
    return offset + torch.where(distance < exact, distance, logarithmic)


def relative_bias(
    W_pos_bias: torch.Tensor, start: int, n_queries: int, n_keys: int, bidirectional: bool, max_distance: int
) -> torch.Tensor:
    """(heads, n_queries, n_keys): the bias on the scores of queries at positions start … start +
    n_queries − 1 over keys at 0 … n_keys − 1. ``W_pos_bias``: (buckets, heads)."""
    query = torch.arange(start, start + n_queries, device=W_pos_bias.device)[:, None]
    key = torch.arange(n_keys, device=W_pos_bias.device)[None, :]
    buckets = relative_buckets(key - query, bidirectional, W_pos_bias.shape[0], max_distance)
    return W_pos_bias[buckets].permute(2, 0, 1)
