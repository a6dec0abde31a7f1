"""Exact sampling, token by token, with a KV cache.

For each new token: the softmax of the logits over the whole vocabulary (before), then
temperature, top-k and top-p, renormalised (after), then a draw from ``after`` with a seeded
generator. Every step reports both distributions, the chosen token and its probability.
An encoder-decoder writes its target this way from a source; an encoder (BERT), which has no next
token, has the token at its mask drawn the same way (``fill_mask``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from glassbox.model.engine.config import ModelConfig, check_context
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.seq2seq import EncoderDecoder
from glassbox.model.engine.transformer import Transformer


class TextModel(Protocol):
    """A model with its tokenizer (model.io's LoadedModel is one)."""

    tokenizer: Any  # model.io's Tokenizer: an encoder's mask_token and vocab

    @property
    def model(self) -> Transformer | EncoderDecoder: ...

    @property
    def cfg(self) -> ModelConfig: ...

    def encode(self, prompt: str) -> list[int]: ...

    @property
    def pieces(self) -> list[str]: ...


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # 0: greedy (always the most likely token)
    top_k: int | None = None  # keep the k most likely tokens; None: all
    top_p: float = 1.0  # keep the smallest set of most likely tokens whose mass reaches p
    seed: int = 0

    def __str__(self) -> str:
        if self.temperature == 0:
            return "greedy"
        parts = [f"temperature {self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top-k {self.top_k}")
        if self.top_p < 1:
            parts.append(f"top-p {self.top_p:g}")
        return ", ".join(parts + [f"seed {self.seed}"])

    def check(self) -> None:
        if not self.temperature >= 0 or math.isinf(self.temperature):
            raise GlassboxError(f"Temperature must be 0 (greedy) or positive, not {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise GlassboxError(f"top-k must be at least 1, not {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise GlassboxError(f"top-p must be in (0, 1], not {self.top_p}")
        if not 0 <= self.seed < 2**63:  # what torch.Generator.manual_seed takes
            raise GlassboxError(f"The seed must be a whole number from 0 to 2^63 - 1, not {self.seed}")


def distributions(logits: torch.Tensor, sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor]:
    """(before, after) for one position's logits (vocabulary,), float64: ``before`` is the
    model's softmax, ``after`` what is sampled from (temperature, then top-k, then top-p,
    renormalised; one-hot on the most likely token at temperature 0)."""
    logits = logits.double()
    before = torch.softmax(logits, dim=-1)
    if sampling.temperature == 0:
        after = torch.zeros_like(before)
        after[int(torch.argmax(logits))] = 1.0
        return before, after
    # log_softmax subtracts the maximum first, so tiny temperatures stay finite
    probs = torch.softmax(torch.log_softmax(logits, -1) / sampling.temperature, dim=-1)
    order = torch.argsort(probs, descending=True, stable=True)
    keep = torch.zeros_like(probs, dtype=torch.bool)
    n_keep = len(probs) if sampling.top_k is None else min(sampling.top_k, len(probs))
    if sampling.top_p < 1:
        sorted_probs = probs[order] / probs[order][:n_keep].sum()
        mass_before = torch.cumsum(sorted_probs, 0) - sorted_probs  # mass of the tokens ranked above
        n_keep = max(1, int((mass_before[:n_keep] < sampling.top_p).sum()))
    keep[order[:n_keep]] = True
    after = torch.where(keep, probs, 0.0)
    return before, after / after.sum()


def entropy(p: torch.Tensor) -> float:
    """In nats; 0·log 0 = 0. (A one-hot distribution gives 0, not −0.)"""
    return max(0.0, float(torch.special.entr(p).sum()))  # entr(x) = −x log x, and entr(0) = 0


@dataclass
class GeneratedToken:
    token_id: int
    token: str
    p: float  # its probability in ``after``, the distribution it was drawn from
    p_model: float  # its probability before temperature and filtering
    before: torch.Tensor  # (vocabulary,) the model's softmax
    after: torch.Tensor  # (vocabulary,) after temperature, top-k, top-p
    entropy_before: float
    entropy_after: float
    cache_bytes: int  # the KV cache it was predicted from: the keys and values of every earlier position
    position: int  # where this token goes in the sequence
    forced: bool = False  # put there by a branch (generation_tree), not drawn


def generate(
    loaded: TextModel, prompt: str | list[int], max_new_tokens: int, sampling: Sampling = Sampling()
) -> Iterator[GeneratedToken]:
    """Yield new tokens one at a time (a generator, so a UI can stream them). The prompt is
    run once; each new token is then fed alone, with the others' keys and values cached.
    An encoder-decoder (T5) reads the prompt as its source, once, and its decoder writes the new
    tokens from decoder_start_token_id on; the cross-attention's keys and values are computed
    from the source at the first step and cached with the decoder's own."""
    sampling.check()
    tokens = loaded.encode(prompt) if isinstance(prompt, str) else list(prompt)  # text, or token ids
    if max_new_tokens < 1:
        raise GlassboxError(f"Generate at least one token, not {max_new_tokens}")
    if isinstance(loaded.model, EncoderDecoder):
        yield from _generate_from_source(loaded, loaded.model, tokens, max_new_tokens, sampling)
        return
    check_context(loaded.cfg, len(tokens), max_new_tokens)
    model = loaded.model
    cache = KVCache(loaded.cfg.n_layers)
    with torch.no_grad():
        logits = model(torch.tensor([tokens], device=model.device), cache=cache, last_only=True).logits[0, -1]
        yield from _draw(
            loaded,
            logits,
            lambda token: model(torch.tensor([[token]], device=model.device), cache=cache).logits[0, -1],
            max_new_tokens,
            sampling,
            [cache],
            len(tokens),
        )


def _generate_from_source(
    loaded: TextModel, model: EncoderDecoder, source: list[int], max_new_tokens: int, sampling: Sampling
) -> Iterator[GeneratedToken]:
    """An encoder-decoder's generation (``model`` is ``loaded``'s): the source encoded once, the
    decoder fed one token a step."""
    cfg = loaded.cfg
    assert cfg.n_decoder_layers is not None, "ModelConfig sets it on an encoder-decoder"
    check_context(cfg, len(source), what="The source")
    check_context(cfg, 1, max_new_tokens, what="The decoder's start token")
    cache, source_cache = KVCache(cfg.n_decoder_layers), KVCache(cfg.n_decoder_layers)
    device = model.device
    with torch.no_grad():
        encoded = model.encode(torch.tensor([source], device=device))

        def step(token: int) -> torch.Tensor:
            return model(
                None, torch.tensor([[token]], device=device), encoded=encoded, cache=cache, source_cache=source_cache
            ).logits[0, -1]

        yield from _draw(loaded, step(cfg.decoder_start_token_id), step, max_new_tokens, sampling, [cache, source_cache], 1)


def _draw(
    loaded: TextModel,
    logits: torch.Tensor,
    step,
    max_new_tokens: int,
    sampling: Sampling,
    caches: list[KVCache],
    first_position: int,
) -> Iterator[GeneratedToken]:
    """Draw a token from ``logits``, yield it, and get the next logits from ``step(token)``, until
    ``max_new_tokens`` are drawn. The first goes at ``first_position`` in the sequence."""
    generator = torch.Generator().manual_seed(sampling.seed)
    for i in range(max_new_tokens):
        before, after = distributions(logits.cpu(), sampling)
        choice = _choose(after, sampling, generator)
        yield GeneratedToken(
            choice,
            loaded.pieces[choice],
            float(after[choice]),
            float(before[choice]),
            before,
            after,
            entropy(before),
            entropy(after),
            sum(c.nbytes() for c in caches),
            first_position + i,
        )
        if i < max_new_tokens - 1:
            logits = step(choice)


def _choose(after: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    """One token id drawn from ``after`` with ``generator``."""
    # greedy: ``after`` is one-hot, so the draw is its one token (no vocabulary-wide draw)
    return int(torch.argmax(after) if sampling.temperature == 0 else torch.multinomial(after, 1, generator=generator))


def top(p: torch.Tensor, pieces: list[str], n: int = 10) -> list[dict]:
    """The n most likely tokens with their probabilities, nonzero ones only, most likely first."""
    values, ids = torch.sort(p, descending=True, stable=True)
    return [{"token": pieces[int(i)], "token_id": int(i), "p": float(v)} for v, i in zip(values[:n], ids[:n]) if v > 0]


def kv_cache_bytes(loaded: TextModel, n_tokens: int, source_tokens: int = 0) -> int:
    """2 (keys and values) × layers × positions × key/value width × bytes per number. An
    encoder-decoder's cache is its decoder's: in each decoder block the self-attention's keys and
    values of ``n_tokens`` target positions and the cross-attention's of ``source_tokens``."""
    cfg = loaded.cfg
    if cfg.encoder_decoder:
        assert cfg.n_decoder_layers is not None, "ModelConfig sets it on an encoder-decoder"
        layers, positions = cfg.n_decoder_layers, n_tokens + source_tokens
    else:
        layers, positions = cfg.n_layers, n_tokens
    return 2 * layers * positions * cfg.n_kv_heads * cfg.d_head * loaded.model.embed.W_E.element_size()


def next_token_logits(loaded: TextModel, prompt: str) -> torch.Tensor:
    """The logits for the token after ``prompt`` (vocabulary,), float64, on the CPU."""
    tokens = loaded.encode(prompt)
    check_context(loaded.cfg, len(tokens))
    with torch.no_grad():
        return loaded.model(torch.tensor([tokens], device=loaded.model.device), last_only=True).logits[0, -1].double().cpu()


def first_target_logits(loaded: TextModel, source: str) -> torch.Tensor:
    """An encoder-decoder's logits for the target's first token (vocabulary,), float64, on the CPU:
    the encoder reads ``source``, the decoder its start token (generation's first step)."""
    cfg, model = loaded.cfg, loaded.model
    tokens = loaded.encode(source)
    check_context(cfg, len(tokens), what="The source")
    with torch.no_grad():
        return (
            model(torch.tensor([tokens], device=model.device), torch.tensor([[cfg.decoder_start_token_id]], device=model.device))
            .logits[0, -1]
            .double()
            .cpu()
        )


def _masked(loaded: TextModel, prompt: str) -> tuple[list[int], int]:
    """The prompt's tokens and the position of its first mask token."""
    mask = loaded.tokenizer.mask_token
    if mask is None:
        raise GlassboxError("This model's tokenizer has no mask token, so there is no position for it to fill in.")
    tokens = loaded.encode(prompt)
    if loaded.tokenizer.vocab[mask] not in tokens:
        raise GlassboxError(
            f"Put {mask} where a word should be filled in: an encoder predicts the masked "
            "positions of a text, it does not continue it."
        )
    return tokens, tokens.index(loaded.tokenizer.vocab[mask])


def masked_token_logits(loaded: TextModel, prompt: str) -> torch.Tensor:
    """An encoder's (BERT's) logits at the first mask token of ``prompt`` (vocabulary,), float64,
    on the CPU: what its masked-LM head predicts goes there, the text on both sides seen."""
    tokens, position = _masked(loaded, prompt)
    check_context(loaded.cfg, len(tokens))
    with torch.no_grad():
        return loaded.model(torch.tensor([tokens], device=loaded.model.device)).logits[0, position].double().cpu()


@dataclass
class Filled:
    """A mask filled in: the token drawn, its probabilities, and the text with it in the mask's place."""

    token_id: int
    token: str
    p: float  # in ``after``, the distribution it was drawn from
    p_model: float  # in the model's softmax
    before: torch.Tensor
    after: torch.Tensor
    text: str


def fill_mask(loaded: TextModel, prompt: str, sampling: Sampling = Sampling()) -> Filled:
    """Draw the first mask token's filling, as generation draws a token: from ``after`` (the
    settings applied to the masked-LM distribution) with a generator seeded by ``sampling.seed``."""
    sampling.check()
    before, after = distributions(masked_token_logits(loaded, prompt), sampling)
    choice = _choose(after, sampling, torch.Generator().manual_seed(sampling.seed))
    token = loaded.pieces[choice]
    return Filled(
        choice,
        token,
        float(after[choice]),
        float(before[choice]),
        before,
        after,
        prompt.replace(loaded.tokenizer.mask_token, token, 1),
    )
