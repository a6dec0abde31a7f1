"""The lesson on tokens: how text, sound, pictures and prices become a sequence of token ids.

(a) one text through the course model's byte-level BPE tokenizer and through plain UTF-8 bytes
(one token per byte): the same text, different counts; (b) a byte-pair encoder trained here, in
plain Python, on a few sentences, merge by merge; (c) other domains cast as sequences, as the
course lists them: an audio clip as overlapping frames of samples, an image as 16×16 patches, a
price series as binned daily returns, each embedded by a tiny seeded linear map to D_MODEL
numbers per token (the text by the course model's own embedding table)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import GlassboxError

TEXT = "Lily saw a big dog. Zoë ate a crème brûlée!"
TRAIN_SENTENCES = (
    "the cat sat on the mat",
    "the dog sat on the log",
    "the cat and the dog ran to the park",
    "lily had a cat and the cat was happy",
    "lily and the dog played all day",
)
MAX_MERGES = 40
D_MODEL = 32  # the tiny model's width for audio, images and prices
SEED = 0  # the synthetic clip, image and prices, and the embeddings' weights
SAMPLE_RATE = 16_000  # Hz
AUDIO = {"seconds": 1.0, "window_ms": 25, "hop_ms": 10}
IMAGE = {"height": 224, "width": 224, "patch": 16}
PRICES = {"days": 256, "bins": 16, "clip": 0.03}  # returns beyond ±clip fall in the end bins


# --- text -----------------------------------------------------------------------------------


def byte_piece(byte: int) -> str:
    """A byte as a token's label: printable ASCII as itself, anything else as <0xNN>."""
    return chr(byte) if 32 <= byte < 127 else f"<0x{byte:02X}>"


def byte_tokens(text: str) -> list[dict]:
    """Byte-level tokens: one per UTF-8 byte, the byte's value as its id."""
    return [{"id": b, "piece": byte_piece(b)} for b in text.encode("utf-8")]


def bpe_tokens(loaded, text: str) -> list[dict]:
    """The course model's tokens of ``text``: its id and its text (a byte fragment as <0xNN>)."""
    return [{"id": i, "piece": loaded.tokenizer.readable(i)} for i in loaded.encode(text)]


def text_embedding(loaded, text: str) -> np.ndarray:
    """(tokens, d_model): the rows of the course model's embedding table W_E for ``text``."""
    return loaded.model.state_dict()["embed.W_E"][loaded.encode(text)].double().numpy()


# --- a byte-pair encoder, trained here -----------------------------------------------------


@dataclass(frozen=True)
class Merge:
    left: str
    right: str
    count: int  # how often the pair stood side by side in the corpus when it was merged

    @property
    def token(self) -> str:
        return self.left + self.right


def word_counts(sentences: list[str] | tuple[str, ...]) -> Counter:
    """The corpus's words (split at white space: a merge never crosses a word's end) and how often."""
    return Counter(word for sentence in sentences for word in sentence.split())


def alphabet(sentences) -> list[str]:
    """The starting vocabulary: every character of the corpus, in code-point order."""
    return sorted({c for word in word_counts(sentences) for c in word})


