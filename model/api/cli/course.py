"""`glassbox course [LESSON]`: the lessons; with a lesson, its figures computed now, or its
exercises with their answers (a teacher's key)."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("course", help="the course's lessons; with a lesson, its figures computed now")
    p.add_argument("lesson", nargs="?", help="a lesson's name (`glassbox course` lists them)")
    add_model_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="re-run what a lesson ships as measured (sqrt-dk: its two training runs) and rewrite it",
    )
    p.add_argument(
        "--exercises",
        action="store_true",
        help="print the lesson's exercises with their answers, hints and solutions (a teacher's key)",
    )
    p.add_argument("--seed", default=0, help="the exercises' seed, 0 to 10⁹ (default 0; the app's ?seed=)")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.course import LESSONS, lesson
    from glassbox.model.engine import GlassboxError

    if args.lesson is None:
        if args.exercises:
            raise GlassboxError("--exercises needs a lesson: `glassbox course LESSON --exercises --seed S`")
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "number": number,
                            "slug": x.slug,
                            "title": x.title,
                            "question": x.question,
                            "page": x.url_path,
                            "step": x.step,
                            "view": x.view,
                        }
                        for number, x in enumerate(LESSONS, 1)
                    ],
                    ensure_ascii=False,
                )
            )
            return 0
        width = max(len(x.slug) for x in LESSONS)
        for number, x in enumerate(LESSONS, 1):
            print(f"{number}. {x.slug.ljust(width)}  {x.title}: {x.question}")
        print(
            "`glassbox course LESSON --json` prints a lesson's figures, computed now; "
            "`--exercises --seed S` its exercises and their answers."
        )
        return 0
    chosen = lesson(args.lesson)  # an unknown name is refused before a model is loaded
    if args.remeasure:
        print(chosen.remeasure())
        return 0
    if args.exercises:
        from glassbox.model.course.exercises import check_seed

        seed = check_seed(args.seed)  # a bad seed is refused before a model is loaded
        exercises = chosen.exercises(seed, model_from(args))
        record = {"lesson": chosen.slug, "seed": seed, "exercises": [x.as_json() for x in exercises]}
        print(json.dumps(record, ensure_ascii=False, allow_nan=False, indent=None if args.json else 2))
        return 0

    figures = chosen.figures(model_from(args))
    print(json.dumps(figures, ensure_ascii=False, allow_nan=False, indent=None if args.json else 2))
    return 0
