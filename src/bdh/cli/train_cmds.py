"""``bdh train``, ``bdh generate``, ``bdh eval`` and ``bdh runs``: train models and use run folders."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from bdh.devices import DEVICE_HELP
from bdh.errors import UserError, exit_status

from .checks import (
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    add_overwrite,
    add_prompt,
    announce_loaded,
    checked_model_dir,
    device,
    integer,
    load_model,
    number,
    prompt_bytes,
    temperature,
)

#: ``bdh train --quick``: the main job shortened to about a minute (the same model and data)
QUICK = (
    "train.max_steps=300",
    "train.max_minutes=1.5",
    "optim.warmup_steps=20",
    "eval.every=100",
    "eval.batches=8",
    "checkpoint.every=100",
    "sample.max_new_tokens=200",
)

#: batches ``bdh eval`` scores by default where the run does not say (``--full``: all)
EVAL_BATCHES = 16
#: bytes per lane ``bdh eval --carry-state`` / ``--sliding`` reads by default (a whole play)
LONG_LENGTH = 65536

LN2 = math.log(2.0)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (no arguments: the main job, a small BDH on the embedded corpus in ~10 min on CPU)",
        description="Train a model. Without arguments: the main job, a small BDH language model on the embedded "
        "Shakespeare corpus (about 10 minutes on a 2-core CPU); it prints the validation bits per byte and a sample. "
        "CONFIG (YAML or JSON) and --set overrides change anything; unknown keys and wrong types are refused. "
        "Data-parallel: torchrun --nproc_per_node=K -m bdh train ... (--set train.parallel=fsdp shards the model).",
    )
    p.add_argument("config", nargs="?", help="a run config, YAML or JSON (default: the main job)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set optim.lr=3e-4 --set model.n_layer=6 (repeatable)",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its latest checkpoint (exactly, on CPU); a finished run is left as it is, "
        "--set train.max_steps=M trains it on to step M",
    )
    p.add_argument(
        "--checkpoint", metavar="step-N", help="with --resume: resume from this checkpoint instead of the latest"
    )
    p.add_argument("--run-dir", help="where to write the run folder (default: runs/<timestamp>)")
    add_overwrite(p, "the run folder (--run-dir or the config's run_dir) with a new run")
    p.add_argument(
        "--name", help="a word that tells the run apart: its folder is runs/<timestamp>-NAME (same as --set name=NAME)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a first look in about a minute on 2 CPU cores: the main job's model, 300 steps (overrides: "
        + " ".join(QUICK)
        + "; --set wins over them)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="make every check the run makes before it writes anything (the config, the device, the data, the "
        "memory, train.init_from), then print the resolved config as YAML and exit",
    )
    p.set_defaults(func=cmd_train)

    g = sub.add_parser(
        "generate",
        help="generate bytes from a trained model, streamed on the recurrent state",
        description="Read the prompt, then generate one byte at a time on the recurrent state and write each to "
        "stdout as soon as it is produced (--no-stream: the whole text once, at the end). RUN_DIR is a run folder "
        "(its best checkpoint, else the latest) or a model folder. Sampling applies --repetition-penalty, then "
        "--temperature, --top-k and --top-p, in this order. The last line on stderr gives the bytes generated, the "
        "seconds and the bytes (tokens) per second.",
    )
    g.add_argument("source", metavar="RUN_DIR", help="a run folder or a model folder")
    add_prompt(g.add_mutually_exclusive_group(), "the text to continue (default: a newline)")
    g.add_argument("--max-new-tokens", type=integer(0), default=500, help="bytes to generate (default 500)")
    g.add_argument(
        "--temperature",
        type=temperature,
        default=0.8,
        help=f"sampling temperature, 0 is greedy, else in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] (default 0.8)",
    )
    g.add_argument(
        "--top-k", type=integer(1, 256), default=None, help="sample among the k most likely bytes (default: all)"
    )
    g.add_argument(
        "--top-p",
        type=number(0, 1, low_open=True),
        default=None,
        metavar="P",
        help="nucleus sampling: sample among the smallest set of the most likely bytes whose probability reaches P, "
        "in (0, 1] (default: off, as 1)",
    )
    g.add_argument(
        "--repetition-penalty",
        type=number(1),
        default=1.0,
        metavar="R",
        help="divide the positive logits of bytes already in the text (prompt and generated) by R and multiply the "
        "negative ones by R, CTRL's penalty; >= 1 (default 1: off)",
    )
    g.add_argument(
        "--stop",
        type=_stop_string,
        action="append",
        metavar="STR",
        help="stop once the generated text ends with STR (printed; repeatable: any of them stops; text of the prompt "
        "does not count) (default: none, all --max-new-tokens bytes)",
    )
    g.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write each byte as it is generated; --no-stream writes the text once, at the end (default: --stream)",
    )
    g.add_argument("--seed", type=integer(0, 2**63 - 1), default=None, help="sampling seed (default: unseeded)")
    g.add_argument("--checkpoint", metavar="step-N", help="use this checkpoint of the run instead of the best")
    g.add_argument("--device", default="auto", help=f"{DEVICE_HELP} (default auto)")
    g.set_defaults(func=cmd_generate)

    e = sub.add_parser(
        "eval",
        help="loss and bits per byte of a trained model on held-out data",
        description="Evaluate a run's model (best checkpoint, else the latest) on its validation split, or on "
        "--data FILE (a file or folder of text), and print the loss and bits per byte. By default it scores the "
        "batches the trainer scores at every evaluation (the run's eval.batches, same seed), so the number is the "
        "training-time estimate, each window of seq_len tokens on its own; --full scores every window of the split. "
        "--carry-state (recurrent models such as BDH, text tasks) reads the text as one stream instead: window "
        "after window with the recurrent state carried across, so every byte is predicted from all the text "
        "before it.",
    )
    e.add_argument("source", metavar="RUN_DIR", help="a run folder")
    e.add_argument("--data", help="a text file or folder to evaluate on instead of the validation split")
    e.add_argument("--checkpoint", metavar="step-N", help="use this checkpoint of the run instead of the best")
    e.add_argument(
        "--carry-state",
        action="store_true",
        help="long context: carry the recurrent state from each window into the next (default: off, "
        "every window starts from an empty context, as training evaluates)",
    )
    e.add_argument(
        "--batch-size",
        type=integer(1),
        default=None,
        help="windows per batch (default: the run's evaluation batch, else 8); with --carry-state: lanes "
        "read side by side, each its own stream (default 1: the whole text is one stream)",
    )
    e.add_argument(
        "--sliding",
        action="store_true",
        help="long context through a window: every byte predicted from at most the trained context before it "
        "(the context cropped, as nanoGPT's generate does); any model, the yardstick of --carry-state. Both "
        "together: the two curves on the same streams and the state's gain",
    )
    size = e.add_mutually_exclusive_group()
    size.add_argument(
        "--batches",
        type=integer(1),
        default=None,
        help="score this many batches (default: the run's eval.batches, as training does; else "
        f"{EVAL_BATCHES}); with --carry-state/--sliding: windows per lane",
    )
    size.add_argument(
        "--length",
        type=integer(1),
        default=None,
        help=f"with --carry-state/--sliding: bytes per lane (default {LONG_LENGTH:,}, or the whole split if shorter)",
    )
    size.add_argument("--full", action="store_true", help="score every window of the split (slow on a large split)")
    e.add_argument(
        "--stride",
        type=integer(1),
        default=None,
        help="with --sliding: bytes the window advances by (default a quarter of the trained context)",
    )
    e.add_argument("--figure", metavar="FILE.png", help="with --carry-state/--sliding: draw the loss by position")
    e.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "none"),
        default="auto",
        help="progress of --full and --carry-state on stderr: a bar in a terminal, lines otherwise (default auto)",
    )
    e.add_argument("--device", default="auto", help=f"{DEVICE_HELP} (default auto)")
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser(
        "runs",
        help="list run folders with their progress and best metrics",
        description="List the run folders under DIR (default: runs) with steps, tokens and best metrics.",
    )
    r.add_argument("dir", nargs="?", default="runs")
    r.set_defaults(func=cmd_runs)


# ---------------------------------------------------------------------- train
def cmd_train(args: argparse.Namespace) -> int:
    """Train (or resume) a run and report it; a resumed run that is already finished: one line, nothing written."""
    from bdh.train import load_config, train
    from bdh.train.config import RunConfig, apply_overrides
    from bdh.train.distributed import from_environment
    from bdh.train.recurrent import StreamingModel
    from bdh.train.trainer import check_run_config, load_run_config

    _check_set_syntax(args)
    if args.resume:
        if args.quick:
            raise UserError("--quick starts a new run; a resumed run keeps its own config.yaml")
        if args.name:
            raise UserError("--name cannot rename a resumed run; it continues in its own folder")
        if args.config:
            raise UserError("give either a CONFIG or --resume RUN_DIR (a resumed run keeps its own config.yaml)")
        config = RunConfig.from_dict(apply_overrides(load_run_config(args.resume), args.overrides), environment=True)
        if args.run_dir:
            raise UserError("--run-dir cannot move a resumed run; it continues in its own folder")
        if args.overwrite:
            raise UserError("--overwrite starts a run anew; --resume continues one: give one of them")
    else:
        if args.checkpoint:
            raise UserError("--checkpoint needs --resume RUN_DIR")
        name = [f"name={args.name}"] if args.name is not None else []
        config = load_config(args.config, (list(QUICK) if args.quick else []) + name + args.overrides)
        if args.run_dir:
            config.run_dir = args.run_dir
    if args.print_config:  # after every check the run makes before it writes anything
        print(check_run_config(config, resume=args.resume).to_yaml(), end="")
        return 0
    resume_from = None
    if args.resume and args.checkpoint:
        resume_from = Path(args.resume) / "checkpoints" / args.checkpoint
        if not resume_from.is_dir():
            raise FileNotFoundError(f"{resume_from}: no such checkpoint")
    # --set train.max_steps / max_tokens on a resume: the new limit wins over a length a time budget fixed
    replan = bool(args.resume) and any(
        item.split("=", 1)[0].strip() in ("train.max_steps", "train.max_tokens") for item in args.overrides
    )
    result = train(config, resume=args.resume, resume_from=resume_from, replan=replan, overwrite=args.overwrite)
    if not from_environment().is_main:
        return 0 if result.interrupted is None else exit_status(result.interrupted)
    if result.finished_before:
        print(
            f"{args.resume}: finished at step {result.step} of {result.total_steps}; nothing to do (to train longer: "
            f"bdh train --resume {args.resume} --set train.max_steps=M with M > {result.step})"
        )
        return 0
    err = sys.stderr
    if result.interrupted is not None:
        print(
            f"interrupted at step {result.step}/{result.total_steps}; saved {result.checkpoint}; "
            f"continue with: bdh train --resume {result.run_dir}",
            file=err,
        )
        return exit_status(result.interrupted)
    m = result.metrics
    print(f"run folder: {result.run_dir}")
    resumed = result.new_tokens != result.tokens
    print(
        f"trained {result.step} steps, {result.tokens:,} tokens"
        + (f" ({result.new_tokens:,} of them in this process)" if resumed else "")
        + f" in {result.seconds / 60:.1f} min ({result.new_tokens / max(result.seconds, 1e-9):,.0f} tokens/s)"
    )
    if m:
        extra = ", ".join(f"{k} {v:.4f}" for k, v in m.items() if k not in ("val_loss", "val_bpb"))
        print(
            f"validation: loss {m['val_loss']:.4f}, bits per byte {m['val_bpb']:.4f}" + (f", {extra}" if extra else "")
        )
    s = config.sample
    task = result.task
    if (
        s.max_new_tokens
        and getattr(task, "vocab_size", None) == 256
        and getattr(task, "causal", False)
        and isinstance(result.model, StreamingModel)
    ):
        print(f"sample (temperature {s.temperature}, seed {s.seed}):")
        _stream_bytes(result.model, s.prompt.encode("utf-8"), s.max_new_tokens, s.temperature, s.top_k, s.seed)
        print()
    if result.budget_cut:
        print(
            f"the time budget train.max_minutes={config.train.max_minutes} ended the run at step {result.step} of "
            f"{result.step_limit} steps (to train them all: a larger train.max_minutes, or null for no budget)"
        )
    return 0


def _check_set_syntax(args: argparse.Namespace) -> None:
    """``--set KEY VALUE`` (a space for the '='): the shell splits it in two and VALUE lands in CONFIG; say so
    before CONFIG is read as a file."""
    stray = args.config if args.config is not None and not Path(args.config).exists() else None
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if stray is not None and (not sep or not value):
            raise UserError(f"--set {item} {stray}: write KEY=VALUE as one word, --set {key.strip()}={stray}")


# ---------------------------------------------------------------------- using a run
def _load_model(source: str, checkpoint: str | None, device_name: str):
    """The model of a run or model folder and the folder it came from. The model of a run folder runs as the run
    ran it (the runtime fields of the ``model`` section of its config.yaml: the attention form, the chunk size;
    the same as its config.json unless that was written by an older bdh, which kept the architecture only), that
    of a model folder as its config.json says."""
    from bdh.model.io import read_model_config, runtime_fields
    from bdh.train.trainer import load_run_config

    folder = checked_model_dir(source, checkpoint)
    runtime = {}
    if folder != Path(source) and (Path(source) / "config.yaml").is_file():
        section = load_run_config(source).get("model")
        cls, _ = read_model_config(folder)
        if isinstance(section, dict):
            runtime = {k: section[k] for k in sorted(runtime_fields(cls.config_class)) if k in section}
    return load_model(folder, map_location=device(device_name), announce=False, **runtime), folder


def _stop_string(text: str) -> bytes:
    """An argparse type: a ``--stop`` string as bytes, as the shell passed them (as ``--prompt``); not empty."""
    import os

    if not text:
        raise argparse.ArgumentTypeError("a stop string cannot be empty")
    return os.fsencode(text)


def _stream_bytes(
    model,
    prompt: bytes,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int | None,
    *,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop: list[bytes] | None = None,
    stream: bool = True,
    speed: bool = False,
) -> None:
    """Write the prompt and the generated bytes to stdout: each as it is made (``stream``), else all at the end;
    ``speed``: then one line on stderr with the bytes generated, the seconds and the bytes per second."""
    import time

    import torch

    out = sys.stdout.buffer
    tokens = torch.tensor(list(prompt), dtype=torch.long)
    options = dict(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty)
    generated = model.stream(tokens, max_new_tokens, **options, stop=stop, seed=seed)  # checks the options
    if stream:
        out.write(prompt)
        out.flush()
    text, start = bytearray(), time.perf_counter()
    for token in generated:
        byte = bytes([int(token[0])])
        text += byte
        if stream:
            out.write(byte)
            out.flush()
    seconds = time.perf_counter() - start
    if not stream:
        out.write(prompt + bytes(text))
        out.flush()
    if speed:
        rate = f"{len(text) / seconds:,.1f}" if seconds > 0 else "-"
        print(
            f"generated {len(text)} tokens in {seconds:.2f} s: {rate} tokens/s (reading the prompt included)",
            file=sys.stderr,
        )


def cmd_generate(args: argparse.Namespace) -> int:
    prompt = prompt_bytes(args, default=b"\n")
    from bdh.train.recurrent import StreamingModel

    model, folder = _load_model(args.source, args.checkpoint, args.device)
    if not isinstance(model, StreamingModel):
        raise UserError(f"{args.source}: this model cannot generate on a recurrent state")
    if getattr(model.config, "vocab_size", 256) < 256:
        raise UserError(
            f"{args.source}: a byte-level prompt needs vocab_size 256, the model has {model.config.vocab_size}"
        )
    if args.top_k is not None and args.top_k > model.config.vocab_size:
        raise UserError(f"--top-k {args.top_k}: the model has {model.config.vocab_size} tokens; give at most that")
    announce_loaded(folder, sys.stderr)  # stdout holds the generated bytes
    _warn_past_training(args.source, model, len(prompt) + args.max_new_tokens)
    _stream_bytes(
        model,
        prompt,
        args.max_new_tokens,
        args.temperature,
        args.top_k,
        args.seed,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        stop=args.stop,
        stream=args.stream,
        speed=True,
    )
    sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()
    return 0


def _warn_past_training(source: str, model, length: int) -> None:
    """One line on stderr when an undamped model (no U, Eq. 8) will read past the longest context it was
    trained on: its state then sums more tokens than it ever met, and the text degrades (docs/long-context.md)."""
    from bdh.train.config import RunConfig
    from bdh.train.context import trained_context
    from bdh.train.trainer import load_run_config

    if getattr(model.config, "damping", None) is not None or not (Path(source) / "config.yaml").is_file():
        return
    config = RunConfig.from_dict(load_run_config(source))
    if config.task.get("name") != "text":
        return
    trained = trained_context(config)
    if length > trained:
        print(
            f"warning: this model has no state damping and met contexts of at most {trained:,} bytes in training; "
            f"past that its text degrades (train with --set model.damping=alibi: docs/long-context.md)",
            file=sys.stderr,
        )


def cmd_eval(args: argparse.Namespace) -> int:
    """Score a run's model on its validation split (or --data), windows independent or the state carried."""
    from bdh.registry import get_task
    from bdh.tasks.text import TextConfig, TextTask
    from bdh.train.config import RunConfig, build_section_config
    from bdh.train.evaluate import evaluate
    from bdh.train.log import EvalProgress
    from bdh.train.trainer import eval_batch_count, load_run_config

    model, folder = _load_model(args.source, args.checkpoint, args.device)
    is_run = (Path(args.source) / "config.yaml").is_file()
    config = RunConfig.from_dict(load_run_config(args.source)) if is_run else None
    if args.data:
        seq_len = config.task.get("seq_len", 256) if config else 256
        task, split = TextTask(TextConfig(data=args.data, seq_len=seq_len), whole=True), "all"
        if getattr(model.config, "vocab_size", 256) < 256:
            raise UserError(f"--data is read as bytes; the model's vocabulary has {model.config.vocab_size} tokens")
    else:
        if config is None:
            raise UserError(f"{args.source}: not a run folder (no config.yaml); give --data FILE to evaluate on")
        get_task(config.task["name"])
        _, task_config = build_section_config("task", config.task)
        task, split = get_task(config.task["name"])(task_config), "val"
    seed = config.train.seed if config else 0
    t = config.train if config else None
    default_batch = (config and (config.eval.batch_size or t.micro_batch_size or t.batch_size)) or 8
    default_batches = (config.eval.batches if config else None) or EVAL_BATCHES
    unit = "byte" if getattr(task, "vocab_size", None) == 256 else "token"
    data = args.data or f"{args.source} validation split"
    if args.carry_state or args.sliding:
        return _eval_long(args, model, folder, task, split, config, data, unit)
    if args.figure or args.stride:
        raise UserError("--figure and --stride go with --carry-state or --sliding")
    batch_size = args.batch_size or default_batch
    batches = None if args.full else args.batches or default_batches
    n = eval_batch_count(task, split, batch_size, batches)
    total = task.num_batches(split, batch_size)
    mode = f"windows of {task.seq_len} {unit}s, independent"
    print(f"model: {folder}")
    print(f"data: {data} ({task.seq_len}-{unit} windows)")
    print(f"mode: {mode} (each starts from an empty context; --carry-state carries the recurrent state)")
    of = total if total is not None else "endless"
    note = "" if args.full or n == total else "; the batches training scores at each evaluation. --full scores all"
    print(f"scoring {n} of {of} batches of {batch_size} windows (seed {seed}){note}", flush=True)
    progress = EvalProgress(n, args.progress) if args.full and n > 1 else None
    metrics = evaluate(model, task, batch_size, n, seed, split=split, progress=progress)
    if not metrics:
        raise UserError("nothing to evaluate: no scored targets")
    print(f"loss {metrics['val_loss']:.4f} nats per {unit}, bits per {unit} {metrics['val_bpb']:.4f} ({mode})")
    for k, v in metrics.items():
        if k not in ("val_loss", "val_bpb"):
            print(f"{k[4:]} {v:.4f}")
    return 0


