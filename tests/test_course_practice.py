"""Issue 45: the learner practises. Every lesson's exercises for three seeds, answered right and
wrong (the verdict checked); the course listing and a teacher's key as JSON from the command line;
assignment links built, parsed and opened (AppTest), and the progress the course contents show.

The exercises' answers themselves are recomputed independently, lesson by lesson, in
test_course_exercises_a.py, test_course_exercises_b.py and each new lesson's test file; here the
reference is the verdict's own definition: |given − answer| ≤ tolerance."""

import json

import pytest

from glassbox.app.components.exercises import progress_report
from glassbox.app.explore import VIEWS
from glassbox.app.explore.seq2seq import VIEWS as SEQ2SEQ_VIEWS
from glassbox.model.course import LESSON, LESSONS
from glassbox.model.course.assignments import EXPLORER_VIEWS, Assignment, from_query
from glassbox.model.course.exercises import Exercise
from glassbox.model.engine import GlassboxError
from glassbox.model.io.checkpoint import load
from tests.helpers import cli, shown, start

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def loaded():
    return load("default")


def typed(exercise: Exercise) -> str:
    """The computed answer as a learner would type it: a choice's text, or the number's digits."""
    if exercise.kind == "choice":
        return exercise.answer
    return f"{exercise.answer:,}" if isinstance(exercise.answer, int) else repr(float(exercise.answer))


def wrong(exercise: Exercise) -> str:
    if exercise.kind == "choice":
        return next(c for c in exercise.choices if c != exercise.answer)
    return repr(float(exercise.answer) + 2 * exercise.allowed + 1)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda x: x.slug)
def test_every_lesson_has_exercises_checked_right_and_wrong(lesson, loaded):
    sets = {}
    for seed in SEEDS:
        exercises = lesson.exercises(seed, loaded)
        assert 2 <= len(exercises) <= 4
        assert [x.key for x in exercises] == [x.key for x in lesson.exercises(seed, loaded)]  # a seed reproduces
        assert [x.answer for x in exercises] == [x.answer for x in lesson.exercises(seed, loaded)]
        for exercise in exercises:
            assert exercise.question and exercise.solution, exercise.key
            assert exercise.check(typed(exercise)).right, (seed, exercise.key, typed(exercise))
            assert not exercise.check(wrong(exercise)).right, (seed, exercise.key, wrong(exercise))
            assert not exercise.check("").right
            json.dumps(exercise.as_json(), allow_nan=False)  # what the CLI prints
        sets[seed] = [x.question for x in exercises]
    assert len({tuple(q) for q in sets.values()}) > 1, "three seeds gave one set of questions"


