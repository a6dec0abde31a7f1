"""The lesson on encoders, decoders and cross-attention, on the encoder-decoder micro-model
(model/micro/seq2seq.py), a tiny T5 trained to reverse a sequence of syllables.

Its three kinds of attention, on one source and the model's own output: the encoder's
self-attention (no mask: every source position reads every other), the decoder's (causal: each
target position reads itself and the ones before), and cross-attention, where the decoder's
queries read the encoder's output. For a reversal, the query that predicts target token t needs
source token n − 1 − t: a head doing the job puts its weight on the anti-diagonal."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import run_seq2seq_trace
from glassbox.model.io.checkpoint import LoadedModel, load
from glassbox.model.micro import seq2seq

MODEL = "micro-seq2seq"
LENGTH = 8  # the lesson's random source


@dataclass
class Reversal:
    source: list[int]
    output: list[int]  # the model's greedy output, as long as the source
    encoder: np.ndarray  # (block, head, source, source): the encoder's self-attention
    decoder: np.ndarray  # (block, head, target, target): the decoder's causal self-attention
    cross: np.ndarray  # (block, head, target, source)

    @property
    def correct(self) -> bool:
        return self.output == self.source[::-1]


def trained_length(source: list[int]) -> bool:
    """Whether ``source`` is as long as the sources the model was trained on (seq2seq.LENGTHS, inclusive)."""
    return seq2seq.LENGTHS[0] <= len(source) <= seq2seq.LENGTHS[1]


def repeated(source: list[int]) -> list[int]:
    """The syllables that occur more than once in ``source`` (training's sources never repeat one)."""
    return sorted({t for t in source if source.count(t) > 1})


def copy_share(pattern: np.ndarray, source: list[int]) -> np.ndarray:
    """One block's cross-attention (head, target, source): per head, the mean weight that the query
    writing target token t puts on every source position holding the syllable it must write,
    source[n − 1 − t]. Without repeats this is the anti-diagonal share; with a repeated syllable a
    head may fetch it from either copy."""
    n = len(source)
    wanted = np.array([[source[j] == source[n - 1 - t] for j in range(n)] for t in range(pattern.shape[1])])
    return (pattern * wanted).sum(-1).mean(-1)


def random_source(seed: int, length: int = LENGTH, vocab_size: int = len(seq2seq.vocabulary())) -> list[int]:
    """``length`` distinct random syllables (as the model was trained on), from ``seed``."""
    return (np.random.default_rng(seed).permutation(vocab_size - 1)[:length] + 1).tolist()


def reverse(loaded: LoadedModel, source: list[int]) -> Reversal:
    """The model's greedy output for ``source``, and every attention pattern of the pass that wrote
    it: the decoder traced on what it read while generating (the start token, then its own output)."""
    output = seq2seq.reverse_greedily(loaded, source)
    trace = run_seq2seq_trace(loaded.model, source, output, names=["*hook_pattern"])
    encoder, decoder = loaded.cfg.n_layers, loaded.cfg.n_decoder_layers

    def stacked(name: str, n: int) -> np.ndarray:
        return np.stack([trace[name.format(i)].double().numpy() for i in range(n)])

    return Reversal(
        source,
        output,
        stacked("encoder.blocks.{}.attn.hook_pattern", encoder),
        stacked("decoder.blocks.{}.attn.hook_pattern", decoder),
        stacked("decoder.blocks.{}.cross_attn.hook_pattern", decoder),
    )


def figures(loaded=None) -> dict:
    """The lesson's figures on the shipped micro-model (the course's model, ``loaded``, is not used)."""
    model = load(MODEL)
    seen = reverse(model, random_source(0))
    return seq2seq.figures(model) | {
        "example": {
            "source": [model.pieces[t] for t in seen.source],
            "output": [model.pieces[t] for t in seen.output],
            "correct": seen.correct,
            "aligned_share": [seq2seq.aligned_share(p).round(4).tolist() for p in seen.cross],
            "encoder_weight_after_query": float(np.triu(seen.encoder, 1).sum(-1).mean()),
            "decoder_weight_after_query": float(np.triu(seen.decoder, 1).sum(-1).mean()),
        }
    }


# --- exercises ------------------------------------------------------------------------------


@cache  # one teacher-forced pass per source: a learner's seeds come back
def _reversal_patterns(source: tuple[int, ...]) -> np.ndarray:
    return seq2seq.cross_patterns(load(MODEL).model, list(source))


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """The shape of a cross-attention pattern, and which source token the micro-model's reversing
    head reads for a target token (on the shipped micro-model; ``loaded`` is not used)."""
    rng = draw("cross-attention", seed)

    heads = int(rng.choice([2, 4, 8, 12]))
    source_len, target_len = (int(v) for v in rng.choice(np.arange(3, 40), 2, replace=False))
    shape = f"{heads} × {target_len} × {source_len}"
    shape_ex = Exercise(
        "shape",
        f"A decoder's cross-attention has {heads} heads. The encoder read a source of {source_len} tokens and "
        f"the decoder has {target_len} tokens so far. What shape is the cross-attention pattern of one sequence "
        "(heads × queries × keys)?",
        shape,
        choices=(
            shape,
            f"{heads} × {source_len} × {target_len}",
            f"{heads} × {target_len} × {target_len}",
            f"{heads} × {source_len} × {source_len}",
        ),
        hint="The queries come from the decoder's positions; the keys and values from the encoder's output.",
        solution=f"Each of the {target_len} decoder positions asks a query of each of the {source_len} source "
        f"positions, in each of the {heads} heads: {shape}. No causal mask: every source token is visible.",
        data={"heads": heads, "source_len": source_len, "target_len": target_len},
    )

    model = load(MODEL)
    source = random_source(int(rng.integers(0, 10**6)), int(rng.integers(seq2seq.LENGTHS[0], 9)), model.cfg.vocab_size)
    patterns = _reversal_patterns(tuple(source))  # (block, head, target, source)
    shares = np.array([seq2seq.aligned_share(p) for p in patterns])
    block, head = (int(v) for v in np.unravel_index(int(shares.argmax()), shares.shape))
    n, target = len(source), int(rng.integers(0, len(source)))
    read = int(patterns[block, head, target].argmax())
    choices = tuple(f"{model.pieces[t]} (source position {j + 1})" for j, t in enumerate(source))
    syllables = " ".join(model.pieces[t] for t in source)
    reads_ex = Exercise(
        "reads",
        f'The micro-model reverses the source "{syllables}" ({n} syllables). In decoder block {block + 1}, '
        f"head {head + 1} is its reversing head. Its query at target position {target + 1} (writing output "
        f"syllable {target + 1}) puts the most weight on which source token?",
        choices[read],
        choices=choices,
        hint=f"Reversed, the output's syllable {target + 1} is the source's syllable {n - target}.",
        solution=f"The head puts {patterns[block, head, target, read]:.3f} of its weight on source position "
        f"{read + 1} ({model.pieces[source[read]]}); the reversal needs position {n - target}, "
        f"{model.pieces[source[n - 1 - target]]}. Over this source the head puts "
        f"{shares[block, head]:.3f} of its weight on the anti-diagonal.",
        data={"source": source, "block": block, "head": head, "target": target, "model": MODEL},
    )
    return [shape_ex, reads_ex]