def _print_curves(curves: list, unit: str) -> None:
    """The curves by position as a table, the state's gain when both are there, and each curve's total."""
    from bdh.train.context import curve_table

    print(f"bits per {unit} by position:")
    print(curve_table(curves, unit))
    if len(curves) == 2:
        gains = [b - a for a, b in zip(curves[0][1].bits(), curves[1][1].bits())]
        print(
            "the state's gain over the cut context (bits, positive: the state helps): "
            + ", ".join(f"{label} {g:+.3f}" for label, g in zip(curves[0][1].labels, gains))
        )
    for name, curve in curves:
        print(f"loss {curve.total_bits() * LN2:.4f} nats per {unit}, bits per {unit} {curve.total_bits():.4f} ({name})")


def _eval_long(args: argparse.Namespace, model, folder, task, split: str, config, data: str, unit: str) -> int:
    """``bdh eval --carry-state`` / ``--sliding``: loss by context position on long streams (`bdh.train.context`)."""
    from bdh.train.context import (
        carried_curve,
        figure,
        plan_streams,
        sliding_curve,
        sliding_steps,
        task_streams,
        trained_context,
    )
    from bdh.train.evaluate import check_carry
    from bdh.train.log import EvalProgress

    if args.carry_state:
        check_carry(model, task)
    T = task.seq_len
    trained = trained_context(config) if config is not None else None
    length = None if args.full else (args.batches * T if args.batches else args.length or LONG_LENGTH)
    lanes, length = plan_streams(task, split, length, args.batch_size)
    tokens = task_streams(task, split, lanes, length, config.train.seed if config else 0)
    print(f"model: {folder}")
    print(f"data: {data}: {lanes} lane{'s' if lanes > 1 else ''} of {length:,} {unit}s, each read in order")
    if trained is None:
        print("trained context: unknown (not a run folder); buckets of the task's window")
    elif length > trained:
        print(
            f"note: the streams ({length:,} {unit}s) are longer than any context the model met in training "
            f"({trained:,} {unit}s): past that, the loss measures how it extrapolates"
        )
    window = trained if trained and trained < length else T
    curves = []
    if args.carry_state:
        chunks = -(-length // T)
        progress = EvalProgress(chunks, args.progress, unit="windows") if chunks > 1 else None
        curve = carried_curve(model, tokens, window, chunk=T, progress=progress and progress.update)
        if progress is not None:
            progress.close()
        curves.append((f"state carried (context up to {length:,})", curve))
    if args.sliding:
        cut = trained or T
        steps = sliding_steps(length, cut, args.stride)
        progress = EvalProgress(steps, args.progress, unit="windows", desc="sliding") if steps > 1 else None
        curve = sliding_curve(model, tokens, window, cut, args.stride, progress=progress and progress.update)
        if progress is not None:
            progress.close()
        curves.append((f"context cut to {cut:,} ({curve.how.split('(')[1].rstrip(')')})", curve))
    _print_curves(curves, unit)
    if args.figure:
        figure(curves, args.figure, trained, title=f"{Path(args.source).resolve().name}: loss by context position")
        print(f"figure: {args.figure}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from bdh.train.checkpoint import list_checkpoints
    from bdh.train.config import read_config_file
    from bdh.train.log import read_metrics

    root = Path(args.dir)
    if not root.is_dir():
        if root.exists():
            raise UserError(f"{root}: not a folder; give a folder of run folders, or a run folder")
        raise FileNotFoundError(f"{root}: no such folder")
    folders = (
        [root]
        if (root / "config.yaml").is_file()
        else sorted(p for p in root.iterdir() if (p / "config.yaml").is_file())
    )
    if not folders:
        print(f"no run folders in {root}")
        return 0
    rows = [("run", "model", "task", "step", "tokens", "best", "last val_bpb", "checkpoint")]
    for run in folders:
        try:
            cfg = read_config_file(run / "config.yaml")
        except (ValueError, FileNotFoundError):
            continue
        records = read_metrics(run / "metrics.jsonl")
        train_recs = [r for r in records if r.get("kind") == "train"]
        evals = [r for r in records if r.get("kind") == "eval"]
        total = (cfg.get("train") or {}).get("max_steps", "?")
        step = train_recs[-1]["step"] if train_recs else 0
        tokens = train_recs[-1].get("tokens", 0) if train_recs else 0
        best = "-"
        meta_path = run / "best" / "meta.json"
        if meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                best = f"{meta['metric']} {meta['value']:.4f} @{meta['step']}"
            except (ValueError, KeyError, TypeError):
                best = "?"
        last = evals[-1].get("val_bpb") if evals else None
        ckpts = list_checkpoints(run)
        if ckpts:  # a time budget may have shortened the run: the checkpoint knows its length
            try:
                total = json.loads((ckpts[-1] / "meta.json").read_text(encoding="utf-8")).get("total_steps", total)
            except (OSError, ValueError):
                pass
        rows.append(
            (
                run.name,
                str((cfg.get("model") or {}).get("name", "?")),
                str((cfg.get("task") or {}).get("name", "?")),
                f"{step}/{total}",
                f"{tokens:,}",
                best,
                "-" if last is None or not math.isfinite(last) else f"{last:.4f}",
                ckpts[-1].name if ckpts else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
