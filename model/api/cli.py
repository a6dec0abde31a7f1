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
  train-micro NAME [--json]         train a micro-model (bigram, attention-only, induction, moe, seq2seq) ($GLASSBOX_HOME/models/micro-NAME)
  models                            the curated hub models: family, parameters, download size, cached
  download ID[@REVISION]            fetch a hub model's config, tokenizer and safetensors into the hub cache
  patch   --model M --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN [--site S] --json
  attribute --model M --prompt TEXT --target TOKEN --method METHOD [--steps N] --json
  dla     --model M --prompt TEXT --token TOKEN [--wrong TOKEN] --json
  steer   --model M --prompt TEXT --positive TEXT --negative TEXT --block B [--strength S] [--start P] [--json]
  heads   --model M [--text TEXT ...] [--stories N] [--find SCORE=VALUE] [--json]
  verify  --model M [--prompt TEXT] [--gradients] [--json]
  path-patch --model M --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN [--input q|k|v] [--json]
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

Modules are imported inside the commands, after ``configure_process`` has set what must be
set before torch is loaded: ``glassbox --help`` answers at once, and importing this module
changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# Process settings, made where a Glassbox process starts (main() here; `glassbox app` passes them
# to the Streamlit process), never on import. THP_MEM_ALLOC_ENABLE: traces allocate gigabytes of
# fresh memory per call on big models; in 2 MiB huge pages the kernel maps it ~500x fewer times,
# which `glassbox bench` shows is most of the traced backward's overhead on CPU. PyTorch's CPU
# allocator reads it once, at its first allocation, so it must be set before torch is imported.
PROCESS_ENVIRONMENT = {"THP_MEM_ALLOC_ENABLE": "1"}
MICRO_NAMES = ("bigram", "attention-only", "induction", "moe", "seq2seq")


def configure_process() -> None:
    """Set PROCESS_ENVIRONMENT's values the environment does not already set."""
    for name, value in PROCESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def _sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, help="keep the k most likely tokens (default: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="keep the smallest set with this much probability")
    parser.add_argument("--seed", type=int, default=0)


def model_from(args):
    """The Model a command's --model, --dtype and --device-map name (glassbox.load)."""
    from glassbox.core import load

    return load(args.model, dtype=args.dtype, device_map=args.device_map)


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="default", help="a bundled model (default, worked-example), a directory, "
                        "or a hub id such as EleutherAI/pythia-70m[@step3000]")
    # model.engine.DTYPES' names, written out: torch is not imported before a command runs (a test keeps them equal)
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "float16"],
                        help="default: a Glassbox model's own; a transformers model's GLASSBOX_DTYPE, else float32")
    parser.add_argument("--device-map", choices=["auto", "balanced"],
                        help="split the model by blocks across the GPUs, then the CPU, then the disk (accelerate); "
                             "`glassbox plan` shows where each block would go")


