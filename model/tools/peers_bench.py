"""``glassbox bench --peers``: Glassbox beside transformers on the same weights, in one process.

A GPT-2-small-shaped GPT2LMHeadModel with random weights is saved and opened by Glassbox, so both
run exactly the same numbers (float32, this machine's default device). Per length, interleaved run
by run, medians after one warm-up: transformers' forward (eager attention, the floor a capture
tool is measured against), Glassbox's plain forward, its full capture (every activation) and its
traced forward+backward (every activation and gradient). Then greedy generation of 64 tokens by
transformers' ``generate`` and by Glassbox's ``generate`` (which also reports each step's full
distribution before and after the settings); the tokens must be the same.

With ``transformer_lens`` installed (an optional dependency: ``pip install transformer-lens``), two
more rows per length on the same weights: TransformerLens 4's ``TransformerBridge`` around a copy
of the transformers model, its ``run_with_cache`` (every hook point, under ``no_grad``) and
``run_with_cache(incl_bwd=True)`` on the loss (every hook point's gradient too). Glassbox's
capture and traced rows are then also given as multiples of these. Without it the report says
so rather than guess.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import tempfile

import torch

N_NEW = 64


def run(lengths: list[int], repeats: int, small: bool) -> int:
    import transformers

    from glassbox.model.engine import default_device, run_trace
    from glassbox.model.engine.sampling import Sampling, generate
    from glassbox.model.io.checkpoint import load
    from glassbox.model.tools.family_bench import build_tokenizer
    from glassbox.model.tools.timing import median_ms

    device = default_device()
    sizes = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=300, n_positions=256) if small else {}
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**sizes, attn_implementation="eager")).eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        build_tokenizer(folder)
        loaded = load(folder, dtype="float32", device=device)
        hf = hf.to(device)
        bridge = _transformer_lens(hf, folder) if importlib.util.find_spec("transformer_lens") else None
    model = loaded.model
    print(
        f"peers    transformers {transformers.__version__} GPT2LMHeadModel (eager) and Glassbox on the same "
        f"weights, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {device}"
    )
    if bridge is None:
        print("         TransformerLens is not installed: no TransformerLens rows (pip install transformer-lens)")
    else:
        print(
            f"         TransformerLens {importlib.metadata.version('transformer_lens')} TransformerBridge around a copy "
            "of the same model"
        )
    for length in lengths:
        tokens = torch.randint(loaded.cfg.vocab_size, (length,), generator=torch.Generator().manual_seed(length)).tolist()
        ids = torch.tensor([tokens], device=device)

        def hf_forward():
            with torch.no_grad():
                return hf(ids).logits  # noqa: B023 (each length's functions are timed before the next length)

        def forward():
            with torch.no_grad():
                return model(ids).logits  # noqa: B023

        runs = {
            "transformers forward": hf_forward,
            "Glassbox forward": forward,
            "Glassbox full capture": lambda: run_trace(model, tokens),  # noqa: B023
            "Glassbox traced fwd+bwd": lambda: run_trace(model, tokens, backward=True),  # noqa: B023
        }
        if bridge is not None:
            runs |= {TL_CAPTURE: lambda: _tl_capture(bridge, ids), TL_TRACED: lambda: _tl_traced(bridge, ids)}  # noqa: B023
        ms = median_ms(runs, repeats, device)
        floor = ms["transformers forward"]
        print(f"\nT = {length}")
        for name, value in ms.items():
            peer = {"Glassbox full capture": TL_CAPTURE, "Glassbox traced fwd+bwd": TL_TRACED}.get(name)
            versus = f"   ÷ TransformerLens {value / ms[peer]:5.2f}" if peer in ms else ""
            print(f"  {name:<34} {value:9.1f} ms   ÷ transformers forward {value / floor:6.2f}{versus}")

    prompt_ids = torch.randint(loaded.cfg.vocab_size, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    prompt = loaded.tokenizer.decode(prompt_ids)
    prompt_ids = loaded.encode(prompt)
    ids = torch.tensor([prompt_ids], device=device)
    outputs = {}

    def hf_generate():
        outputs["hf"] = hf.generate(ids, max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False, pad_token_id=0)[
            0, len(prompt_ids) :
        ].tolist()

    def ours():
        outputs["glassbox"] = [t.token_id for t in generate(loaded, prompt, N_NEW, Sampling(temperature=0))]

    ms = median_ms({"transformers generate": hf_generate, "Glassbox generate": ours}, repeats, device)
    same = outputs["hf"] == outputs["glassbox"]
    print(f"\ngreedy generation of {N_NEW} tokens from a {len(prompt_ids)}-token prompt (same tokens: {same})")
    for name, value in ms.items():
        print(f"  {name:<34} {value:9.1f} ms   ÷ transformers generate {value / ms['transformers generate']:6.2f}")
    return 0 if same else 1


TL_CAPTURE, TL_TRACED = "TransformerLens run_with_cache", "TransformerLens run_with_cache+bwd"


def _transformer_lens(hf, folder: str):
    """TransformerLens's bridge around a copy of ``hf`` (the bridge wraps the modules it is given;
    the copy keeps the transformers rows plain)."""
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(folder, hf_model=copy.deepcopy(hf), device=hf.device)


def _tl_capture(bridge, ids):
    with torch.no_grad():
        return bridge.run_with_cache(ids)


def _tl_traced(bridge, ids):
    for param in bridge.parameters():
        param.grad = None
    return bridge.run_with_cache(ids, return_type="loss", incl_bwd=True)
