"""``glassbox COMMAND`` (or ``python -m glassbox COMMAND``): Glassbox from the shell. The
commands that run a model load it with ``glassbox.load`` and call the ``Model``'s methods, as
a Python user does.

  app     [STREAMLIT OPTIONS]       start the web app (Streamlit) on the bundled default model
  trace   --model M --prompt TEXT [--backward] [--target TOKEN] --npz FILE
  hooks   --model M                 every captured name with its shape
  bench                             capture overhead and memory, GPT-2-small shape
  worked-example --json             the article's numbers, computed by the engine
  build-worked-example [--out DIR]  reconstruct the worked example's model ($GLASSBOX_HOME/models/worked-example)
  generate --model M --prompt TEXT --max-new-tokens N --temperature T --top-k K --top-p P --seed S [--json]
  train-default [--out DIR]         regenerate the story corpus and train the default model ($GLASSBOX_HOME/models/default)
  train-sae [--out DIR]             train the default model's sparse autoencoder ($GLASSBOX_HOME/models/default-sae)
  train-transcoder [--model M]     train a transcoder for every block's MLP ($GLASSBOX_HOME/models/MODEL-transcoders)
  train-micro NAME [--json]         train a micro-model (bigram, attention-only, induction, moe, seq2seq) ($GLASSBOX_HOME/models/micro-NAME)
  lab     [NAME] [--json] [--steps N] [--shipped]   the lab's experiments; train one ($GLASSBOX_HOME/lab/NAME), print its figures
  models                            the curated hub models: family, parameters, download size, cached
  download ID[@REVISION]            fetch a hub model's config, tokenizer and safetensors into the hub cache
  patch   --model M --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN [--site S] --json
  attribute --model M --prompt TEXT --target TOKEN --method METHOD [--steps N] --json
  dla     --model M --prompt TEXT --token TOKEN [--wrong TOKEN] --json
  steer   --model M --prompt TEXT --positive TEXT --negative TEXT --block B [--strength S] [--start P] [--json]
  heads   --model M [--text TEXT ...] [--stories N] [--find SCORE=VALUE] [--json]
  verify  --model M [--prompt TEXT] [--gradients] [--json]
  path-patch --model M --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN [--input q|k|v] [--json]
  graph   --model M --prompt TEXT --target TOKEN [--transcoders SRC] [--share S] [--json]
  features --model M --sae SAE --prompt TEXT [--top N] [--feature F [--ablate] [--steer S]] [--json]
  features --list                   the curated sparse autoencoders: model, hook, size, cached
  course  [LESSON] [--json] [--exercises --seed S] [--remeasure]   the lessons; a lesson's figures or exercises
  assign  LESSON|VIEW [--model M] [--prompt TEXT] [--seed S] [--base URL]   a teacher's assignment link
  plan    MODEL --gpus N --gpu-gb G [--cpu-gb C] [--tokens T] [--dtype D] [--json]   where each block would live

Commands that make a model write it under $GLASSBOX_HOME/models (default: ~/.cache/glassbox/models),
never into the installed package; --out assets/NAME in a checkout refreshes a shipped model.

Wherever a command takes --model, it may be a bundled model's name, a directory, or a hub id
(``EleutherAI/pythia-70m``, ``EleutherAI/pythia-70m@step3000``), fetched on first use.

A problem with the input is reported in one line on stderr with exit status 2.

One module here per command (``train_micro.py`` is ``train-micro``), its ``add_arguments(sub)``
(its parser: flags, defaults, help) beside its ``run(args)``; common.py holds what several share.
COMMANDS below lists them in the order ``--help`` shows them; main() builds the parser from them
and runs the chosen one, reporting any failure in one line.

Modules are imported inside the commands, after ``configure_process`` has set what must be
set before torch is loaded: importing this package changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

from glassbox.cli import (
    app,
    assign,
    attribute,
    bench,
    build_worked_example,
    course,
    dla,
    download,
    features,
    generate,
    graph,
    heads,
    hooks,
    lab,
    models,
    patch,
    path_patch,
    plan,
    steer,
    trace,
    train_default,
    train_micro,
    train_sae,
    train_transcoder,
    verify,
    worked_example,
)

# Each command's module, in the order `glassbox --help` lists them (a test checks that every
# module in this folder but common.py is here).
COMMANDS = (
    app,
    trace,
    hooks,
    bench,
    worked_example,
    build_worked_example,
    generate,
    steer,
    features,
    plan,
    train_default,
    train_sae,
    train_transcoder,
    train_micro,
    lab,
    patch,
    attribute,
    dla,
    path_patch,
    graph,
    verify,
    heads,
    course,
    assign,
    models,
    download,
)

# Process settings, made where a Glassbox process starts (main() here; `glassbox app` passes them
# to the Streamlit process), never on import. THP_MEM_ALLOC_ENABLE: traces allocate gigabytes of
# fresh memory per call on big models; in 2 MiB huge pages the kernel maps it ~500x fewer times,
# which `glassbox bench` shows is most of the traced backward's overhead on CPU. PyTorch's CPU
# allocator reads it once, at its first allocation, so it must be set before torch is imported.
PROCESS_ENVIRONMENT = {"THP_MEM_ALLOC_ENABLE": "1"}


def configure_process() -> None:
    """Set PROCESS_ENVIRONMENT's values the environment does not already set."""
    for name, value in PROCESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in the same one line as every other ``error:``."""

    def error(self, message: str):
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    """The whole command line: each command's module adds its own subparser."""
    root = Parser(
        prog="glassbox",
        description="Glassbox: every tensor and gradient of a transformer. `python -m glassbox` runs the same commands.",
    )
    sub = root.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_arguments(sub)
    return root


def main(argv: list[str] | None = None) -> int:
    configure_process()
    from glassbox.model.engine import GlassboxError

    root = parser()
    args, unknown = root.parse_known_args(argv)
    if unknown and args.command != "app":  # only `app` passes options on (to Streamlit)
        root.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.streamlit_options = unknown
    try:
        return args.func(args)
    except GlassboxError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # the machine's doing (a full disk, a permission), not a bug
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory (a smaller model, a shorter prompt, or fewer --names)", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line here, the traceback on request
        if os.environ.get("GLASSBOX_DEBUG"):
            raise
        print(
            f"error: internal error ({type(exc).__name__}: {one_line(exc)}); GLASSBOX_DEBUG=1 shows the traceback",
            file=sys.stderr,
        )
        return 1


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