def cmd_app(args) -> int:
    """Run the Streamlit app (app/main.py of this installation), passing any extra options on.
    From a source checkout it runs in the checkout, so that .streamlit/config.toml applies."""
    import importlib.util

    from glassbox.model.engine import GlassboxError

    if importlib.util.find_spec("streamlit") is None:
        raise GlassboxError("The app needs Streamlit: pip install 'glassbox[app]' (or -r requirements.txt)")
    from importlib import resources

    main_script = Path(str(resources.files("glassbox.app").joinpath("main.py")))
    checkout = main_script.parent.parent
    cwd = checkout if (checkout / ".streamlit" / "config.toml").exists() else None
    # app.launch is `streamlit run` with the libraries imported before the server listens
    command = [sys.executable, "-m", "glassbox.app.launch", "run", str(main_script), *args.streamlit_options]
    if os.name != "posix":
        return subprocess.call(command, cwd=cwd, env=os.environ.copy())
    # Streamlit takes this process's place (same pid): a SIGTERM or Ctrl-C meant for `glassbox app`
    # reaches the server itself, rather than ending a parent and leaving the server on its port.
    if cwd is not None:
        os.chdir(cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


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
        staged = [stack.enter_context(written_whole(folder))
                  for folder in [out] + [out.with_name(out.name + suffix) for suffix in siblings]]
        write(*staged)
    return out


def cmd_trace(args) -> int:
    from glassbox.model.engine import GlassboxError

    writable(args.npz)
    if args.target is None and args.position is not None:
        raise GlassboxError("--position needs --target")
    loaded = model_from(args)
    tokens = loaded.tokens(args.prompt)
    target = None if args.target is None else (args.target, -1 if args.position is None else args.position)
    trace = loaded.trace(tokens, names=args.names, backward=args.backward or target is not None, target=target)
    trace.save_npz(args.npz)  # whole or not at all; a failed write is an error line
    pieces = [loaded.tokenizer.pieces[t] for t in tokens]
    print(f"tokens   {tokens}  {pieces}")
    if trace.loss is not None:
        print(f"loss     {trace.loss:.6f}  ({trace.loss_description})")
    print(f"wrote    {len(trace.activations)} activations, {len(trace.grads)} gradients to {args.npz}")
    return 0


def cmd_hooks(args) -> int:
    from glassbox.model.engine import names

    if args.markdown:
        print(names.markdown_table())
        return 0
    loaded = model_from(args)
    prompt = args.prompt or loaded.about.get("sample_prompt", "Hello, world")
    tokens = loaded.tokens(prompt)
    trace = loaded.trace(tokens, backward=len(tokens) > 1)
    print(f"{loaded.name}: shapes for the prompt {prompt!r} (T = {len(tokens)} tokens)")
    width = max(len(n) for n in trace.activations)
    for name, tensor in trace.activations.items():
        entry = names.lookup(name)
        gradient = "" if names.GRAD + name in trace.grads else " (no gradient: off the loss path)"
        print(f"  {name:<{width}}  {str(list(tensor.shape)):<16} {' × '.join(entry.axes):<26} {entry.what}{gradient}")
    print("parameters (each has a gradient grad:<name>):")
    for name, param in loaded.model.named_parameters():
        entry = names.lookup(name)
        print(f"  {name:<{width}}  {str(list(param.shape)):<16} {' × '.join(entry.axes):<26} {entry.what}")
    return 0


def cmd_bench(args) -> int:
    from glassbox.model.tools import bench

    return bench.run(args)


def cmd_build_worked_example(args) -> int:
    from glassbox.model.worked_example.reconstruct import build

    print(f"wrote {make_model(args.out, 'worked-example', build)}")
    return 0


def cmd_worked_example(args) -> int:

    from glassbox.model.engine import GlassboxError
    from glassbox.core import load
    from glassbox.model.worked_example.contract import article_json

    if not args.json:
        raise GlassboxError("Say --json: the worked example's numbers are printed as one JSON object")
    print(json.dumps(article_json(load("worked-example"))))
    return 0


def cmd_generate(args) -> int:
    loaded = model_from(args)
    steps = []
    for token in loaded.stream(args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed):
        steps.append(step_json(token, loaded.pieces))
        if not args.json:
            print(token.token, end="", flush=True)
    completion = loaded.tokenizer.decode([s["token_id"] for s in steps])
    if args.json:
        print(json.dumps({"prompt": args.prompt, "completion": completion, "steps": steps}))
    else:
        print()
    return 0


def step_json(token, pieces: list[str]) -> dict:
    """One generated token as the --json contracts print it: its text, id, probability, and the
    most likely tokens of the distribution it was drawn from."""
    from glassbox.model.engine.sampling import top

    return {"token": token.token, "token_id": token.token_id, "p": token.p,
            "top": [{"token": t["token"], "p": t["p"]} for t in top(token.after, pieces)]}


def cmd_steer(args) -> int:
    loaded = model_from(args)
    vector = loaded.steering_vector(args.positive, args.negative, args.block)
    steered, plain = loaded.steer(args.prompt, vector, args.block, args.strength, args.start, args.max_new_tokens,
                                  args.temperature, args.top_k, args.top_p, args.seed)
    runs = {name: {"completion": loaded.tokenizer.decode([t.token_id for t in tokens]),
                   "steps": [step_json(t, loaded.pieces) for t in tokens]}
            for name, tokens in (("steered", steered), ("plain", plain))}
    if args.json:
        print(json.dumps({"prompt": args.prompt, "block": args.block, "strength": args.strength, "start": args.start,
                          "vector_norm": float(vector.norm()), **runs}))
        return 0
    print(f"vector: resid_pre of block {args.block}, {args.positive!r} − {args.negative!r} "
          f"(norm {float(vector.norm()):.4g}), × {args.strength:g} from position {args.start}")
    print(f"steered: {args.prompt}{runs['steered']['completion']}")
    print(f"plain:   {args.prompt}{runs['plain']['completion']}")
    return 0


def cmd_patch(args) -> int:
    result = model_from(args).patch(args.clean, args.corrupt, args.answer, args.wrong, args.site)
    r, largest = result.agreement()
    if args.json:
        print(json.dumps({"metric_clean": result.metric_clean, "metric_corrupt": result.metric_corrupt,
                          "results": result.results(),
                          "attribution_patching": {"estimates": result.estimate.ravel().tolist(),
                                                   "correlation": r, "largest_difference": largest}}))
        return 0
    print(f"logit({args.answer!r}) − logit({args.wrong!r}) at the last position: clean {result.metric_clean:.4f}, "
          f"corrupted {result.metric_corrupt:.4f}")
    print(f"patching {args.site} from the clean run into the corrupted one (fraction of the difference restored):")
    for row in result.results():
        where = "".join(f" {key} {row[key]}" for key in ("position", "head") if key in row)
        gap = result.metric_clean - result.metric_corrupt
        restored = f"{(row['metric'] - result.metric_corrupt) / gap:.2f}" if gap else "-"
        print(f"  block {row['block']}{where}: {row['metric']:.4f}  ({restored})")
    print(f"attribution patching beside it: correlation {'undefined' if r is None else f'{r:.3f}'}, "
          f"largest difference {largest:.3g}")
    return 0


def cmd_attribute(args) -> int:
    loaded = model_from(args)
    tokens = loaded.tokens(args.prompt)
    result = loaded.attribute(tokens, args.target, args.method, args.steps, args.baseline)
    pieces = [loaded.tokenizer.pieces[t] for t in tokens]
    out = {"tokens": pieces, "scores": result.scores.tolist(), "target_logit": result.target_logit}
    if result.baseline_logit is not None:
        out |= {"baseline_logit": result.baseline_logit, "completeness_error": result.completeness_error,
                "steps": result.steps}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.method} for logit({args.target!r}) = {result.target_logit:.4f} at the last position")
    for piece, score in zip(pieces, result.scores):
        print(f"  {piece!r:>16} {score: .5g}")
    if result.baseline_logit is not None:
        print(f"completeness: Σ scores {result.scores.sum():.6g} vs f(input) − f(baseline) "
              f"{result.target_logit - result.baseline_logit:.6g}, error {result.completeness_error:.3g} "
              f"({result.steps} steps)")
    return 0


