"""Exercises: the learner answers, the engine checks. A lesson module's
``exercises(seed, loaded) -> list[Exercise]`` draws its numbers from ``draw(slug, seed)`` and
computes every answer, hint and worked solution from them (plain torch/numpy, or the engine on
``loaded``); nothing is typed in. The same seed gives the same exercises, so a learner's set is
reproduced by its seed (``?seed=`` in the app, ``--seed`` in the CLI).

A numeric answer is right when it is within ``tolerance`` of the computed one (absolute, or a
fraction of it when ``relative``); a choice is right when it is the computed choice. What a
learner types is parsed leniently: ``0.25``, ``1/4``, ``25%``, ``2.5e-1``, ``124,439,808``."""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from glassbox.model.engine import GlassboxError


@dataclass(frozen=True)
class Verdict:
    right: bool
    message: str  # what the page says at once: right, or how far off


@dataclass(frozen=True)
class Exercise:
    key: str  # unique within its lesson: the progress record's name for it
    question: str  # plain text, every number in it
    answer: float | int | str  # the computed answer: a number, or one of ``choices``
    tolerance: float = 0.0  # numbers: how far off still counts as right (0: exactly)
    relative: bool = False  # the tolerance is a fraction of |answer|
    choices: tuple[str, ...] = ()  # non-empty: the learner picks one
    hint: str = ""
    solution: str = ""  # the worked solution, from the same numbers
    unit: str = ""
    data: dict = field(default_factory=dict)  # the numbers behind it, for a script or a teacher

    def __post_init__(self):
        if self.choices and self.answer not in self.choices:
            raise ValueError(f"exercise {self.key}: the answer {self.answer!r} is not one of its choices")

    @property
    def kind(self) -> str:
        return "choice" if self.choices else "number"

    @property
    def allowed(self) -> float:
        """The absolute distance from the answer that still counts as right."""
        return self.tolerance * abs(float(self.answer)) if self.relative else self.tolerance

    def tolerance_note(self) -> str:
        if self.kind == "choice":
            return ""
        if self.tolerance == 0:
            return "exactly"
        if self.relative:
            return f"within {self.tolerance:.0%} of the answer"
        return f"within ±{self.tolerance:g}"

    def check(self, given: str | float | int | None) -> Verdict:
        if given is None or (isinstance(given, str) and not given.strip()):
            return Verdict(False, "No answer yet.")
        if self.kind == "choice":
            right = str(given) == self.answer
            return Verdict(right, "Right." if right else f"Not {given}. Try again, or take the hint.")
        try:
            value = parse_number(given)
        except ValueError as exc:
            return Verdict(False, str(exc))
        off = abs(value - float(self.answer))
        if off <= self.allowed * (1 + 1e-12):
            return Verdict(True, f"Right ({self.tolerance_note()}).")
        side = "high" if value > float(self.answer) else "low"
        return Verdict(False, f"Not quite: {value:g} is too {side}. Answers count {self.tolerance_note()}.")

    def as_json(self) -> dict:
        record = asdict(self)
        record["choices"] = list(self.choices)
        record["kind"] = self.kind
        record["counts"] = self.tolerance_note()
        return record


NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
# a comma that does not separate thousands (not three digits after it, after a leading 0 or after
# the decimal point): "0,25" and "1.000,5" use a decimal comma, refused rather than read as 25, 1.0005
NOT_THOUSANDS = re.compile(r",(?!\d{3}(\D|$))|(^|[^\d.])0,|\.\d*,")


def parse_number(given: str | float | int) -> float:
    """A learner's number: 0.25, -3, 1/4, 25%, 2.5e-1, 124,439,808, 124_439_808, 1 000."""
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        value = float(given)
    else:
        text = str(given).strip().replace("−", "-").replace("_", "").replace(" ", "")
        if NOT_THOUSANDS.search(text):
            raise ValueError(f"{str(given)[:40]!r}: write the decimal point as a dot (0.25), commas only between thousands.")
        text = text.replace(",", "")
        percent = text.endswith("%")
        text = text.rstrip("%")
        if "/" in text:
            top, _, bottom = text.partition("/")
            if not (NUMBER.match(top) and NUMBER.match(bottom)) or float(bottom) == 0:
                raise ValueError(f"{str(given)[:40]!r} is not a number (write 0.25, 1/4 or 25%).")
            value = float(top) / float(bottom)
        elif NUMBER.match(text):
            value = float(text)
        else:
            raise ValueError(f"{str(given)[:40]!r} is not a number (write 0.25, 1/4 or 25%).")
        if percent:
            value /= 100
    if not math.isfinite(value):
        raise ValueError("Give a finite number.")
    return value


def draw(slug: str, seed: int) -> np.random.Generator:
    """The random numbers of a lesson's exercises for a seed: the same on every machine, and
    different lessons draw differently for the same seed."""
    return np.random.default_rng([check_seed(seed), zlib.crc32(slug.encode())])


MAX_SEED = 10**9
SEED = re.compile(r"[0-9]{1,10}")


def check_seed(seed) -> int:
    """A seed from a link, a form or the command line: a whole number from 0 to MAX_SEED."""
    text = str(seed).strip()
    # ASCII digits, at most 10 of them: str.isdigit() also passes "²", which int() refuses, and
    # int() refuses strings of over 4300 digits
    if isinstance(seed, bool) or not SEED.fullmatch(text) or int(text) > MAX_SEED:
        raise GlassboxError(f"An exercise seed is a whole number from 0 to {MAX_SEED}, not {text[:20]!r}")
    return int(text)


def check_set(slug: str, exercises: list[Exercise]) -> list[Exercise]:
    """A lesson's set as the course needs it: two to four exercises with distinct keys."""
    keys = [x.key for x in exercises]
    if not 2 <= len(exercises) <= 4 or len(set(keys)) != len(keys):
        raise ValueError(f"lesson {slug}: {len(exercises)} exercises with keys {keys} (want 2–4, distinct)")
    return exercises
