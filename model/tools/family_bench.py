"""``glassbox bench --families``: each curated hub model's shape, built here with random weights
at its real sizes, opened by Glassbox like a download, traced and generated on this machine.

For each model (in processes of its own, so that one model's peak memory does not hide
another's, and building it does not count towards the peak): transformers builds the model class from the hub config.json the catalog carries
(random weights, stored in the hub's dtype) and saves it beside a small tokenizer; then
Glassbox loads that directory (float32), traces a 128-token prompt with every activation and
every gradient captured, and generates 16 tokens with the KV cache. Reported: load time, trace
time, generation speed, the bytes the trace holds and the process's peak resident memory.
Each family is built with its own transformers class (AUTO_CLASSES): an encoder (BERT,
BertForMaskedLM) is traced with its default masked-LM loss and generates nothing ("n/a"); an
encoder-decoder (T5, T5ForConditionalGeneration) is traced on a 128-token source and a 128-token
target (teacher forcing) and generates 16 tokens from a 32-token source.
Needs transformers (a test and benchmark dependency). Nothing is downloaded. A model too large
for this machine's memory (OLMoE-1B-7B: 6.9B parameters, ~83 GB here) is benched with fewer of
its blocks, each of its real shape, and the row says so.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

N_TOKENS, N_NEW = 128, 16
# float32 weights, their gradients in the full trace, and the hub-dtype copy while loading
BYTES_PER_PARAMETER = 12
MEMORY_SHARE = 0.6  # of this machine's memory a bench may plan to use
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")  # config.json's block count, by family
# the transformers class each model_type is built with (else AutoModelForCausalLM)
AUTO_CLASSES = {"bert": "AutoModelForMaskedLM", "t5": "AutoModelForSeq2SeqLM"}


def auto_class(model_type: str):
    """transformers' Auto class for a config.json's model_type: masked-LM, seq2seq or causal-LM."""
    import transformers

    return getattr(transformers, AUTO_CLASSES.get(model_type, "AutoModelForCausalLM"))


def memory_bytes() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parameters(config: dict) -> int:
    """A hub config.json's parameter count, as the loader counts it (meta device)."""
    from glassbox.model.io.checkpoint import count_numbers
    from glassbox.model.io.convert import CONVERTERS

    return count_numbers(CONVERTERS[config["model_type"]].config(config))