def merged(symbols: tuple[str, ...], merge: Merge) -> tuple[str, ...]:
    """``symbols`` with every (left, right) neighbour pair joined, left to right."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == merge.left and symbols[i + 1] == merge.right:
            out.append(merge.token)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def train_bpe(sentences, merges: int = MAX_MERGES) -> list[Merge]:
    """Byte-pair encoding's training: start from single characters; ``merges`` times, join the pair
    of neighbours seen most often (each word weighted by its count) into a new token. A tie goes to
    the pair whose tokens entered the vocabulary first (the `tokenizers` library's rule). Stops
    early when no word has two symbols left."""
    counts = word_counts(sentences)
    rank = {c: i for i, c in enumerate(alphabet(sentences))}
    words = {word: tuple(word) for word in counts}
    done: list[Merge] = []
    while len(done) < merges:
        pairs = Counter()
        for word, symbols in words.items():
            for pair in pairwise(symbols):
                pairs[pair] += counts[word]
        if not pairs:
            break
        (left, right), count = min(pairs.items(), key=lambda item: (-item[1], rank[item[0][0]], rank[item[0][1]]))
        merge = Merge(left, right, count)
        done.append(merge)
        rank.setdefault(merge.token, len(rank))
        words = {word: merged(symbols, merge) for word, symbols in words.items()}
    return done


def segment(word: str, merges: list[Merge]) -> list[str]:
    """A word's tokens after ``merges``, applied in the order they were learned."""
    symbols = tuple(word)
    for merge in merges:
        symbols = merged(symbols, merge)
    return list(symbols)


def tokenize(sentence: str, merges: list[Merge]) -> list[list[str]]:
    """Each word's tokens."""
    return [segment(word, merges) for word in sentence.split()]


def vocabulary(sentences, merges: list[Merge]) -> list[str]:
    """The alphabet, then each merge's new token (a merge that makes a token already there adds none)."""
    vocab = alphabet(sentences)
    for merge in merges:
        if merge.token not in vocab:
            vocab.append(merge.token)
    return vocab


# --- audio, images, prices ------------------------------------------------------------------


def audio_clip(seconds: float = AUDIO["seconds"], rate: int = SAMPLE_RATE, seed: int = SEED) -> np.ndarray:
    """A synthetic clip: a tone gliding from 220 to 880 Hz under a slow swell, with a little noise."""
    t = np.arange(round(seconds * rate)) / rate
    glide = 2 * np.pi * (220 * t + (880 - 220) * t**2 / (2 * max(seconds, 1e-9)))
    noise = np.random.default_rng(seed).normal(0, 0.05, t.size)
    return 0.6 * np.sin(glide) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t)) + noise


def frame_count(samples: int, window: int, hop: int) -> int:
    """Whole windows of ``window`` samples, one every ``hop`` samples from the first sample."""
    if window <= 0 or hop <= 0:
        raise GlassboxError("A frame's window and hop are at least one sample")
    return 0 if samples < window else 1 + (samples - window) // hop


def frames(signal: np.ndarray, window: int, hop: int) -> np.ndarray:
    """(frames, window): frame k is signal[k·hop : k·hop + window]."""
    n = frame_count(len(signal), window, hop)
    return np.lib.stride_tricks.sliding_window_view(signal, window)[::hop][:n] if n else np.zeros((0, window))


def ms_to_samples(ms: float, rate: int = SAMPLE_RATE) -> int:
    return round(ms * rate / 1000)


def picture(height: int = IMAGE["height"], width: int = IMAGE["width"], seed: int = SEED) -> np.ndarray:
    """A synthetic RGB picture in [0, 1]: a sky gradient, a sun, a striped ground, a little grain."""
    y, x = np.mgrid[0:height, 0:width] / np.array([height, width])[:, None, None]
    sun = ((x - 0.7) ** 2 + (y - 0.3) ** 2 < 0.02).astype(float)
    ground = (y > 0.65).astype(float)
    stripes = ground * (np.sin(40 * x + 10 * y) > 0)
    grain = np.random.default_rng(seed).uniform(0, 0.05, (height, width))
    red = (1 - ground) * (0.3 + 0.4 * y) + sun * 0.7 + ground * (0.2 + 0.3 * stripes) + grain
    green = (1 - ground) * (0.5 + 0.3 * y) + sun * 0.5 + ground * (0.5 + 0.2 * stripes) + grain
    blue = (1 - ground) * (0.9 - 0.2 * y) - sun * 0.5 + ground * 0.2 + grain
    return np.clip(np.stack([red, green, blue], axis=-1), 0, 1)


