"""``glassbox bench --peers``: Glassbox beside transformers on the same weights, in one process.

A GPT-2-small-shaped GPT2LMHeadModel with random weights is saved and opened by Glassbox, so both
run exactly the same numbers (float32, this machine's default device). Per length, interleaved run
by run, medians after one warm-up: transformers' forward (eager attention, the floor a capture
tool is measured against), Glassbox's plain forward, its full capture (every activation) and its
traced forward+backward (every activation and gradient). Then greedy generation of 64 tokens by
transformers' ``generate`` and by Glassbox's ``generate`` (which also reports each step's full
distribution before and after the settings); the tokens must be the same.

TransformerLens rows need ``transformer_lens``, an optional dependency not installed here; without
it the report says so rather than guess.
"""

from __future__ import annotations

import importlib.util
import tempfile

import torch

N_NEW = 64


def run(lengths: list[int], repeats: int, small: bool) -> int:
    import transformers

    from model.engine import default_device, run_trace
    from model.engine.sampling import Sampling, generate
    from model.io.checkpoint import load
    from model.tools.bench import median_ms
    from model.tools.family_bench import build_tokenizer

    device = default_device()
    sizes = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=300, n_positions=256) if small else {}
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**sizes, attn_implementation="eager")).eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        build_tokenizer(folder)
        loaded = load(folder, dtype="float32", device=device)
    hf = hf.to(device)
    model = loaded.model
    print(f"peers    transformers {transformers.__version__} GPT2LMHeadModel (eager) and Glassbox on the same "
          f"weights, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {device}")
    if importlib.util.find_spec("transformer_lens") is None:
        print("         TransformerLens is not installed: no TransformerLens rows (pip install transformer-lens)")
    for length in lengths:
        tokens = torch.randint(loaded.cfg.vocab_size, (length,), generator=torch.Generator().manual_seed(length)).tolist()
        ids = torch.tensor([tokens], device=device)

        def hf_forward():
            with torch.no_grad():
                return hf(ids).logits

        def forward():
            with torch.no_grad():
                return model(ids).logits

        ms = median_ms({"transformers forward": hf_forward, "Glassbox forward": forward,
                         "Glassbox full capture": lambda: run_trace(model, tokens),
                         "Glassbox traced fwd+bwd": lambda: run_trace(model, tokens, backward=True)}, repeats, device)
        floor = ms["transformers forward"]
        print(f"\nT = {length}")
        for name, value in ms.items():
            print(f"  {name:<26} {value:9.1f} ms   ÷ transformers forward {value / floor:6.2f}")

    prompt_ids = torch.randint(loaded.cfg.vocab_size, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    prompt = loaded.tokenizer.decode(prompt_ids)
    prompt_ids = loaded.encode(prompt)
    ids = torch.tensor([prompt_ids], device=device)
    outputs = {}

    def hf_generate():
        outputs["hf"] = hf.generate(ids, max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False,
                                    pad_token_id=0)[0, len(prompt_ids):].tolist()

    def ours():
        outputs["glassbox"] = [t.token_id for t in generate(loaded, prompt, N_NEW, Sampling(temperature=0))]

    ms = median_ms({"transformers generate": hf_generate, "Glassbox generate": ours}, repeats, device)
    same = outputs["hf"] == outputs["glassbox"]
    print(f"\ngreedy generation of {N_NEW} tokens from a {len(prompt_ids)}-token prompt (same tokens: {same})")
    for name, value in ms.items():
        print(f"  {name:<26} {value:9.1f} ms   ÷ transformers generate {value / ms['transformers generate']:6.2f}")
    return 0 if same else 1