def cmd_dla(args) -> int:
    result = model_from(args).dla(args.prompt, args.token, args.wrong, args.position)
    components = [{"name": n, "value": float(v)} for n, v in zip(result.names, result.values)]
    if args.json:
        print(json.dumps({"logit": result.logit, "position": result.position, "components": components}))
        return 0
    what = f"logit({args.token!r})" + (f" − logit({args.wrong!r})" if args.wrong is not None else "")
    print(f"{what} at position {result.position}: {result.logit:.6g}, the sum of")
    for c in sorted(components, key=lambda c: -abs(c["value"])):
        print(f"  {c['name']:<32} {c['value']: .6g}")
    return 0


def cmd_path_patch(args) -> int:
    import numpy as np


    result = model_from(args).path_patch(args.clean, args.corrupt, args.answer, args.wrong, args.input)
    senders = [result.label(*s) for s in result.senders]
    receivers = [result.label(*r) for r in result.receivers]
    if args.json:
        print(json.dumps({"metric_clean": result.metric_clean, "metric_corrupt": result.metric_corrupt,
                          "input": args.input, "senders": senders, "receivers": receivers,
                          "metric": json_grid(result.metric)},  # NaN (no path): null
                         allow_nan=False))
        return 0
    print(f"logit({args.answer!r}) − logit({args.wrong!r}): clean {result.metric_clean:.4f}, "
          f"corrupted {result.metric_corrupt:.4f}")
    restored = result.restored()
    cells = sorted(((abs(v), i, j) for (i, j), v in np.ndenumerate(restored) if v == v), reverse=True)[:15]
    print(f"the paths sender → receiver's {args.input} that restore the most (fraction of the difference):")
    for _, i, j in cells:
        print(f"  {senders[i]:>8} → {receivers[j]:<6} {result.metric[i, j]:.4f}  ({restored[i, j]:+.3f})")
    return 0


def cmd_verify(args) -> int:
    result = model_from(args).verify(args.prompt, args.gradients)
    if args.json:
        print(json.dumps(result.as_dict()))
        return 0
    print(f"beside {result.reference}, {result.dtype}, {result.n_tokens} tokens: largest |difference|")
    print(f"  logits                      {result.logits:.3g}  (largest logit {result.logits_scale:.3g})")
    print(f"  residual entering a block   {result.residual:.3g}  (largest value {result.residual_scale:.3g})")
    if result.gradient is not None:
        print(f"  loss                        {result.loss:.3g}")
        print(f"  dL/d(residual)              {result.gradient:.3g}  (largest value {result.gradient_scale:.3g})")
    return 0


def json_grid(grid) -> list[list[float | None]]:
    """A 2-D array as JSON lists, NaN (no value there) as null: strict JSON has no NaN."""
    return [[None if v != v else float(v) for v in row] for row in grid]


