"""`glassbox train-transcoder`: a transcoder for every block of a model (SAELens's format)."""

from __future__ import annotations

from pathlib import Path

from glassbox.cli.common import add_model_arguments, count_between, make_model, model_from


def add_arguments(sub) -> None:
    # the training's own defaults, read when the parser is built (after main() has configured the process)
    from glassbox.model.tools.train_transcoder import N_STORIES, STEPS

    p = sub.add_parser("train-transcoder", help="train a transcoder for every block's MLP (the attribution graph's)")
    add_model_arguments(p)
    p.add_argument(
        "--out",
        type=Path,
        help="where to write them, a folder per block (default: $GLASSBOX_HOME/models/MODEL-transcoders; "
        "assets/default-transcoders refreshes the shipped ones)",
    )
    p.add_argument("--steps", type=count_between(1, 100_000), default=STEPS, help="Adam steps per block")
    p.add_argument(
        "--stories", type=count_between(2, 100_000), default=N_STORIES, help="training stories (a sixth more held out)"
    )
    p.add_argument("--d-sae", type=count_between(1, 1_000_000), help="features per block (default: 4 × d_model)")
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.tools.train_transcoder import train

    loaded = model_from(args)
    name = loaded.name.replace("/", "--") + "-transcoders"
    out = make_model(args.out, name, lambda path: train(loaded, path, args.steps, args.stories, args.d_sae))
    print(f"wrote {out}")
    return 0
