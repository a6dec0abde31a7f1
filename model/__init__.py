"""Glassbox's transformer engine: model, capture, traces, checkpoints, CLI (`python -m model`)."""

import os

# Traces allocate gigabytes of fresh memory per call on big models; in 2 MiB huge pages the
# kernel maps it ~500x fewer times, which `python -m model bench` shows is most of the traced
# backward's overhead on CPU. Read by PyTorch's CPU allocator at its first large allocation.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
