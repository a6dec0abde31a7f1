"""Issue 45: the exercises of the attention, sqrt-dk, positions, mask and objective lessons, and the
exercise machinery itself (model/course/exercises.py).

References and tolerances: for seeds 0, 1 and 2 every answer is recomputed from the exercise's
``data`` alone by a hand-written formula (the math module and plain loops, never the lesson
module's functions): a softmax as exponentials over their sum, the attention output as a weighted
sum, the variance of q·k as d_k·Var(q_i)·Var(k_i) (and that formula against a numpy sample, 5%),
the sinusoidal table from its definition, RoPE as two 2-D rotations by cos/sin, the causal mask as
a loop over j ≤ i, the loss as −ln p, perplexity as e^loss and warmup + cosine from its published
form. The answers agree to 1e-9 (relative). The learner's answer is typed as the question asks
(3 decimals, 3 or 4 significant figures, a count with thousands commas, a choice's text) and must
be judged right; an answer off by three tolerances (or by one, for an exact count) must not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from glassbox.model.course import LESSON
from glassbox.model.course.exercises import Exercise, check_seed, check_set, draw, parse_number
from glassbox.model.engine import GlassboxError
from tests.helpers import check_against_references

SEEDS = (0, 1, 2)
SLUGS = ("attention", "sqrt-dk", "positions", "mask", "objective")


# --- independent references: the answer from ex.data alone ----------------------------------


def softmax(scores: list[float]) -> list[float]:
    exps = [math.exp(s) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b))


def turned(v, angle: float) -> tuple[float, float]:
    """(x, y) turned counter-clockwise by ``angle`` radians."""
    x, y = v
    return x * math.cos(angle) - y * math.sin(angle), x * math.sin(angle) + y * math.cos(angle)


def attention_output(d: dict) -> float:
    weights = softmax([dot(d["query"], k) / math.sqrt(d["d_k"]) for k in d["keys"]])
    return sum(w * v[d["axis"]] for w, v in zip(weights, d["values"]))


def most_weight(d: dict) -> str:
    scores = [dot(d["query"], k) for k in d["keys"]]
    return d["tokens"][scores.index(max(scores))]


def pe_value(d: dict) -> float:
    i = d["dim"] // 2
    angle = d["pos"] / 10000 ** (2 * i / d["d_model"])
    return math.cos(angle) if d["dim"] % 2 else math.sin(angle)


def rope_score(d: dict) -> float:
    return dot(turned(d["q"], d["m"] * d["theta"]), turned(d["k"], d["n"] * d["theta"]))


def kept(d: dict) -> int:
    n = d["length"]
    return sum(1 for i in range(n) for j in range(n) if j <= i)


def visible(d: dict) -> str:
    words, query = d["words"], d["query"]
    seen = [j for j in range(len(words)) if j <= query]
    return f"positions 1 to {seen[-1] + 1}: " + " ".join(words[j] for j in seen)


def masked_weight(d: dict) -> float:
    return softmax([s for j, s in enumerate(d["scores"]) if j <= d["query"]])[d["key"]]


def learning_rate(d: dict) -> float:
    """Warmup + cosine: linear to the peak over the warmup steps, then half a cosine to floor·peak."""
    step, steps, peak, warmup, floor = d["step"], d["steps"], d["peak"], d["warmup"], d["floor"]
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / (steps - warmup)
    return peak * (floor + (1 - floor) * (1 + math.cos(math.pi * t)) / 2)


# (slug, key): (the reference, how the question asks the learner to write it)
REFERENCE = {
    ("attention", "softmax_weight"): (lambda d: softmax(d["scores"])[d["key"]], ".3f"),
    ("attention", "output_coordinate"): (attention_output, ".3f"),
    ("attention", "most_weight"): (most_weight, None),
    ("sqrt-dk", "variance"): (lambda d: d["d_k"] * d["var_q"] * d["var_k"], "g"),
    ("sqrt-dk", "scaled_score"): (lambda d: d["score"] / math.sqrt(d["d_k"]), ".3f"),
    ("sqrt-dk", "largest_unscaled"): (lambda d: max(softmax(d["scores"])), ".3f"),
    ("sqrt-dk", "largest_scaled"): (lambda d: max(softmax([s / math.sqrt(d["d_k"]) for s in d["scores"]])), ".3f"),
    ("positions", "pe_value"): (pe_value, ".3f"),
    ("positions", "wavelength"): (lambda d: 2 * math.pi * 10000 ** (2 * d["pair"] / d["d_model"]), ".3g"),
    ("positions", "rope_score"): (rope_score, ".3f"),
    ("mask", "kept"): (kept, ","),
    ("mask", "visible"): (visible, None),
    ("mask", "masked_weight"): (masked_weight, ".3f"),
    ("objective", "loss"): (lambda d: -math.log(d["p"]), ".3f"),
    ("objective", "mean_loss"): (lambda d: sum(-math.log(p) for p in d["p"]) / len(d["p"]), ".3f"),
    ("objective", "perplexity"): (lambda d: math.exp(d["loss"]), ".4g"),
    ("objective", "learning_rate"): (learning_rate, ".4g"),
}


def typed(exercise: Exercise, style: str | None) -> str:
    """The answer as the question asks for it: a choice's text, or the number rounded as told."""
    return exercise.answer if style is None else format(exercise.answer, style)


