"""What several commands share: the --model options and loading the model they name, the
sampling options, argparse types that refuse bad numbers in one line, the checked output path of
a command that writes a model, and the pieces of the --json and table outputs.

Nothing here imports torch when the module is imported: the parser is built before a command
runs (``glassbox --help``), and the commands import what they need inside their ``run``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --dtype and --device-map: which model a command loads (``model_from``)."""
    parser.add_argument(
        "--model",
        default="default",
        help="a bundled model (default, worked-example), a directory, or a hub id such as EleutherAI/pythia-70m[@step3000]",
    )
    # model.engine.DTYPES' names, written out: torch is not imported before a command runs (a test keeps them equal)
    parser.add_argument(
        "--dtype",
        choices=["float32", "float64", "bfloat16", "float16"],
        help="default: a Glassbox model's own; a transformers model's GLASSBOX_DTYPE, else float32",
    )
    parser.add_argument(
        "--device-map",
        choices=["auto", "balanced"],
        help="split the model by blocks across the GPUs, then the CPU, then the disk (accelerate); "
        "`glassbox plan` shows where each block would go",
    )


def model_from(args):
    """The Model a command's --model, --dtype and --device-map name (glassbox.load)."""
    from glassbox.core import load

    return load(args.model, dtype=args.dtype, device_map=args.device_map)


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """A prompt and how its continuation is drawn (generate, steer)."""
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, help="keep the k most likely tokens (default: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="keep the smallest set with this much probability")
    parser.add_argument("--seed", type=int, default=0)


def count_between(low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``, else the parser's one-line error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:,} is outside {low:,} to {high:,}")
        return value

    return parse


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0 (a memory size), else the parser's one-line error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def writable(path: Path, folder_ok: bool = False) -> Path:
    """An output's path, checked before any work: the folder it goes in exists and can be written
    to (``folder_ok``: the output is itself a folder, which may exist)."""
    from glassbox.model.engine import GlassboxError

    folder = path.parent
    if path.is_dir() and not folder_ok:
        raise GlassboxError(f"{path} is a folder: give a file name")
    if folder_ok and path.exists() and not path.is_dir():
        raise GlassboxError(f"Cannot write {path}: it is a file, and a model is a folder")
    if not folder.is_dir():
        raise GlassboxError(f"Cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise GlassboxError(f"Cannot write {path}: no permission")
    return path


def model_output(out: Path | None, name: str) -> Path:
    """Where a command writes the model it makes: ``out``, checked, else the user's folder for it
    (model.io.assets.user_folder: $GLASSBOX_HOME/models/NAME, made if need be), never the package."""
    from glassbox.model.io.assets import user_folder

    if out is None:
        out = user_folder(name)
        out.parent.mkdir(parents=True, exist_ok=True)
    return writable(out, folder_ok=True)  # a folder to create or replace: checked before any work


def make_model(out: Path | None, name: str, write, siblings: tuple[str, ...] = ()) -> Path:
    """``write(folder, *sibling_folders)`` makes a model (or SAE) there, and the other folders
    its making writes beside it (``siblings``: their names are the model's + each); each lands at
    ``model_output(out, name)`` (+ suffix) whole or not at all, and none does unless all are
    made (files.written_whole). Returns where the model is."""
    from contextlib import ExitStack

    from glassbox.model.engine.files import written_whole

    out = model_output(out, name)
    with ExitStack() as stack:
        staged = [
            stack.enter_context(written_whole(folder))
            for folder in [out] + [out.with_name(out.name + suffix) for suffix in siblings]
        ]
        write(*staged)
    return out


def step_json(token, pieces: list[str]) -> dict:
    """One generated token as the --json contracts print it: its text, id, probability, and the
    most likely tokens of the distribution it was drawn from."""
    from glassbox.model.engine.sampling import top

    return {
        "token": token.token,
        "token_id": token.token_id,
        "p": token.p,
        "top": [{"token": t["token"], "p": t["p"]} for t in top(token.after, pieces)],
    }


def json_grid(grid) -> list[list[float | None]]:
    """A 2-D array as JSON lists, NaN (no value there) as null: strict JSON has no NaN."""
    return [[None if v != v else float(v) for v in row] for row in grid]


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Columns padded to their widest cell, the header first."""
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
