"""How far a typed prompt lies from what the course's model (the bundled story model,
``assets/default``) was trained on, measured by the engine.

The model learned about 600 tokens of byte-level BPE from 20,000 generated stories
(model/data/stories.py): a few names, animals, places and toys, and the sentences its grammar
writes. Ordinary English falls outside it fast: "Lily had a red ball. She threw the ball to her
dog." costs several nats a token, and "threw" is cut into " thre" + "w". Two measures say so:

- the share of the prompt's words that the tokenizer splits into several tokens (a word the
  vocabulary never saw whole);
- the prompt's mean loss (−log p of each next token, teacher-forced) against the loss of the
  corpus's own sentences, scored the same way: one sentence at a time, from its first token.

The reference is held-out text: the last ``HELD_OUT`` stories of the training corpus, which lie
in its validation split (the last 5 % of its tokens, never trained on)."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.data.stories import corpus
from glassbox.model.engine import check_prompt
from glassbox.model.engine.files import write_text
from glassbox.model.io.assets import asset

HELD_OUT = 300  # stories at the end of the corpus: about 30,000 tokens, inside the last 5 % (97,798 tokens)
# GPT-2's pre-tokenizer (the bundled tokenizer is byte-level BPE): words, numbers, punctuation runs
_WORDS = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+""")
_SENTENCES = re.compile(r'(?<=[.!?])"?\s+')
# The warning's thresholds, from a measurement (``typical``; tests/test_i44_lessons_b.py re-measures
# it). The 300 held-out stories hold 4,235 sentences. In their stories' context they cost this
# model 0.25 nats a token (the card's validation loss: 0.31). Scored alone, from the second
# prediction on, they cost a median of 1.72 nats a token; the 90th percentile is 6.20, the 95th
# 6.33, the 97.5th 6.79, the 99th 11.2 (a quoted "Yes!" alone). Lily's two sentences above cost
# 7.49, worse than 97.6 % of them; "Zoe had a frog. Zoe loved the" 5.25 (84 %); "the cat sat on
# the mat" 0.25. So a prompt is far outside when its loss is above FAR_PERCENTILE of the corpus's
# own sentences (worse than 39 in 40 of them), or when more than FAR_SPLIT of its words are cut
# into several tokens: of the held-out sentences' 22,979 words, none is.
FAR_PERCENTILE = 97.5
FAR_SPLIT = 0.1


def held_out_stories(n_stories: int = 20_000, seed: int = 0, held_out: int = HELD_OUT) -> list[str]:
    """The last ``held_out`` stories of the corpus the model was trained on (its validation split)."""
    return corpus(n_stories, seed)[-held_out:]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s.strip()]


def words(text: str) -> list[str]:
    """The prompt's words (runs of letters, a space before one kept with it), cut where the
    byte-level tokenizer cuts text before merging; punctuation and numbers are left out."""
    return [w for w in _WORDS.findall(text) if any(c.isalpha() for c in w)]


def pieces_of(loaded, word: str) -> list[int]:
    """A word's tokens as byte-level BPE cuts it, with the space before it or without one,
    whichever is fewer: the vocabulary holds most words with their space (" ball"), and some bare
    (the corpus writes '"Hello' after a quote, and a text's first word has no space)."""
    prefix = len(loaded.tokenizer.prefix())
    word = word.lstrip()
    return min((loaded.encode(w)[prefix:] for w in (" " + word, word)), key=len)


def split_words(loaded, text: str) -> tuple[list[str], list[str]]:
    """(every word, the words the tokenizer cuts into several tokens)."""
    every = words(text)
    return every, [w for w in every if len(pieces_of(loaded, w)) > 1]


def mean_losses(model, token_lists: list[list[int]], batch: int = 256) -> np.ndarray:
    """Each text's mean −log p(next token) from its second prediction on (teacher forcing, each
    text from its own first token; NaN for texts of under three tokens). The first prediction is
    left out: from one token and no context this model pays about 10 nats whatever the text (the
    median on the held-out sentences below), which says nothing about the text. Right-padded
    batches: with the causal mask a padding position changes nothing before it."""
    out = np.full(len(token_lists), np.nan)
    order = sorted(range(len(token_lists)), key=lambda i: len(token_lists[i]))
    for start in range(0, len(order), batch):
        chunk = [i for i in order[start : start + batch] if len(token_lists[i]) >= 3]
        if not chunk:
            continue
        longest = max(len(token_lists[i]) for i in chunk)
        ids = torch.zeros((len(chunk), longest), dtype=torch.long)
        targets = torch.full((len(chunk), longest), -1, dtype=torch.long)
        for row, i in enumerate(chunk):
            t = token_lists[i]
            ids[row, : len(t)] = torch.tensor(t)
            targets[row, 1 : len(t) - 1] = torch.tensor(t[2:])
        with torch.no_grad():
            logits = model(ids).logits.double()
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets.clamp(min=0), reduction="none")
        valid = targets >= 0
        means = (losses * valid).sum(1) / valid.sum(1)
        out[chunk] = means.numpy()
    return out


