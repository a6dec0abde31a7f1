"""Models split across devices, by Hugging Face accelerate.

A block is the unit that is never split (``no_split_module_classes=["Block"]``): accelerate's
``infer_auto_device_map`` fills the devices in order, block after block, then the CPU, then the
disk; ``dispatch_model`` puts each block's weights there and hooks the block's forward so that
its input moves to its device (the residual stream moves at block boundaries) and an offloaded
block's weights are read in for its forward and dropped after. The parts the model reads
outside a module's forward (the embedding, the positions, the head) stay whole on a real
device: the embedding with the first block, the final norm and the head with the last.

Nothing else changes: capture is per call, not per device, so each captured tensor stays on the
device that computed it; autograd follows the moves back. The one thing added is for
offloaded blocks: their weights exist only during their forward, so a hook reports each
weight, as the pass used it, to the active capture (``capture.used_parameter``), and a traced
backward takes its gradient with respect to that tensor. The hook is attached once, when the
model is placed, and does nothing outside a capture.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from typing import TypeVar

import torch

from glassbox.model.engine.capture import used_parameter
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.transformer import LanguageModel, Transformer

Model = TypeVar("Model", bound=LanguageModel)
BLOCK_CLASS = "Block"
# what the model reads outside any module's forward, kept with the first block or the last
FIRST_PARTS = ("embed", "pos_embed", "token_type_embed", "ln_embed", "W_pos_bias")
LAST_PARTS = ("ln_final", "unembed", "mlm")


def parts(model: Transformer) -> list[str]:
    """What a device map names: each part outside the blocks, then each block."""
    return (
        [n for n, _ in model.named_children() if n != "blocks"]
        + [n for n, _ in model.named_parameters(recurse=False)]
        + [f"blocks.{i}" for i in range(len(model.blocks))]
    )


@contextmanager
def quiet():
    """accelerate's warnings silenced: that a GPU named in a plan is not here, that offloaded
    weights are on the meta device (both what was asked for)."""
    loggers = [logging.getLogger(name) for name in ("accelerate.utils.modeling", "accelerate.big_modeling")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _accelerate():
    try:
        import accelerate
    except ImportError:
        raise GlassboxError("Splitting a model across devices needs accelerate: `pip install accelerate`") from None
    return accelerate


def plan(model: Transformer, max_memory: dict, dtype: torch.dtype | None = None) -> dict[str, str | int]:
    """Where each block goes (accelerate's ``infer_auto_device_map``, blocks never split, the
    devices filled in ``max_memory``'s order: GPUs, then "cpu", then "disk"), with the parts
    outside the blocks beside the first block or the last. ``model`` may be on the meta device."""
    accelerate = _accelerate()
    with quiet():  # a plan for GPUs this machine lacks is the point, not a warning
        inferred = accelerate.infer_auto_device_map(
            model, max_memory=max_memory, no_split_module_classes=[BLOCK_CLASS], dtype=dtype, clean_result=False
        )
    blocks = [f"blocks.{i}" for i in range(len(model.blocks))]
    placed = {block: _where(inferred, block) for block in blocks}
    # beside GPUs, the CPU's blocks are offloaded to the first GPU too: the parts read outside a
    # forward (which accelerate cannot offload) go on GPUs then
    gpus: list[str | int] = [d for d in placed.values() if isinstance(d, int)]
    real = gpus or [d for d in placed.values() if d != "disk"] or ["cpu"]
    first, last = real[0], real[-1]
    mapping: dict[str, str | int] = {}
    for name, _ in model.named_children():
        if name == "blocks":
            mapping.update(placed)
        else:
            mapping[name] = first if name in FIRST_PARTS else last
    for name, _ in model.named_parameters(recurse=False):
        mapping[name] = first if name in FIRST_PARTS else last
    return mapping


def _where(inferred: dict, module: str):
    """The device accelerate chose for ``module`` (or for the part of the model holding it)."""
    for name, device in inferred.items():
        if module == name or module.startswith(name + ".") or name == "":
            return device
    children = {d for name, d in inferred.items() if name.startswith(module + ".")}
    if len(children) != 1:
        raise GlassboxError(f"accelerate split {module} across {sorted(map(str, children))}: it must stay whole")
    return children.pop()


def device_map_for(model: LanguageModel, spec: str | dict, max_memory: dict | None = None) -> dict:
    """``spec`` as a full map: "auto", "balanced" (accelerate's ``get_balanced_memory`` first), or a
    map, checked to name every block and part once."""
    accelerate = _accelerate()
    if not isinstance(model, Transformer):  # an EncoderDecoder
        raise GlassboxError("Device maps split a decoder-only model's blocks; this model is an encoder-decoder")
    if isinstance(spec, dict):
        wanted = set(parts(model))
        if set(spec) != wanted:
            raise GlassboxError(
                f"A device map names each of {', '.join(sorted(wanted))} once; this one "
                f"lacks {sorted(wanted - set(spec))} and has {sorted(set(spec) - wanted)} besides"
            )
        return dict(spec)
    if spec not in ("auto", "balanced"):
        raise GlassboxError(f'device_map is "auto", "balanced" or a map of blocks to devices, not {spec!r}')
    dtype = next(model.parameters()).dtype
    memory = accelerate.utils.get_max_memory(max_memory)
    if spec == "balanced":
        memory = accelerate.utils.get_balanced_memory(model, memory, no_split_module_classes=[BLOCK_CLASS], dtype=dtype)
    return plan(model, {**memory, "disk": memory.get("disk", 1 << 60)}, dtype)


def dispatch(model: Model, device_map: dict[str, str | int], offload_dir: str | None = None) -> Model:
    """``model`` placed by ``device_map`` (blocks on GPUs, "cpu" or "disk"; the rest on real
    devices), with the reporting hook on every offloaded block."""
    accelerate = _accelerate()
    from accelerate.hooks import ModelHook, add_hook_to_module

    for name, device in device_map.items():
        if device == "disk" and not name.startswith("blocks."):
            raise GlassboxError(f"Only blocks can wait on the disk; {name} is read outside a block's forward")
        if device == "cpu" and not name.startswith("blocks.") and any(isinstance(d, int) for d in device_map.values()):
            raise GlassboxError(f"Beside a GPU only blocks can wait on the CPU; {name} is read outside a block's forward")
    # beside a GPU, accelerate offloads the CPU's blocks too: read in for their forward on the first GPU
    gpu = any(isinstance(d, int) or str(d).startswith("cuda") for d in device_map.values())
    offloaded = [name for name, device in device_map.items() if device == "disk" or (gpu and device == "cpu")]
    if offloaded and offload_dir is None:
        offload_dir = tempfile.mkdtemp(prefix="glassbox-offload-")
    first = next(d for n, d in device_map.items() if n in FIRST_PARTS or n.startswith("blocks."))
    # as accelerate spells it ("cpu", or a GPU index): it compares the main device with the string "cpu"
    with quiet():
        model = accelerate.dispatch_model(model, device_map, main_device=first, offload_dir=offload_dir)

    class ReportParameters(ModelHook):
        """After accelerate's hook has read a module's own weights in: each one, as this pass uses it."""

        def __init__(self, prefix: str):
            self.prefix = prefix

        def pre_forward(self, module, *args, **kwargs):
            for name, parameter in module.named_parameters(recurse=False):
                used_parameter(self.prefix + name, parameter)
            return args, kwargs

    # accelerate reads an offloaded block's weights in module by module (each module's own ones, at
    # its forward), so each such module reports its own
    for block in offloaded:
        for name, module in model.get_submodule(block).named_modules(prefix=block):
            if next(module.parameters(recurse=False), None) is not None:
                add_hook_to_module(module, ReportParameters(name + "."), append=True)
    model.device_map = dict(device_map)
    return model


def _device(device) -> torch.device:
    return torch.device(f"cuda:{device}" if isinstance(device, int) else device)


def placement(model: torch.nn.Module) -> dict[str, str] | None:
    """Where each part of a placed model lives ("blocks.3": "cuda:1", "disk"), or None for a
    model on one device."""
    mapping = getattr(model, "device_map", None)
    return None if mapping is None else {n: str(_device(d)) if d != "disk" else "disk" for n, d in mapping.items()}


def traced_plan(model: Transformer, gpus: int, gpu_bytes: int, cpu_bytes: int, n_tokens: int) -> tuple[dict, list[dict]]:
    """A map for a traced backward of ``n_tokens`` tokens on ``gpus`` GPUs of ``gpu_bytes`` (then
    the CPU, then the disk), and its memory_plan. accelerate sizes a block by its weights alone,
    so each device is offered its share for weights: its memory × weights ÷ (weights + their
    gradients + the trace), that ratio taken over the whole model; and no GPU more than an even
    share of the blocks' weights plus the largest block's, so that the blocks spread over every
    GPU (accelerate's own filling is greedy, device after device)."""
    full = memory_plan(model, dict.fromkeys(parts(model), "cpu"), n_tokens)[0]
    ratio = full["weights_bytes"] / (full["weights_bytes"] + full["gradient_bytes"] + full["trace_bytes"])
    size = next(model.parameters()).element_size()
    largest = max((sum(p.numel() for p in block.parameters()) * size for block in model.blocks), default=0)
    even = full["weights_bytes"] / max(gpus, 1) + largest
    memory: dict[int | str, int] = {i: int(min(gpu_bytes * ratio, even)) for i in range(gpus)}
    memory |= {"cpu": int(cpu_bytes * ratio), "disk": 1 << 60}
    for _ in range(4):  # the ratio is the model's mean; a device over its memory is offered less, and replanned
        mapping = plan(model, memory, next(model.parameters()).dtype)
        over = {
            int(r["device"].split(":")[1]): total(r) / gpu_bytes
            for r in memory_plan(model, mapping, n_tokens)
            if r["device"].startswith("cuda") and total(r) > gpu_bytes
        }
        if not over:
            break
        memory |= {i: int(memory[i] / share * 0.98) for i, share in over.items()}
    rows = memory_plan(model, mapping, n_tokens)
    for row in rows:
        row["capacity_bytes"] = gpu_bytes if row["device"].startswith("cuda") else cpu_bytes if row["device"] == "cpu" else None
        row["fits"] = row["capacity_bytes"] is None or total(row) <= row["capacity_bytes"]
    return mapping, rows


def total(row: dict) -> int:
    """A device's bytes in a memory_plan row: weights, their gradients and the trace."""
    return row["weights_bytes"] + row["gradient_bytes"] + row["trace_bytes"]


def memory_plan(model: Transformer, device_map: dict, n_tokens: int) -> list[dict]:
    """Per device, in order (GPUs, "cpu", "disk"): the blocks and parts it holds, their weights'
    bytes, their parameters' gradients' bytes (a traced backward keeps one per parameter, in the
    weights' dtype) and the bytes of a full trace of ``n_tokens`` tokens (every activation and its
    gradient) computed there, from the tensor registry's shapes (names.py), in the weights' dtype.
    ``model`` may be on the meta device."""
    from glassbox.model.engine.names import activation_names, shape

    cfg = model.cfg
    size = next(model.parameters()).element_size()
    rows: dict[str, dict] = {}

    def row(device) -> dict:
        key = str(_device(device)) if device != "disk" else "disk"
        return rows.setdefault(
            key, {"device": key, "blocks": [], "parts": [], "weights_bytes": 0, "gradient_bytes": 0, "trace_bytes": 0}
        )

    for name, device in device_map.items():
        try:
            numbers = sum(p.numel() for p in model.get_submodule(name).parameters())
        except AttributeError:  # a parameter of the model itself (T5's W_pos_bias)
            numbers = model.get_parameter(name).numel()
        r = row(device)
        if name.startswith("blocks."):
            r["blocks"].append(int(name.split(".")[1]))
        else:
            r["parts"].append(name)
        r["weights_bytes"] += numbers * size
        r["gradient_bytes"] += numbers * size
    first = next(d for n, d in device_map.items() if n in FIRST_PARTS)
    gpu = any(isinstance(d, int) for d in device_map.values())  # then the CPU's blocks are offloaded too
    last = next(d for n, d in device_map.items() if n in LAST_PARTS)
    for name in activation_names(cfg):
        device = (
            device_map[".".join(name.split(".")[:2])]
            if name.startswith("blocks.")
            else (
                last
                if name.startswith(("ln_final", "hook_logits", "hook_log_probs", "hook_probs", "hook_loss", "mlm", "unembed"))
                else first
            )
        )
        if device == "disk" or (device == "cpu" and gpu):  # offloaded: it computes on the first device
            device = first
        row(device)["trace_bytes"] += 2 * size * int(torch.tensor(shape(name, cfg, n_tokens)).prod())
    order = sorted(rows.values(), key=lambda r: (r["device"] == "disk", r["device"] == "cpu", r["device"]))
    return order


def summary(model: torch.nn.Module) -> str | None:
    """Where a placed model's blocks live, in words, counted from 1 as the pages count them
    ("blocks 1–6 on cuda:0, 7–12 on disk"), or None."""
    where = placement(model)
    if where is None:
        return None
    from glassbox.model.engine.names import block_runs

    devices: dict[str, list[int]] = {}
    for i in sorted(int(name.split(".")[1]) for name in where if name.startswith("blocks.")):
        devices.setdefault(where[f"blocks.{i}"], []).append(i)
    order = sorted(devices, key=lambda d: devices[d][0])
    return "blocks " + ", ".join(f"{block_runs(devices[d])} on {d}" for d in order)