def patch_count(height: int, width: int, patch: int) -> int:
    """Whole patch × patch squares in a height × width image (a ragged edge is cropped, as ViT's is)."""
    return (height // patch) * (width // patch)


def patches(image: np.ndarray, patch: int) -> np.ndarray:
    """(patches, patch·patch·channels): the image cut row by row into squares, each flattened."""
    rows, cols = image.shape[0] // patch, image.shape[1] // patch
    cut = image[: rows * patch, : cols * patch].reshape(rows, patch, cols, patch, -1)
    return cut.transpose(0, 2, 1, 3, 4).reshape(rows * cols, -1)


def prices(days: int = PRICES["days"], seed: int = SEED) -> np.ndarray:
    """A synthetic closing price for ``days`` days: a random walk of daily log returns (σ = 1.2%)."""
    returns = np.random.default_rng(seed).normal(0.0003, 0.012, days - 1)
    return 100 * np.exp(np.concatenate([[0.0], np.cumsum(returns)]))


def bin_edges(bins: int = PRICES["bins"], clip: float = PRICES["clip"]) -> np.ndarray:
    return np.linspace(-clip, clip, bins + 1)


def return_tokens(series: np.ndarray, bins: int = PRICES["bins"], clip: float = PRICES["clip"]) -> np.ndarray:
    """Each day's log return as the id of its bin: ``bins`` equal bins over ±clip, 0 the lowest;
    returns beyond ±clip go to the end bins."""
    returns = np.diff(np.log(series))
    return np.searchsorted(bin_edges(bins, clip)[1:-1], returns, side="right")


def embedding_weights(n_in: int, d_model: int = D_MODEL, seed: int = SEED) -> np.ndarray:
    """(n_in, d_model): a tiny model's untrained linear embedding, N(0, 1/n_in) entries."""
    return np.random.default_rng(seed).normal(0, 1 / np.sqrt(n_in), (n_in, d_model))


def embed(rows: np.ndarray, d_model: int = D_MODEL, seed: int = SEED) -> np.ndarray:
    """(tokens, d_model): each row (a frame, a flattened patch) times the linear embedding."""
    return rows @ embedding_weights(rows.shape[1], d_model, seed)


def embed_ids(ids: np.ndarray, vocab: int, d_model: int = D_MODEL, seed: int = SEED) -> np.ndarray:
    """(tokens, d_model): token ids looked up in an embedding table (one-hot ids times a linear map)."""
    return embedding_weights(vocab, d_model, seed)[ids]


@dataclass
class Domain:
    name: str
    raw: str  # what the input is, with its shape
    tokens: str  # what one token is
    length: int  # the sequence length
    token_shape: tuple[int, ...]  # (length, numbers per token) before the embedding
    embedded: np.ndarray  # (length, D_MODEL)

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "raw": self.raw,
            "tokens": self.tokens,
            "length": self.length,
            "token_shape": list(self.token_shape),
            "embedded_shape": list(self.embedded.shape),
        }


def audio_domain(
    seconds: float = AUDIO["seconds"], window_ms: float = AUDIO["window_ms"], hop_ms: float = AUDIO["hop_ms"]
) -> Domain:
    clip = audio_clip(seconds)
    window, hop = ms_to_samples(window_ms), ms_to_samples(hop_ms)
    cut = frames(clip, window, hop)
    return Domain(
        "audio",
        f"{clip.size:,} samples ({seconds:g} s at {SAMPLE_RATE:,} Hz)",
        f"a {window_ms:g} ms frame ({window} samples), one every {hop_ms:g} ms ({hop} samples)",
        len(cut),
        cut.shape,
        embed(cut),
    )


def image_domain(height: int = IMAGE["height"], width: int = IMAGE["width"], patch: int = IMAGE["patch"]) -> Domain:
    cut = patches(picture(height, width), patch)
    return Domain(
        "image",
        f"{height}×{width} pixels × 3 colours",
        f"a {patch}×{patch} patch ({patch * patch * 3} numbers)",
        len(cut),
        cut.shape,
        embed(cut),
    )


def price_domain(days: int = PRICES["days"], bins: int = PRICES["bins"], clip: float = PRICES["clip"]) -> Domain:
    ids = return_tokens(prices(days), bins, clip)
    return Domain(
        "prices",
        f"{days} daily prices",
        f"a day's return, binned: one of {bins} ids",
        len(ids),
        (len(ids), 1),
        embed_ids(ids, bins),
    )


# --- the lesson's figures and exercises -----------------------------------------------------


def figures(loaded) -> dict:
    merges = train_bpe(TRAIN_SENTENCES)
    return {
        "text": TEXT,
        "characters": len(TEXT),
        "bpe_tokens": bpe_tokens(loaded, TEXT),
        "byte_tokens": byte_tokens(TEXT),
        "text_embedded_shape": list(text_embedding(loaded, TEXT).shape),
        "training_sentences": list(TRAIN_SENTENCES),
        "merges": [{"left": m.left, "right": m.right, "count": m.count} for m in merges],
        "alphabet": alphabet(TRAIN_SENTENCES),
        "tokens_after": {
            str(k): [sum(len(w) for w in tokenize(s, merges[:k])) for s in TRAIN_SENTENCES] for k in (0, 5, 10, 20, len(merges))
        },
        "domains": [d.as_json() for d in (audio_domain(), image_domain(), price_domain())],
        "d_model": D_MODEL,
    }