def cmd_heads(args) -> int:
    from glassbox.model.engine import GlassboxError

    score = above = None
    if args.find is not None:
        score, _, value = args.find.partition("=")
        try:
            above = float(value)
        except ValueError:
            raise GlassboxError(f"--find takes SCORE=VALUE (such as induction=0.5), not {args.find!r}") from None
    loaded = model_from(args)
    catalog = loaded.heads(args.text, args.stories)
    found = [] if score is None else catalog.find(score, above)
    if args.json:
        grids = {name: json_grid(grid) for name, grid in catalog.scores.items()}  # NaN (no repeats): null
        print(json.dumps({"n_texts": catalog.n_texts, "n_queries": catalog.n_queries, "n_repeats": catalog.n_repeats,
                          "scores": grids, "found": [{"block": b, "head": h, "value": v} for b, h, v in found]},
                         allow_nan=False))
        return 0
    print(f"{catalog.n_texts} texts, {catalog.n_queries} queries, {catalog.n_repeats} whose token came earlier")
    for name, grid in catalog.scores.items():
        print(f"{name} (rows: blocks; columns: heads)")
        for b, row in enumerate(grid):
            print(f"  {b:>3}  " + " ".join(f"{v:6.3f}" for v in row))
    if score is not None:
        print(f"heads with {score} > {above:g}: " + (", ".join(f"{b}.{h} ({v:.3f})" for b, h, v in found) or "none"))
    return 0


def cmd_train_default(args) -> int:
    from glassbox.model.tools.train_default import train

    print(f"wrote {make_model(args.out, 'default', lambda path: train(path, args.steps, args.stories))}")
    return 0


def cmd_train_sae(args) -> int:
    from glassbox.model.tools.train_sae import train

    print(f"wrote {make_model(args.out, 'default-sae', lambda path: train(path, args.steps, args.stories))}")
    return 0


def cmd_train_micro(args) -> int:
    import json

    from glassbox.core import load
    from glassbox.model.micro import micro

    chosen = micro(args.name)
    out = make_model(args.out, chosen.asset, lambda path, *others: chosen.train(path, args.steps, *others),
                     chosen.siblings)
    figures = chosen.figures(load(str(out)))  # the proving figure, of the model just written
    print(f"wrote {out}", file=sys.stderr)
    print(json.dumps(figures, ensure_ascii=False, allow_nan=False, indent=None if args.json else 2))
    return 0


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def cmd_models(args) -> int:
    from glassbox.model.io.catalog import curated

    rows = [(m.hub_id, m.family, f"{m.parameters / 1e6:,.0f}M", f"{m.download_bytes / 1e9:.2f} GB",
             "cached" if m.cached else "-") for m in curated()]
    print_table(("hub id", "family", "parameters", "download", "cache"), rows)
    print("download: the safetensors at the dtype the model is stored in (config.json's torch_dtype).")
    return 0


def cmd_plan(args) -> int:
    """A model's blocks across N GPUs of G GB (then the CPU, then the disk), and per device the
    weights, their gradients and a traced backward's tensors; the model built on the meta device."""
    import torch

    from glassbox.model.engine import DTYPES, GlassboxError, build_model
    from glassbox.model.engine.names import block_runs
    from glassbox.model.engine.placement import total, traced_plan
    from glassbox.model.io.catalog import PLAN_SHAPES, curated
    from glassbox.model.io.convert import CONVERTERS
    from glassbox.model.io.guard import read_json

    shapes = PLAN_SHAPES | {entry.hub_id: entry.config for entry in curated()}
    if args.model in shapes:
        config = shapes[args.model]
    elif Path(args.model, "config.json").is_file():
        config = read_json(Path(args.model, "config.json"))
    else:
        raise GlassboxError(f"No shape for {args.model!r}: give a folder with a config.json, or one of "
                            f"{', '.join(sorted(shapes))}")
    if config.get("model_type") not in CONVERTERS or config.get("is_encoder_decoder"):
        raise GlassboxError(f"plan places a decoder-only model of a family Glassbox opens, not {config.get('model_type')!r}")
    cfg = CONVERTERS[config["model_type"]].config(config)
    dtype = args.dtype or config.get("torch_dtype") or "float32"
    with torch.device("meta"):
        model = build_model(cfg).in_precision(DTYPES[dtype])
    mapping, rows = traced_plan(model, args.gpus, int(args.gpu_gb * 2**30), int(args.cpu_gb * 2**30), args.tokens)
    if args.json:
        print(json.dumps({"model": args.model, "dtype": dtype, "tokens": args.tokens, "device_map": mapping,
                          "devices": rows}))
        return 0
    print(f"{args.model} in {dtype}: {args.gpus} GPU(s) of {args.gpu_gb:g} GB, then {args.cpu_gb:g} GB of CPU memory, "
          f"then the disk; a traced backward of {args.tokens} tokens")
    table = [(r["device"], block_runs(r["blocks"]) or "-", ", ".join(r["parts"]) or "-", f"{r['weights_bytes'] / 2**30:,.1f}",
              f"{r['gradient_bytes'] / 2**30:,.1f}", f"{r['trace_bytes'] / 2**30:,.1f}", f"{total(r) / 2**30:,.1f}",
              "yes" if r["fits"] else "NO") for r in rows]
    print_table(("device", "blocks", "also", "weights GB", "gradients GB", "trace GB", "total GB", "fits"), table)
    print("Blocks on the disk, or on the CPU beside GPUs, are offloaded: they compute on the first device, where "
          "their trace lands.")
    return 0


