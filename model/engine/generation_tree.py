"""Generation as a tree: every sample and every forced branch of one prompt, each a path.

A path is the prompt's continuation, one ``GeneratedToken`` per new position, drawn by the exact
sampler (glassbox.model.engine.sampling). ``branch(position, token)`` forces ``token`` at a position
of a path and draws the rest with the same settings, from a generator seeded afresh with the same
seed: so a branch is, token for token, the generation a fresh run of the forced prefix would give.
It reuses the path's KV cache up to the branch: only the forced token and the tokens after it go
through the model (``Path.computed`` counts them). ``sample(seed)`` adds another sample of the
prompt, so two seeds show where they part (``parting``).

Decoder-only models: an encoder-decoder's cache also holds its source's cross-attention, and an
encoder does not generate."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from glassbox.model.engine.config import check_context
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.sampling import GeneratedToken, Sampling, TextModel, _draw

MAX_PATHS = 64  # each path keeps its KV cache, so that it can be branched again


@dataclass
class Path:
    """One continuation of the prompt. ``parent``/``position``: the path it branched from and the
    (0-based sequence) position of its forced token; None for a sample of the prompt."""

    index: int
    sampling: Sampling
    steps: list[GeneratedToken]
    parent: int | None = None
    position: int | None = None
    computed: int = 0  # positions this path fed through the model (its own, not its parent's)
    cache: KVCache | None = field(default=None, repr=False)  # the keys and values of every position fed

    @property
    def token_ids(self) -> list[int]:
        """The new tokens' ids."""
        return [s.token_id for s in self.steps]


class GenerationTree:
    """The samples and branches of one prompt, each ``max_new_tokens`` long (``paths[0]`` is the
    first sample, drawn on creation). Belongs to one caller: it holds tensors, never the model's state."""

    def __init__(self, loaded: TextModel, prompt: list[int], max_new_tokens: int, sampling: Sampling = Sampling()):
        if loaded.cfg.kind != "decoder":
            raise GlassboxError(f"A generation tree is for decoder-only models; this one is an {loaded.cfg.kind}")
        if max_new_tokens < 1:
            raise GlassboxError(f"Generate at least one token, not {max_new_tokens}")
        sampling.check()
        check_context(loaded.cfg, len(prompt), max_new_tokens)
        self.loaded, self.prompt, self.max_new_tokens, self.sampling = loaded, list(prompt), max_new_tokens, sampling
        self.paths: list[Path] = []
        self.sample(sampling.seed)

    def tokens(self, path: int = 0) -> list[int]:
        """The prompt's ids and the path's new ones: the sequence the path's model saw."""
        return self.prompt + self.paths[path].token_ids

    def sample(self, seed: int) -> Path:
        """Another sample of the prompt with the tree's settings and ``seed`` (the same seed gives the
        same path, which is returned instead of a copy)."""
        sampling = replace(self.sampling, seed=seed)
        sampling.check()
        for path in self.paths:
            if path.parent is None and path.sampling == sampling:
                return path
        self._room()
        cache = KVCache(self.loaded.cfg.n_layers)
        model = self.loaded.model
        with torch.no_grad():
            logits = model(torch.tensor([self.prompt], device=model.device), cache=cache, last_only=True).logits[0, -1]
        return self._continue(len(self.prompt), logits, cache, sampling, [], None, None, self.max_new_tokens)

    def branch(self, position: int, token: int, path: int = 0) -> Path:
        """Path ``path`` up to ``position`` (a 0-based sequence position of one of its new tokens),
        ``token`` forced there, and the rest drawn with the path's settings from a generator seeded
        afresh with its seed. Its cache up to ``position`` is reused. Forcing the same token at the
        same place twice returns the first branch."""
        if not 0 <= path < len(self.paths):
            raise GlassboxError(f"There is no path {path}: the tree has {len(self.paths)}")
        parent = self.paths[path]
        step = position - len(self.prompt)
        if not 0 <= step < len(parent.steps):
            raise GlassboxError(
                f"Position {position} is not a generated one: the new tokens are at positions "
                f"{len(self.prompt)} to {len(self.prompt) + len(parent.steps) - 1}"
            )
        vocab = len(self.loaded.pieces)
        if not 0 <= token < vocab:
            raise GlassboxError(f"Token id {token} is not in the vocabulary (0 to {vocab - 1})")
        prefix = parent.token_ids[:step] + [token]
        for other in self.paths:
            if other.position == position and other.sampling == parent.sampling and other.token_ids[: step + 1] == prefix:
                return other
        self._room()
        at = parent.steps[step]  # the same prefix, so the same distributions: only the token differs
        forced = replace(
            at,
            token_id=token,
            token=self.loaded.pieces[token],
            p=float(at.after[token]),
            p_model=float(at.before[token]),
            forced=True,
        )
        assert parent.cache is not None, "every path keeps its cache"
        cache = parent.cache.truncated(position)
        remaining = self.max_new_tokens - step - 1
        logits = None
        if remaining:
            model = self.loaded.model
            with torch.no_grad():
                logits = model(torch.tensor([[token]], device=model.device), cache=cache).logits[0, -1]
        kept = parent.steps[:step] + [forced]
        return self._continue(position + 1, logits, cache, parent.sampling, kept, path, position, remaining, fed=1)

    def parting(self, a: int, b: int) -> int | None:
        """The first sequence position where paths ``a`` and ``b`` hold different tokens; None if
        they are the same."""
        for i, (x, y) in enumerate(zip(self.paths[a].token_ids, self.paths[b].token_ids)):
            if x != y:
                return len(self.prompt) + i
        return None

    def _room(self) -> None:
        if len(self.paths) >= MAX_PATHS:
            raise GlassboxError(f"A tree keeps at most {MAX_PATHS} paths (each holds its KV cache): start a new one")

    def _continue(
        self,
        first_position: int,
        logits: torch.Tensor | None,
        cache: KVCache,
        sampling: Sampling,
        kept: list[GeneratedToken],
        parent: int | None,
        position: int | None,
        n_new: int,
        fed: int | None = None,
    ) -> Path:
        """A new path: ``kept`` steps, then ``n_new`` drawn from ``logits`` on (``cache`` holds
        every position before ``first_position``)."""
        model = self.loaded.model
        computed = len(self.prompt) if fed is None else fed

        def step(token: int) -> torch.Tensor:
            nonlocal computed
            computed += 1
            return model(torch.tensor([[token]], device=model.device), cache=cache).logits[0, -1]

        drawn: list[GeneratedToken] = []
        if n_new:
            assert logits is not None
            with torch.no_grad():
                drawn = list(_draw(self.loaded, logits, step, n_new, sampling, [cache], first_position))
        path = Path(len(self.paths), sampling, kept + drawn, parent, position, computed if n_new or fed is None else 0, cache)
        self.paths.append(path)
        return path