EXERCISE_WORDS = ("mat", "cat", "sat", "the", "that", "hat", "ran", "rat", "than", "tan")


def exercises(seed: int, loaded=None) -> list[Exercise]:
    rng = draw("tokens", seed)

    patch = int(rng.choice([8, 14, 16, 32]))
    h, w = patch * int(rng.integers(2, 17)), patch * int(rng.integers(2, 17))
    n_patches = patch_count(h, w, patch)
    patches_ex = Exercise(
        "patches",
        f"An image of {h}×{w} pixels is cut into {patch}×{patch} patches, one token each. How many tokens?",
        n_patches,
        hint="Count the patches down a column and along a row, then multiply.",
        solution=f"{h}/{patch} = {h // patch} rows of patches, {w}/{patch} = {w // patch} columns: "
        f"{h // patch} × {w // patch} = {n_patches} tokens.",
        unit="tokens",
        data={"height": h, "width": w, "patch": patch},
    )

    rate = int(rng.choice([8_000, 16_000, 24_000, 48_000]))  # every window and hop a whole number of samples
    seconds = float(rng.choice([0.5, 1.0, 1.5, 2.0, 3.0]))
    window_ms, hop_ms = int(rng.choice([20, 25, 30, 40])), int(rng.choice([10, 15, 20]))
    samples, window, hop = round(seconds * rate), ms_to_samples(window_ms, rate), ms_to_samples(hop_ms, rate)
    n_frames = frame_count(samples, window, hop)
    frames_ex = Exercise(
        "audio_frames",
        f"A clip of {seconds:g} s sampled at {rate:,} Hz is cut into frames of {window} samples "
        f"({window_ms} ms), a new frame every {hop} samples ({hop_ms} ms), the first at sample 0, whole frames only. "
        "How many frames?",
        n_frames,
        hint="The clip has seconds × rate samples. After the first frame, each hop adds one frame while a whole "
        "window still fits.",
        solution=f"{seconds:g} × {rate:,} = {samples:,} samples. 1 + ⌊({samples:,} − {window}) / {hop}⌋ = "
        f"1 + {(samples - window) // hop} = {n_frames} frames.",
        unit="frames",
        data={"samples": samples, "window": window, "hop": hop, "rate": rate, "seconds": seconds},
    )

    word = str(rng.choice(EXERCISE_WORDS))
    extra = str(rng.choice(["é", "ü", "€", "語", "🙂"]))
    text = f"{word} {extra}"
    n_bytes = len(text.encode("utf-8"))
    bytes_ex = Exercise(
        "bytes",
        f"How many tokens does a byte-level tokenizer (one token per UTF-8 byte) make of the text "
        f"“{text}” (a space between the two parts)?",
        n_bytes,
        hint="UTF-8 stores a character in one to four bytes: a letter of plain English or a space in one, é in "
        "two, € in three, 🙂 in four.",
        solution=f"{len(word)} letters + 1 space + {len(extra.encode('utf-8'))} bytes for {extra} = {n_bytes} tokens.",
        unit="tokens",
        data={"text": text},
    )

    merges = train_bpe(TRAIN_SENTENCES)[: int(rng.integers(2, 7))]
    target = str(rng.choice(["that cat", "the rat", "a cat sat", "the hat", "than that"]))
    pieces = tokenize(target, merges)
    n_bpe = sum(len(p) for p in pieces)
    listed = ", ".join(f"{m.left}+{m.right}" for m in merges)
    bpe_ex = Exercise(
        "bpe_count",
        f"A BPE tokenizer starts from single characters and applies these merges in this order: "
        f"{listed}. Words are tokenized one by one (spaces are not tokens). How many tokens does it make of "
        f"“{target}”?",
        n_bpe,
        hint="Start from letters; apply each merge in turn to every place its two pieces stand side by side.",
        solution="Word by word: " + " | ".join(" · ".join(p) for p in pieces) + f", {n_bpe} tokens.",
        unit="tokens",
        data={"text": target, "merges": [[m.left, m.right] for m in merges]},
    )
    return [patches_ex, frames_ex, bytes_ex, bpe_ex]