def cmd_features(args) -> int:
    from glassbox.model.engine import GlassboxError
    from glassbox.model.io.sae import curated

    if args.list:
        rows = [(e.source, e.model, e.hook, f"{e.d_sae:,}", f"{e.download_bytes / 1e6:,.0f} MB",
                 "cached" if e.cached else "-") for e in curated()]
        print_table(("sparse autoencoder (--sae)", "model", "reads", "features", "download", "cache"), rows)
        return 0
    if args.sae is None or args.prompt is None:
        raise GlassboxError("features needs --sae (a folder, or owner/repo/folder on the hub) and --prompt; "
                            "--list shows the curated ones")
    if args.feature is None and (args.ablate or args.steer is not None):
        raise GlassboxError("--ablate and --steer act on one feature: give --feature")
    loaded = model_from(args)
    sae = loaded.sae(args.sae)
    result = loaded.features(args.prompt, sae, args.top)
    pieces = [loaded.pieces[t] for t in result.tokens]
    out = {"sae": sae.name, "architecture": sae.architecture, "reads": sae.reads, "writes": sae.writes,
           "d_sae": sae.d_sae, "loss": result.loss, "spliced_loss": result.spliced_loss,
           "tokens": [{"token": piece, "active": int(result.active[i]), "error_norm": float(result.error_norm[i]),
                       "relative_error": float(result.relative_error[i]),
                       "top": [{"feature": int(f), "activation": float(a)}
                               for f, a in zip(result.top_ids[i], result.top_values[i]) if f >= 0]}
                      for i, piece in enumerate(pieces)]}
    if args.feature is not None:
        out["feature"] = feature_json(loaded, sae, args)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{sae.name}: {sae.architecture}, {sae.d_sae:,} features, reads {sae.reads}"
          + (f", writes {sae.writes}" if sae.writes != sae.reads else ""))
    print(f"next-token loss {result.loss:.4f}; with the reconstruction in place {result.spliced_loss:.4f}")
    for row in out["tokens"]:
        features = ", ".join(f"#{t['feature']} {t['activation']:.3g}" for t in row["top"]) or "none active"
        print(f"  {row['token']!r:>14}  L0 {row['active']:>4}  error {row['relative_error']:.2f}  {features}")
    if args.feature is not None:
        print_feature(out["feature"], args)
    return 0


def feature_json(loaded, sae, args) -> dict:
    """One feature: its activation per token, its direct logit effect, and on request the
    next-token distribution with it ablated and the completion steered by it."""
    from glassbox.model.engine import GlassboxError
    from glassbox.model.engine.sampling import top

    ablation = loaded.ablate_feature(args.prompt, sae, args.feature)
    out = {"id": args.feature, "activations": ablation.activations.tolist()}
    try:
        effect = loaded.feature_logits(args.prompt, sae, args.feature, k=8)
        out["promoted"] = [{"token": loaded.pieces[i], "logit": v} for i, v in zip(effect.promoted_ids, effect.promoted)]
        out["suppressed"] = [{"token": loaded.pieces[i], "logit": v}
                             for i, v in zip(effect.suppressed_ids, effect.suppressed)]
    except GlassboxError as exc:  # it does not write into the residual stream, or the head is not linear
        out["logit_effect_unavailable"] = str(exc)
    if args.ablate:
        import torch

        out["ablation"] = {"kl": ablation.kl, "plain": top(torch.from_numpy(ablation.plain), loaded.pieces, 5),
                           "ablated": top(torch.from_numpy(ablation.ablated), loaded.pieces, 5)}
    if args.steer is not None:
        steered, plain = loaded.steer_feature(args.prompt, sae, args.feature, args.steer,
                                              max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                              seed=args.seed)
        out["steering"] = {"strength": args.steer, **{
            name: {"completion": loaded.tokenizer.decode([t.token_id for t in tokens]),
                   "steps": [step_json(t, loaded.pieces) for t in tokens]}
            for name, tokens in (("steered", steered), ("plain", plain))}}
    return out


def print_feature(feature: dict, args) -> None:
    print(f"feature #{feature['id']}: activation per token " + " ".join(f"{a:.3g}" for a in feature["activations"]))
    if "promoted" in feature:
        print("  raises " + ", ".join(f"{t['token']!r} {t['logit']:+.3g}" for t in feature["promoted"]))
        print("  lowers " + ", ".join(f"{t['token']!r} {t['logit']:+.3g}" for t in feature["suppressed"]))
    else:
        print(f"  no direct logit effect: {feature['logit_effect_unavailable']}")
    if "ablation" in feature:
        def listed(tops):
            return ", ".join(f"{t['token']!r} {t['p']:.3f}" for t in tops)
        print(f"  ablated (KL {feature['ablation']['kl']:.4g} nats): next token {listed(feature['ablation']['ablated'])}"
              f"  (plain: {listed(feature['ablation']['plain'])})")
    if "steering" in feature:
        print(f"  steered × {args.steer:g}: {args.prompt}{feature['steering']['steered']['completion']}")
        print(f"  plain:        {args.prompt}{feature['steering']['plain']['completion']}")


