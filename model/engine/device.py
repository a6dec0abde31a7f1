"""Where the engine computes (the GPU when there is one), in which precision, and the one way
its tensors cross to the CPU as numpy arrays."""

import numpy as np
import torch

# Precisions a model can be loaded in. The half precisions halve a big model's memory; the
# engine then computes norms, softmaxes and log-probabilities in float32, as transformers does.
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
HALF = (torch.bfloat16, torch.float16)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def widened(tensor: torch.Tensor) -> torch.Tensor:
    """float32 for a half-precision tensor (what transformers computes norms, softmaxes and
    log-probabilities in), else the tensor itself."""
    return tensor.float() if tensor.dtype in HALF else tensor


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor on the CPU as a numpy array, its values unchanged: bfloat16 (which numpy lacks)
    becomes float32, which holds every bfloat16 value exactly."""
    tensor = tensor.detach().cpu()
    return (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
