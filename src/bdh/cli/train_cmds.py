"""``bdh train`` and ``bdh generate``: train models and generate from them."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bdh.devices import DEVICE_HELP
from bdh.errors import UserError
from bdh.train.main_job import PRESETS

from .checks import (
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    add_overwrite,
    add_prompt,
    announce_loaded,
    integer,
    number,
    prompt_bytes,
    temperature,
)

#: ``bdh train --quick``: the main job shortened to about a minute (the same model and data), as its overrides
QUICK = tuple(f"{key}={value}" for key, value in PRESETS["quick"].items())
#: ``bdh generate --max-new-tokens`` above this (16 MiB, three times the embedded corpus) is said to be long
LONG_GENERATION = 2**24


def register(sub: argparse._SubParsersAction) -> None:
    _register_train(sub)
    _register_generate(sub)


def _register_train(sub: argparse._SubParsersAction) -> None:
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


def _register_generate(sub: argparse._SubParsersAction) -> None:
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


# ---------------------------------------------------------------------- train
def cmd_train(args: argparse.Namespace) -> int:
    """Train (or resume) a run and print its report, the sample streamed; a finished resume: one line,
    nothing written."""
    from bdh.outputs import DiskFull
    from bdh.train import train
    from bdh.train.run.report import resume_checkpoint, resume_replans, train_report
    from bdh.train.runtime.distributed import from_environment

    _check_set_syntax(args)
    config = _run_config(args)
    if args.print_config:  # after every check the run makes before it writes anything
        from bdh.train.build import check_run_config

        check_run_config(config, resume=args.resume)
        print(config.to_yaml(), end="")
        return 0
    resume_from = resume_checkpoint(args.resume, args.checkpoint)
    replan = resume_replans(args.resume, args.overrides)
    try:
        result = train(config, resume=args.resume, resume_from=resume_from, replan=replan, overwrite=args.overwrite)
    except DiskFull as exc:  # the same command again would find its run folder: --resume continues it
        if args.resume or not config.run_dir or not Path(config.run_dir).is_dir():
            raise
        raise exc.continued_by(shlex.join(["bdh", "train", "--resume", str(config.run_dir)])) from None
    report = train_report(config, result, args.resume)
    if not from_environment().is_main:
        return report.status
    stream = sys.stderr if report.error else sys.stdout
    for line in report.before:
        print(line, file=stream)
    if report.sample is not None:
        s = report.sample
        _stream_bytes(result.model, s.prompt, s.max_new_tokens, s.temperature, s.top_k, s.seed)
        print()
    for line in report.after:
        print(line, file=stream)
    return report.status


def _run_config(args: argparse.Namespace):
    """The run config: a resume's config.yaml, or CONFIG (else the main job) with ``--quick`` and ``--name``, and
    the overrides."""
    from bdh.train import load_config

    if args.resume:
        if args.quick:
            raise UserError("--quick starts a new run; a resumed run keeps its own config.yaml")
        if args.name:
            raise UserError("--name cannot rename a resumed run; it continues in its own folder")
        if args.config:
            raise UserError("give either a CONFIG or --resume RUN_DIR (a resumed run keeps its own config.yaml)")
        config = load_config(overrides=args.overrides, resume=args.resume)
        if args.run_dir:
            raise UserError("--run-dir cannot move a resumed run; it continues in its own folder")
        if args.overwrite:
            raise UserError("--overwrite starts a run anew; --resume continues one: give one of them")
        return config
    if args.checkpoint:
        raise UserError("--checkpoint needs --resume RUN_DIR")
    name = [f"name={args.name}"] if args.name is not None else []
    config = load_config(args.config, name + args.overrides, preset="quick" if args.quick else None)
    if args.run_dir:
        config.run_dir = args.run_dir
    return config


def _check_set_syntax(args: argparse.Namespace) -> None:
    """Refuse ``--set KEY VALUE`` (a space for '=') before VALUE is read as CONFIG."""
    stray = args.config if args.config is not None and not Path(args.config).exists() else None
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if stray is not None and (not sep or not value):
            raise UserError(f"--set {item} {stray}: write KEY=VALUE as one word, --set {key.strip()}={stray}")


# ---------------------------------------------------------------------- using a run
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
    end: bytes = b"",
) -> None:
    """Write the prompt and generated bytes to stdout (as made with ``stream``), then ``end``; with ``speed`` a
    stderr line."""
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
    out.write(end)
    out.flush()
    if speed:
        _report_speed(len(text), seconds, mid_line=not (prompt + bytes(text) + end).endswith(b"\n"))


def _report_speed(count: int, seconds: float, *, mid_line: bool) -> None:
    """The tokens/s line on stderr, on a new line when the terminal's text stopped mid-line."""
    rate = f"{count / seconds:,.1f}" if seconds > 0 else "-"
    lead = "\n" if mid_line and sys.stdout.isatty() else ""
    print(
        f"{lead}generated {count} tokens in {seconds:.2f} s: {rate} tokens/s (reading the prompt included)",
        file=sys.stderr,
    )


def cmd_generate(args: argparse.Namespace) -> int:
    """Stream a run's generated bytes to stdout; the folder, a past-context warning and the speed go to stderr."""
    from bdh.train.run.model import load_generator, past_training_warning

    prompt = prompt_bytes(args, default=b"\n")
    model, folder = load_generator(args.source, args.checkpoint, args.device, top_k=args.top_k)
    announce_loaded(folder, sys.stderr)  # stdout holds the generated bytes
    warning = past_training_warning(args.source, model, len(prompt) + args.max_new_tokens)
    if warning is not None:
        print(warning, file=sys.stderr)
    if args.max_new_tokens > LONG_GENERATION:
        print(
            f"warning: --max-new-tokens {args.max_new_tokens:,}: one byte at a time, generation goes on until then "
            f"(more than {LONG_GENERATION:,} bytes: hours at least); Ctrl-C stops it, keeping what was written",
            file=sys.stderr,
        )
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
        end=b"\n",
    )
    return 0