def test_the_listing_and_a_teachers_key_are_json():
    listing = json.loads(cli("course", "--json").stdout)
    assert [x["slug"] for x in listing] == [x.slug for x in LESSONS] and len(listing) == 18
    key = json.loads(cli("course", "attention", "--exercises", "--seed", "7", "--json").stdout)
    assert key["seed"] == 7 and key["lesson"] == "attention"
    fresh = LESSON["attention"].exercises(7)
    assert [x["answer"] for x in key["exercises"]] == [x.answer for x in fresh]
    bad = cli("course", "attention", "--exercises", "--seed", "-3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "seed" in bad.stderr


def test_assignment_links_round_trip():
    link = Assignment("mask", prompt="Lily & Max <b>", seed=42)
    assert link.url("http://host:8501/") == (
        "http://host:8501/course-mask?model=default&prompt=Lily+%26+Max+%3Cb%3E&seed=42&assignment=1"
    )
    assert from_query("mask", link.query()) == link
    assert from_query("mask", {"seed": "3"}) is None  # not marked: an ordinary link
    view = Assignment("Attention", model="worked-example", prompt="the cat")
    assert view.url().startswith("http://localhost:8501/explore?view=Attention&model=worked-example")
    for bad in (
        dict(target="nope"),
        dict(target="mask", seed="x"),
        dict(target="mask", seed=-1),
        dict(target="mask", prompt="x" * 5000),
    ):
        with pytest.raises(GlassboxError):
            Assignment(**bad)
    assert set(EXPLORER_VIEWS) == set(VIEWS) | set(SEQ2SEQ_VIEWS)  # the library's copy of the app's names
    printed = cli("assign", "induction", "--seed", "5", "--base", "https://glassbox.example/app")
    assert printed.stdout.strip() == "https://glassbox.example/app/course-induction?model=default&seed=5&assignment=1"
    refused = cli("assign", "Attentoin")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "explorer view" in refused.stderr


def test_an_assignment_link_opens_its_state_read_only_then_starts_from_it():
    at = start(page="course/mask.py", assignment="1", seed="11", prompt="Max saw a cat.")
    banner = shown(" ".join(m.value for m in at.markdown))
    assert "Assignment" in banner and "exercise seed: 11" in banner and "prompt: Max saw a cat." in banner
    assert at.session_state["mask_prompt"] == "Max saw a cat."  # the page opens on the link's prompt
    assert any("Seed 11" in shown(c.value) for c in at.caption)
    assert not [b for b in at.button if b.label == "New set"]  # the assignment fixes the set
    at.button(key="assignment_start").click().run()
    assert "assignment" not in at.query_params and at.query_params["seed"] == "11"
    assert [b for b in at.button if b.label == "New set"]
    assert at.session_state["mask_prompt"] == "Max saw a cat."  # starting from it keeps what it fixed


@pytest.mark.parametrize("slug, seed", [("attention", 0), ("objective", 1), ("key-figures", 2)])
def test_answers_get_their_verdict_on_the_page(slug, seed):
    """AppTest: each exercise answered wrong, then right; the verdict shown, the solution offered,
    and the right answers recorded for the browser's progress."""
    lesson = next(x for x in LESSONS if x.slug == slug)
    at = start(page=lesson.page, seed=str(seed))
    exercises = lesson.exercises(seed)
    for exercise in exercises:
        answer_key = f"answer:{slug}:{seed}:{exercise.key}"
        for given, right in ((wrong(exercise), False), (typed(exercise), True)):
            if exercise.kind == "choice":
                at.radio(key=answer_key).set_value(given)
            else:
                at.text_input(key=answer_key).input(given)
            at.button(key=f"FormSubmitter:form:{slug}:{seed}:{exercise.key}-Check").click().run()
            assert not at.exception
            assert at.session_state[f"verdict:{slug}:{seed}:{exercise.key}"].right is right
    shown_verdicts = [shown(s.value) for s in at.success]
    assert len(shown_verdicts) == len(exercises) and all(v.startswith("Right") for v in shown_verdicts)
    assert {r["key"] for r in at.session_state["course_right"]} == {x.key for x in exercises}
    sent = [json.loads(c.proto.json) for c in at.get("bidi_component") if "records" in json.loads(c.proto.json)]
    assert {r["key"] for r in sent[-1]["records"]} == {x.key for x in exercises}  # what the browser stores


def test_the_contents_show_the_browsers_progress():
    at = start(page="course/index.py")
    assert any("not started" in c.value for c in at.caption)
    at.session_state["course_progress"] = {
        "progress": {"version": 1, "lessons": {"mask": {"of": 3, "done": {"a": {"seed": 4, "at": "2026-11-28T10:00:00Z"}}}}}
    }
    at.run()
    assert any("1 of 3" in m.value for m in at.markdown)
    report = progress_report(at.session_state["course_progress"]["progress"])
    assert report["lessons"] == [
        {
            "lesson": "mask",
            "title": "The causal mask",
            "exercises": 3,
            "answered_right": {"a": {"seed": 4, "at": "2026-11-28T10:00:00Z"}},
        }
    ]