def fitted(config: dict, memory: int) -> tuple[dict, str | None]:
    """``config`` where its model fits ``memory`` when benched, else the same with as many of its
    blocks as fit (at least one), and the reason in words."""
    key = next(k for k in LAYER_KEYS if k in config)
    total, layers = parameters(config), config[key]
    if total * BYTES_PER_PARAMETER <= memory * MEMORY_SHARE or layers == 1:
        return config, None
    one = parameters(dict(config, **{key: 1}))
    per_block = (total - one) / (layers - 1)  # every block has the same shape
    outside = one - per_block  # the embeddings, the head, the final norm
    keep = max(1, min(layers - 1, int((memory * MEMORY_SHARE / BYTES_PER_PARAMETER - outside) // per_block)))
    smaller = dict(config, **{key: keep})
    if "layer_types" in config:
        smaller["layer_types"] = config["layer_types"][:keep]
    why = (
        f"{total / 1e9:.1f}B parameters need about {total * BYTES_PER_PARAMETER / 1e9:.0f} GB here, over "
        f"{MEMORY_SHARE:.0%} of this machine's {memory / 1e9:.0f} GB: benched with {keep} of its {layers} blocks "
        f"({parameters(smaller) / 1e9:.2f}B parameters)"
    )
    return smaller, why


def build(hub_id: str, path: Path) -> None:
    """The curated model's hub layout with random weights (fitted to this machine's memory)."""
    from glassbox.model.io.catalog import entry

    config, _ = fitted(dict(entry(hub_id).config), memory_bytes())
    write(config, path)


def write(config: dict, path: Path) -> None:
    """A hub layout with random weights for ``config`` (a config.json): config.json,
    model.safetensors (in its torch_dtype), tokenizer.json."""
    import torch
    import transformers

    from glassbox.model.engine.device import DTYPES

    dtype = DTYPES[config.get("torch_dtype", "float32")]
    hf_config = transformers.AutoConfig.for_model(**config)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = auto_class(config["model_type"]).from_config(hf_config, dtype=dtype)
    model.save_pretrained(str(path))
    del model
    build_tokenizer(path)


def build_tokenizer(path) -> None:
    """A small byte-level BPE's tokenizer.json in ``path``: random-weight models need some tokenizer."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["a few words to train a byte-level tokenizer on"] * 4, vocab_size=300)
    bpe._tokenizer.save(str(Path(path) / "tokenizer.json"))


def measure(hub_id: str, path: Path) -> dict:
    """Glassbox's side, in a fresh process: load ``path`` (built by ``build``), trace, generate.
    An encoder-decoder's trace reads a source and a target of N_TOKENS each; an encoder generates
    nothing (``generate_tokens_per_s`` None)."""
    import torch

    from glassbox.model.engine import run_seq2seq_trace, run_trace
    from glassbox.model.engine.sampling import Sampling, generate
    from glassbox.model.io.checkpoint import load
    from glassbox.model.serving import trace_bytes

    disk = sum(f.stat().st_size for f in path.iterdir())
    started = time.perf_counter()
    loaded = load(str(path), dtype="float32", device="cpu")
    load_s = time.perf_counter() - started
    kind = loaded.cfg.kind
    draw = torch.randint(0, loaded.tokenizer.vocab_size, (2 * N_TOKENS,), generator=torch.Generator().manual_seed(0))
    tokens, target = [int(t) for t in draw[:N_TOKENS]], [int(t) for t in draw[N_TOKENS:]]
    started = time.perf_counter()
    if kind == "encoder-decoder":
        trace = run_seq2seq_trace(loaded.model, tokens, target, backward=True)
    else:
        trace = run_trace(loaded.model, tokens, backward=True)
    trace_s = time.perf_counter() - started
    held_bytes = trace_bytes(trace)
    n_names = len(trace.activations) + len(trace.grads)
    del trace
    tokens_per_s = None
    if kind != "encoder":  # an encoder sees every position at once: nothing to generate
        prompt = loaded.tokenizer.decode(tokens[:32])
        started = time.perf_counter()
        generated = list(generate(loaded, prompt, N_NEW, Sampling(temperature=0)))
        tokens_per_s = len(generated) / (time.perf_counter() - started)
    return {
        "model": hub_id,
        "kind": kind,
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "stored_bytes": disk,
        "load_s": load_s,
        "trace_s": trace_s,
        "trace_tensors": n_names,
        "trace_bytes": held_bytes,
        "generate_tokens_per_s": tokens_per_s,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def row(r: dict) -> str:
    """One model's line of the report, from ``measure``'s numbers."""
    speed = "n/a (encoder)" if r["generate_tokens_per_s"] is None else f"{r['generate_tokens_per_s']:.1f}"
    return (
        f"{r['model']:<30} {r['parameters'] / 1e6:>7.0f}M {r['load_s']:>7.1f} {r['trace_s']:>8.1f} "
        f"{r['trace_bytes'] / 1e9:>9.2f} {speed:>13} {r['peak_rss_bytes'] / 1e9:>8.2f}"
    )


def run(models: list[str] | None = None, json_path: Path | None = None) -> int:
    from glassbox.model.io.catalog import curated, entry

    results = []
    print(
        f"each curated model's shape, random weights, float32 on the CPU: load, a {N_TOKENS}-token trace with "
        f"every activation and gradient (an encoder-decoder: {N_TOKENS} source and {N_TOKENS} target tokens), "
        f"{N_NEW} greedy tokens"
    )
    header = f"{'model':<30} {'params':>8} {'load s':>7} {'trace s':>8} {'trace GB':>9} {'gen tok/s':>13} {'peak GB':>8}"
    print(header)
    for hub_id in models or [m.hub_id for m in curated()]:
        _, why = fitted(entry(hub_id).config, memory_bytes())
        if why:
            print(f"{hub_id:<30} {why}")
        with tempfile.TemporaryDirectory() as folder:
            done = subprocess.run(
                [sys.executable, "-m", "glassbox.model.tools.family_bench", "build", hub_id, folder],
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                done = subprocess.run(
                    [sys.executable, "-m", "glassbox.model.tools.family_bench", "measure", hub_id, folder],
                    capture_output=True,
                    text=True,
                )
        if done.returncode != 0:
            print(f"{hub_id:<30} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(r)
        print(row(r))
    if json_path:
        from glassbox.model.engine.files import write_text

        write_text(json_path, json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":  # the two halves, each in a process of its own
    step, hub_id, folder = sys.argv[1:4]
    if step == "build":
        build(hub_id, Path(folder))
    else:
        print(json.dumps(measure(hub_id, Path(folder))))