@dataclass
class Typical:
    """The corpus's own held-out sentences, scored one at a time."""

    vocab_size: int
    stories: int  # the training corpus's stories
    sentences: list[str]
    losses: np.ndarray  # each sentence's mean loss, nats a token
    split_share: float  # of the held-out words, the share cut into several tokens

    @property
    def median(self) -> float:
        return float(np.nanmedian(self.losses))

    @property
    def far_loss(self) -> float:
        return float(np.nanpercentile(self.losses, FAR_PERCENTILE))

    def rank(self, loss: float) -> float:
        """The share of the corpus's sentences that cost less than ``loss``."""
        scored = self.losses[~np.isnan(self.losses)]
        return float((scored < loss).mean())

    def offered(self, k: int = 4) -> list[str]:
        """``k`` held-out sentences the model handles (mean loss at most the median), each of its own
        kind (no two share their first or their second word), the longest that fit a button first."""
        chosen, seen = [], set()
        for i in np.argsort(-np.array([len(s) for s in self.sentences]), kind="stable"):
            sentence, loss = self.sentences[i], self.losses[i]
            first, second = (sentence.lower().split() + [""])[:2]
            if loss <= self.median and 20 <= len(sentence) <= 44 and not {first, second} & seen:
                chosen.append(sentence)
                seen |= {first, second}
            if len(chosen) == k:
                break
        return chosen


def card_corpus(loaded) -> tuple[int, int]:
    """(stories, seed) of the corpus the model card names (the bundled model's: 20,000, 0)."""
    about = (getattr(loaded, "about", None) or {}).get("card", {}).get("corpus", {})
    return int(about.get("stories", 20_000)), int(about.get("seed", 0))


def typical(loaded, corpus_of: tuple[int, int] | None = None, held_out: int = HELD_OUT) -> Typical:
    """The held-out sentences' losses and split words, on ``loaded`` (a second or two on a CPU).
    ``corpus_of``: (stories, seed) of the corpus it was trained on, when its card does not say
    (the MoE micro-model: 5,000 stories, seed 0, whose last 5 % hold about 250 stories)."""
    n_stories, seed = corpus_of or card_corpus(loaded)
    texts = [s for story in held_out_stories(n_stories, seed, held_out) for s in sentences(story)]
    ids = [loaded.encode(s) for s in texts]
    every = [w for s in texts for w in words(s)]
    cut = {w for w in set(every) if len(pieces_of(loaded, w)) > 1}
    return Typical(
        loaded.cfg.vocab_size, n_stories, texts, mean_losses(loaded.model, ids), sum(w in cut for w in every) / max(len(every), 1)
    )


def fingerprint(model) -> str:
    """A hash of the model's weights: a shipped reference is used only for the weights it was measured on."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def shipped_path(name: str):
    return asset("course") / f"prompt-fit-{name}.json"


def shipped_or_measured(loaded, name: str, corpus_of: tuple[int, int] | None = None, held_out: int = HELD_OUT) -> Typical:
    """``typical``, read from the file ``ship`` wrote for the bundled model ``name`` when it was
    measured on these very weights and this corpus (a cold server opens a lesson at once), else
    measured now."""
    path = shipped_path(name)
    corpus_of = corpus_of or card_corpus(loaded)
    if path.exists():
        record = json.loads(path.read_text())
        if (record["fingerprint"], record["corpus"], record["held_out"]) == (
            fingerprint(loaded.model),
            list(corpus_of),
            held_out,
        ):
            return Typical(
                record["vocab_size"],
                record["stories"],
                record["sentences"],
                np.array([np.nan if x is None else x for x in record["losses"]]),
                record["split_share"],
            )
    return typical(loaded, corpus_of, held_out)


def ship(loaded, name: str, corpus_of: tuple[int, int] | None = None, held_out: int = HELD_OUT) -> str:
    """Measure ``typical`` and write it where ``shipped_or_measured`` reads it."""
    corpus_of = corpus_of or card_corpus(loaded)
    measured = typical(loaded, corpus_of, held_out)
    record = {
        "model": name,
        "fingerprint": fingerprint(loaded.model),
        "corpus": list(corpus_of),
        "held_out": held_out,
        "vocab_size": measured.vocab_size,
        "stories": measured.stories,
        "sentences": measured.sentences,
        "losses": [None if np.isnan(x) else float(x) for x in measured.losses],
        "split_share": measured.split_share,
        "command": "python -m glassbox.model.course.prompt_fit",
        "torch": torch.__version__,
    }
    path = shipped_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record) + "\n")
    return f"wrote {path}"


@dataclass
class Fit:
    text: str
    tokens: int
    words: list[str]
    split: list[str]  # the words cut into several tokens
    loss: float | None  # the mean loss from the second prediction on, nats a token (None: under 3 tokens)

    @property
    def split_share(self) -> float:
        return len(self.split) / len(self.words) if self.words else 0.0

    def far(self, reference: Typical) -> list[str]:
        """Why the prompt lies far outside the corpus (empty: it does not)."""
        reasons = []
        if self.split_share > FAR_SPLIT:
            reasons.append("split")
        if self.loss is not None and self.loss > reference.far_loss:
            reasons.append("loss")
        return reasons


def fit(loaded, text: str) -> Fit:
    """The prompt's words, the ones cut into pieces, and its mean loss on the model."""
    tokens = loaded.encode(text)
    check_prompt(loaded.cfg, tokens)
    every, cut = split_words(loaded, text)
    loss = float(mean_losses(loaded.model, [tokens])[0]) if len(tokens) >= 3 else None
    return Fit(text, len(tokens), every, cut, loss)


if __name__ == "__main__":  # python -m glassbox.model.course.prompt_fit: ship the bundled models' references
    from glassbox.model.io.checkpoint import load
    from glassbox.model.micro import moe

    print(ship(load("default"), "default"))
    print(ship(load("micro-moe"), "micro-moe", (moe.N_STORIES, moe.SEED), 200))
    sys.exit(0)
