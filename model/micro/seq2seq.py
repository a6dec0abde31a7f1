"""The encoder-decoder micro-model: a tiny T5 (RMSNorm, ReLU MLPs, no biases, the relative position
bias in each stack's self-attention, none in cross-attention) trained to **reverse** a sequence of
random syllables. The encoder reads the source both ways; the decoder, teacher-forced, reads a
start token and then the reversed source but its last token, and position t predicts target
token t, which is source token n − 1 − t.

No decoder position can know that token by itself: it has to read it from the encoder's output,
and the only way in is cross-attention. So a cross-attention head that does the job looks, from
the query that predicts target token t, at source position n − 1 − t: on a (target × source)
pattern, the anti-diagonal.

Measured on held-out random sequences (a generator seeded apart from training's): per decoder
block and head, the mean cross-attention weight on the aligned source position (``aligned_share``),
and the exact-match accuracy of greedy generation (the engine's sampling, n tokens from the start
token) against the reversed source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from glassbox.model.analysis.seq2seq import greedy_target
from glassbox.model.engine import EncoderDecoder, ModelConfig, run_seq2seq_trace
from glassbox.model.engine.seq2seq import shift_right
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.micro.common import fit, write
from glassbox.model.micro.induction import syllables

SEED, STEPS, BATCH, LR = 0, 1500, 32, 0.006
LENGTHS = (6, 12)  # a source's length, inclusive; one length per batch (the engine has no padding mask)
START = "<s>"  # the decoder's first input (id 0, as T5's pad token is)
HELD_OUT = 64  # held-out sequences for the figure
CROSS = "decoder.blocks.*.cross_attn.hook_pattern"


def vocabulary() -> list[str]:
    return [START] + syllables()


def config(vocab_size: int) -> ModelConfig:
    # relative_max_distance 16: every distance up to the longest source (11) gets a bucket of its own
    return ModelConfig(
        vocab_size=vocab_size,
        n_ctx=16,
        d_model=64,
        n_layers=2,
        n_decoder_layers=2,
        n_heads=4,
        d_ff=128,
        norm="rmsnorm",
        activation="relu",
        positional="relative",
        relative_buckets=32,
        relative_max_distance=16,
        attn_bias=False,
        mlp_bias=False,
        tie_embeddings=False,
        encoder_decoder=True,
        decoder_start_token_id=0,
    )


def reversed_batch(batch: int, vocab_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random sources of one random length, each of distinct syllables (never the start
    token), and each reversed: the target."""
    n = int(torch.randint(LENGTHS[0], LENGTHS[1] + 1, (1,), generator=generator))
    source = torch.rand(batch, vocab_size - 1, generator=generator).argsort(-1)[:, :n] + 1
    return source, source.flip(1)


def seq2seq_loss(model: EncoderDecoder, source: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Teacher forcing: the decoder reads the target shifted right and predicts each target token."""
    return model(source, shift_right(target, model.cfg.decoder_start_token_id), target).loss, {}


def held_out(n: int = HELD_OUT, vocab_size: int = len(vocabulary())) -> list[list[int]]:
    """``n`` random sources of LENGTHS, from a generator seeded apart from training's."""
    rng = np.random.default_rng(SEED + 1000)
    return [(rng.permutation(vocab_size - 1)[: rng.integers(LENGTHS[0], LENGTHS[1] + 1)] + 1).tolist() for _ in range(n)]


def aligned_share(pattern: np.ndarray) -> np.ndarray:
    """One cross-attention pattern (head, target position, source position) of a reversal: per
    head, the mean weight that the query predicting target token t puts on source position n − 1 − t."""
    n = pattern.shape[-1]
    t = np.arange(pattern.shape[1])
    return pattern[:, t, n - 1 - t].mean(-1)


def cross_patterns(model: EncoderDecoder, source: list[int]) -> np.ndarray:
    """Every decoder block's cross-attention pattern (block, head, target, source), teacher-forced
    on the source reversed."""
    trace = run_seq2seq_trace(model, source, source[::-1], names=[CROSS])
    return np.stack(
        [trace[f"decoder.blocks.{i}.cross_attn.hook_pattern"].double().numpy() for i in range(model.cfg.n_decoder_layers)]
    )


def reverse_greedily(loaded, source: list[int]) -> list[int]:
    """The model's output for ``source``: len(source) tokens, greedy, through the engine's generation."""
    return greedy_target(loaded, " ".join(loaded.pieces[t] for t in source), len(source))


def figures(loaded) -> dict:
    """On the held-out sources: each decoder block's and head's aligned cross-attention share, the
    best head, and the exact-match accuracy of greedy generation."""
    sources = held_out(vocab_size=loaded.cfg.vocab_size)
    shares = np.mean([[aligned_share(p) for p in cross_patterns(loaded.model, s)] for s in sources], axis=0)
    block, head = np.unravel_index(int(shares.argmax()), shares.shape)
    correct = [reverse_greedily(loaded, s) == s[::-1] for s in sources]
    return {
        "aligned_share": shares.round(4).tolist(),
        "best_head": {"block": int(block), "head": int(head), "share": round(float(shares[block, head]), 4)},
        "exact_match": sum(correct) / len(correct),
        "held_out": len(sources),
    }


def train(path: Path, steps: int = STEPS) -> None:
    torch.manual_seed(SEED)
    tokenizer = Tokenizer.from_words(vocabulary())
    model = EncoderDecoder(config(tokenizer.vocab_size)).init_weights(SEED)
    curve = fit(model, lambda gen: reversed_batch(BATCH, tokenizer.vocab_size, gen), steps, LR, SEED, step_loss=seq2seq_loss)
    cfg = model.cfg
    about = {
        "source": "trained by `glassbox train-micro seq2seq` to reverse random syllables",
        "sample_prompt": "ba ko mi to ze li",
        "card": {
            "architecture": f"a T5-like encoder-decoder: {cfg.n_layers} encoder and {cfg.n_decoder_layers} "
            f"decoder blocks of {cfg.n_heads} heads, d_model {cfg.d_model}, ReLU MLPs of "
            f"{cfg.d_ff}, RMSNorm, relative position bias",
            "data": f"a source of {LENGTHS[0]}–{LENGTHS[1]} random syllables of {tokenizer.vocab_size - 1}; "
            "the target: the same reversed",
            "training": {"steps": steps, "batch": BATCH, "optimizer": f"AdamW lr {LR:g}"},
        },
    }
    write(Path(path), model, tokenizer, about, curve)