@pytest.mark.parametrize("slug", SLUGS)
@pytest.mark.parametrize("seed", SEEDS)
def test_answers_match_an_independent_recomputation(slug, seed):
    check_against_references(LESSON[slug].exercises(seed), REFERENCE, slug, seed, typed)


def test_the_variance_formula_against_a_numpy_sample():
    """d_k·Var(q_i)·Var(k_i) against the variance of 20,000 sampled q·k (numpy, within 5%: the
    sample's relative error is about 1%)."""
    rng = np.random.default_rng(0)
    for seed in SEEDS:
        d = next(x for x in LESSON["sqrt-dk"].exercises(seed) if x.key == "variance").data
        q = rng.normal(0, math.sqrt(d["var_q"]), (20_000, d["d_k"]))
        k = rng.normal(0, math.sqrt(d["var_k"]), (20_000, d["d_k"]))
        assert (q * k).sum(1).var() == pytest.approx(d["d_k"] * d["var_q"] * d["var_k"], rel=0.05)


def test_the_learning_rate_exercise_also_asks_inside_the_warmup():
    """Some seed draws a step inside the warmup; its answer is the straight line, by hand."""
    inside = next(
        x
        for seed in range(200)
        for x in LESSON["objective"].exercises(seed)
        if x.key == "learning_rate" and x.data["step"] < x.data["warmup"]
    )
    d = inside.data
    assert inside.answer == pytest.approx(d["peak"] * (d["step"] + 1) / d["warmup"], rel=1e-12)
    assert "warming up" in inside.solution


def test_a_seed_reproduces_its_set_and_seeds_differ():
    for slug in SLUGS:
        first, again = LESSON[slug].exercises(5), LESSON[slug].exercises(5)
        assert [(x.question, x.answer, x.data) for x in first] == [(x.question, x.answer, x.data) for x in again]
        other = LESSON[slug].exercises(6)
        assert [x.question for x in first] != [x.question for x in other], slug


# --- the machinery: model/course/exercises.py -----------------------------------------------


@pytest.mark.parametrize(
    "given, value",
    [
        ("0.25", 0.25),
        ("1/4", 0.25),
        ("25%", 0.25),
        ("2.5e-1", 0.25),
        ("124,439,808", 124_439_808.0),
        ("−3", -3.0),
        ("-3", -3.0),
        (" 1 000 ", 1000.0),
        ("1,000.5", 1000.5),
        ("-1/8", -0.125),
        (".5", 0.5),
        (7, 7.0),
        (0.125, 0.125),
    ],
)
def test_parse_number_reads_what_a_learner_types(given, value):
    assert parse_number(given) == value


@pytest.mark.parametrize(
    "given", ["abc", "1/0", "inf", "nan", "1e999", "", "1/2/3", "0,25", "1,2345", "1.000,5", "%", float("inf"), float("nan")]
)
def test_parse_number_refuses_what_is_not_a_finite_number(given):
    with pytest.raises(ValueError):
        parse_number(given)


def test_check_seed():
    assert check_seed(" 42 ") == 42 and check_seed(0) == 0 and check_seed(10**9) == 10**9
    for bad in (-1, "x", 10**9 + 1, "1.5", True, "²", "1" * 5000, ""):
        with pytest.raises(GlassboxError):
            check_seed(bad)


def test_draw_is_reproducible_and_differs_by_lesson():
    assert draw("mask", 3).random(4).tolist() == draw("mask", 3).random(4).tolist()
    assert draw("mask", 3).random(4).tolist() != draw("objective", 3).random(4).tolist()
    assert draw("mask", 3).random(4).tolist() != draw("mask", 4).random(4).tolist()


def test_the_verdict():
    absolute = Exercise("a", "q", 0.5, tolerance=0.01)
    assert absolute.check("0.509").right and absolute.check("1/2").right and not absolute.check("0.52").right
    assert "too high" in absolute.check("0.52").message and "too low" in absolute.check("0.48").message
    assert not absolute.check("").right and not absolute.check(None).right
    assert not absolute.check("half").right and "not a number" in absolute.check("half").message
    relative = Exercise("r", "q", 200.0, tolerance=0.01, relative=True)
    assert relative.allowed == 2.0 and relative.check("201.9").right and not relative.check("202.1").right
    exact = Exercise("e", "q", 21_528)
    assert exact.check("21,528").right and not exact.check("21529").right and exact.tolerance_note() == "exactly"
    choice = Exercise("c", "q", "b", choices=("a", "b"))
    assert choice.check("b").right and not choice.check("a").right and choice.kind == "choice"
    with pytest.raises(ValueError):
        Exercise("bad", "q", "z", choices=("a", "b"))


def test_check_set_wants_two_to_four_distinct_keys():
    ex = [Exercise(k, "q", 1) for k in "abcde"]
    assert check_set("x", ex[:2]) == ex[:2] and check_set("x", ex[:4]) == ex[:4]
    for bad in (ex[:1], ex[:5], [ex[0], ex[0]]):
        with pytest.raises(ValueError):
            check_set("x", bad)