def cmd_download(args) -> int:
    from glassbox.model.engine import GlassboxError
    from glassbox.model.io.hub import download, parse_hub_id

    hub = parse_hub_id(args.id)
    if hub is None:
        raise GlassboxError(f"{args.id!r} is not a hub id: give owner/name, optionally @revision")
    print(f"{hub}: {download(hub)}")
    return 0


def cmd_course(args) -> int:
    import json

    from glassbox.model.course import LESSONS, lesson
    from glassbox.model.engine import GlassboxError

    if args.lesson is None:
        if args.exercises:
            raise GlassboxError("--exercises needs a lesson: `glassbox course LESSON --exercises --seed S`")
        if args.json:
            print(json.dumps([{"number": number, "slug": x.slug, "title": x.title, "question": x.question,
                               "page": x.url_path, "step": x.step, "view": x.view}
                              for number, x in enumerate(LESSONS, 1)], ensure_ascii=False))
            return 0
        width = max(len(x.slug) for x in LESSONS)
        for number, x in enumerate(LESSONS, 1):
            print(f"{number}. {x.slug.ljust(width)}  {x.title}: {x.question}")
        print("`glassbox course LESSON --json` prints a lesson's figures, computed now; "
              "`--exercises --seed S` its exercises and their answers.")
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


