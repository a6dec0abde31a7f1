"""Where the engine computes: the GPU when there is one."""

import torch


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