def cmd_assign(args) -> int:
    from glassbox.model.course.assignments import Assignment

    print(Assignment(args.target, model=args.model, prompt=args.prompt, seed=args.seed).url(args.base))
    return 0


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in the same one line as every other ``error:``."""

    def error(self, message: str):
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="glassbox", description="Glassbox: every tensor and gradient of a "
                                   "transformer. `python -m glassbox` runs the same commands.")
    sub = root.add_subparsers(dest="command", required=True)

    p = sub.add_parser("app", help="start the web app (Streamlit); further options go to `streamlit run`",
                       epilog="Any other option is passed to `streamlit run`, e.g. --server.port 8502.")
    p.set_defaults(func=cmd_app)

    p = sub.add_parser("trace", help="run a prompt and save every captured tensor (and gradient) to .npz")
    _model_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--backward", action="store_true", help="also save grad:<name> for every tensor and parameter")
    p.add_argument("--target", help="loss = cross-entropy of this token (default: mean next-token loss); implies --backward")
    p.add_argument("--position", type=int, help="position predicting --target (default: the last)")
    p.add_argument("--names", nargs="+", metavar="PATTERN", help="capture only names matching these shell patterns")
    p.add_argument("--npz", required=True, type=Path)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("hooks", help="list every captured tensor's name and shape")
    _model_args(p)
    p.add_argument("--prompt", help="prompt whose shapes to show (default: the model's sample prompt)")
    p.add_argument("--markdown", action="store_true", help="print the table of every name pattern (docs/engine.md's)")
    p.set_defaults(func=cmd_hooks)

    p = sub.add_parser("bench", help="capture overhead and memory for a GPT-2-small-shaped model")
    from glassbox.model.tools import bench

    bench.add_arguments(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("worked-example", help="the article's weights, forward tensors, gradients and update as JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object (the contract in docs/worked-example.md)")
    p.set_defaults(func=cmd_worked_example)

    p = sub.add_parser("build-worked-example", help="reconstruct the unprinted weights and write the worked example's model")
    p.add_argument("--out", type=Path, help="where to write it (default: $GLASSBOX_HOME/models/worked-example; "
                   "assets/worked-example refreshes the shipped one)")
    p.set_defaults(func=cmd_build_worked_example)

    p = sub.add_parser("generate", help="continue a prompt, token by token (KV cache), with exact sampling")
    _model_args(p)
    _sampling_args(p)
    p.add_argument("--json", action="store_true", help='print {"prompt", "completion", "steps": [...]}')
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("steer", help="generate with a vector added to the residual stream, beside the plain completion")
    _model_args(p)
    _sampling_args(p)
    p.add_argument("--positive", required=True, help="the vector: the residual stream at this prompt's last position…")
    p.add_argument("--negative", required=True, help="…minus this one's (contrastive activation addition)")
    p.add_argument("--block", type=int, required=True, help="added to the residual stream entering this block")
    p.add_argument("--strength", type=float, default=4.0, help="the vector's multiple (default 4)")
    p.add_argument("--start", type=int, default=0, help="the first position steered (default 0: all)")
    p.add_argument("--json", action="store_true", help='print {"prompt", "vector_norm", "steered", "plain"}')
    p.set_defaults(func=cmd_steer)

    p = sub.add_parser("features", help="a prompt through a sparse autoencoder: each token's features, the "
                       "reconstruction error, one feature's logit effect, ablation and steering")
    _model_args(p)
    p.add_argument("--sae", help="a folder (SAELens's cfg.json + sae_weights.safetensors, or Gemma Scope's "
                   "params.safetensors) or owner/repo/folder on the hub")
    p.add_argument("--prompt")
    p.add_argument("--top", type=count_between(1, 100), default=5, help="features shown per token (default 5)")
    p.add_argument("--feature", type=int, help="one feature: its activations and direct logit effect")
    p.add_argument("--ablate", action="store_true", help="with --feature: the next token with it taken out")
    p.add_argument("--steer", type=float, metavar="STRENGTH", help="with --feature: generate with its decoder row "
                   "× STRENGTH added where the SAE writes, beside the plain completion")
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.0, help="for --steer (default 0: greedy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="the curated sparse autoencoders")
    p.add_argument("--json", action="store_true", help='print {"sae", "tokens": [...], "feature": {...}}')
    p.set_defaults(func=cmd_features)

    p = sub.add_parser("plan", help="where each block of a model would live across N GPUs, and the memory of a "
                       "traced backward on each (accelerate's device map, the model on the meta device)")
    p.add_argument("model", help="a curated hub id, meta-llama/Meta-Llama-3-70B, mistralai/Mixtral-8x7B-v0.1, or a "
                   "folder with a config.json")
    p.add_argument("--gpus", type=count_between(0, 1024), required=True)
    p.add_argument("--gpu-gb", type=positive_number, default=80.0, help="each GPU's memory (default 80)")
    p.add_argument("--cpu-gb", type=positive_number, default=256.0, help="the CPU memory offered before the disk (default 256)")
    p.add_argument("--tokens", type=count_between(1, 1_000_000), default=512, help="the traced prompt's length")
    p.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "float16"],
                   help="default: the config's torch_dtype")
    p.add_argument("--json", action="store_true", help='print {"device_map", "devices": [{"device", "blocks", '
                   '"weights_bytes", "gradient_bytes", "trace_bytes", "fits"}]}')
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("train-default", help="regenerate the story corpus and train the default model")
    from glassbox.model.tools.train_default import N_STORIES, STEPS

    p.add_argument("--out", type=Path, help="where to write the model (default: $GLASSBOX_HOME/models/default; "
                   "assets/default refreshes the shipped one)")
    p.add_argument("--steps", type=count_between(1, 1_000_000), default=STEPS, help=argparse.SUPPRESS)  # smaller runs for tests
    p.add_argument("--stories", type=count_between(1, 1_000_000), default=N_STORIES, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_train_default)

    p = sub.add_parser("train-sae", help="train the default model's sparse autoencoder (blocks.2.hook_resid_pre)")
    from glassbox.model.tools.train_sae import N_STORIES as SAE_STORIES, STEPS as SAE_STEPS

    p.add_argument("--out", type=Path, help="where to write it (default: $GLASSBOX_HOME/models/default-sae; "
                   "assets/default-sae refreshes the shipped one)")
    p.add_argument("--steps", type=count_between(1, 100_000), default=SAE_STEPS, help=argparse.SUPPRESS)
    p.add_argument("--stories", type=count_between(1, 100_000), default=SAE_STORIES, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_train_sae)

    p = sub.add_parser("train-micro", help="train a micro-model that shows one mechanism, and print its figure")
    # model.micro.MICRO's names, written out: torch is not imported before a command runs (a test keeps them equal)
    p.add_argument("name", choices=MICRO_NAMES, help="bigram (zero layers), attention-only (one block, skip-trigrams), "
                   "induction (two blocks, induction heads), moe (8 experts, top-2; trained with and without the "
                   "load-balancing loss, the second into OUT-unbalanced), seq2seq (an encoder-decoder that reverses its source)")
    p.add_argument("--out", type=Path, help="where to write the model (default: $GLASSBOX_HOME/models/micro-NAME; "
                   "assets/micro-NAME refreshes the shipped one)")
    p.add_argument("--json", action="store_true", help="print the figure as one JSON line")
    p.add_argument("--steps", type=count_between(1, 100_000), help=argparse.SUPPRESS)  # smaller runs for tests
    p.set_defaults(func=cmd_train_micro)

    p = sub.add_parser("patch", help="activation patching: each site of a clean run put into a corrupted one")
    _model_args(p)
    p.add_argument("--clean", required=True, help="the prompt whose behaviour is measured")
    p.add_argument("--corrupt", required=True, help="a prompt of the same length in tokens that changes it")
    p.add_argument("--answer", required=True, help="the token the clean prompt should predict")
    p.add_argument("--wrong", required=True, help="the token it is compared with: metric = logit(answer) − logit(wrong)")
    # model.analysis.patching.SITES and attribution.METHODS, written out (a test keeps them equal)
    p.add_argument("--site", default="resid_pre", choices=["resid_pre", "attn_out", "mlp_out", "head"])
    p.add_argument("--json", action="store_true", help='print {"metric_clean", "metric_corrupt", "results": [...]}')
    p.set_defaults(func=cmd_patch)

    p = sub.add_parser("attribute", help="attribution of one logit to each input token")
    _model_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--target", required=True, help="the token whose logit at the last position is attributed")
    p.add_argument("--method", default="saliency",
                   choices=["saliency", "input_x_gradient", "integrated_gradients", "attention_rollout"])
    # attribution.MAX_STEPS, written out (a test keeps them equal); the analysis checks it too
    p.add_argument("--steps", type=count_between(1, 10_000), default=32,
                   help="integrated gradients: points on the path (1 to 10,000)")
    p.add_argument("--baseline", help="integrated gradients: this token's embedding at every position (default: zeros)")
    p.add_argument("--json", action="store_true", help='print {"tokens", "scores", "target_logit", ...}')
    p.set_defaults(func=cmd_attribute)

    p = sub.add_parser("dla", help="direct logit attribution: a logit split into what each part wrote")
    _model_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--token", required=True, help="the token whose logit is split")
    p.add_argument("--wrong", help="split logit(token) − logit(wrong) instead")
    p.add_argument("--position", type=int, default=-1, help="the position (default: the last)")
    p.add_argument("--json", action="store_true", help='print {"logit", "components": [{"name", "value"}, ...]}')
    p.set_defaults(func=cmd_dla)

    p = sub.add_parser("path-patch", help="path patching: each head's and MLP's direct effect through a later head's input")
    _model_args(p)
    p.add_argument("--clean", required=True)
    p.add_argument("--corrupt", required=True, help="as many tokens as --clean")
    p.add_argument("--answer", required=True, help="the metric is logit(answer) − logit(wrong) at the last position")
    p.add_argument("--wrong", required=True)
    p.add_argument("--input", choices=["q", "k", "v"], default="q", help="the receiver's input patched (default q)")
    p.add_argument("--json", action="store_true",
                   help='print {"metric_clean", "metric_corrupt", "input", "senders", "receivers", "metric"}')
    p.set_defaults(func=cmd_path_patch)

    p = sub.add_parser("verify", help="this model beside transformers' own class on a prompt: the largest differences")
    _model_args(p)
    p.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog.")
    p.add_argument("--gradients", action="store_true", help="also the loss and its gradient w.r.t. each residual stream")
    p.add_argument("--json", action="store_true", help='print {"reference", "dtype", "n_tokens", "logits", ...}')
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("heads", help="the head catalog: previous-token, self, duplicate-token, induction, entropy")
    _model_args(p)
    p.add_argument("--text", action="append", help="a text to score on (repeatable; default: the bundled stories)")
    p.add_argument("--stories", type=count_between(1, 1000), default=16, help="how many bundled stories (default 16)")
    p.add_argument("--find", help='list the heads past a threshold, as SCORE=VALUE (such as "induction=0.5")')
    p.add_argument("--json", action="store_true", help='print {"n_texts", "n_queries", "n_repeats", "scores", "found"}')
    p.set_defaults(func=cmd_heads)

    p = sub.add_parser("course", help="the course's lessons; with a lesson, its figures computed now")
    p.add_argument("lesson", nargs="?", help="a lesson's name (`glassbox course` lists them)")
    _model_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    p.add_argument("--remeasure", action="store_true",
                   help="re-run what a lesson ships as measured (sqrt-dk: its two training runs) and rewrite it")
    p.add_argument("--exercises", action="store_true",
                   help="print the lesson's exercises with their answers, hints and solutions (a teacher's key)")
    p.add_argument("--seed", default=0, help="the exercises' seed, 0 to 10⁹ (default 0; the app's ?seed=)")
    p.set_defaults(func=cmd_course)

    p = sub.add_parser("assign", help="print an assignment link: a lesson or explorer view, a model, a prompt, a seed")
    p.add_argument("target", help="a lesson's name (`glassbox course` lists them) or an explorer view's "
                                  "(such as Attention)")
    p.add_argument("--model", default="default", help="the model the page opens (default: the bundled one)")
    p.add_argument("--prompt", help="the prompt the page opens with")
    p.add_argument("--seed", help="the exercises' seed (lessons)")
    p.add_argument("--base", default="http://localhost:8501", help="the server's address (default %(default)s)")
    p.set_defaults(func=cmd_assign)

    p = sub.add_parser("models", help="the curated hub models: family, parameters, download size, cached or not")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("download", help="fetch a hub model (config, tokenizer, safetensors) into the hub cache")
    p.add_argument("id", help="owner/name, optionally @revision (a branch, tag or commit)")
    p.set_defaults(func=cmd_download)
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
        print(f"error: internal error ({type(exc).__name__}: {one_line(exc)}); "
              "GLASSBOX_DEBUG=1 shows the traceback", file=sys.stderr)
        return 1


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
