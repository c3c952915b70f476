"""``bdh eval`` and ``bdh runs``: what a trained run achieves on held-out data, and the run folders with their
progress and best metrics."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bdh.devices import DEVICE_HELP
from bdh.errors import UserError
from bdh.train.eval_data import EVAL_BATCHES

from .checks import integer
from .train_cmds import _load_model

#: bytes per lane ``bdh eval --carry-state`` / ``--sliding`` reads by default (a whole play)
LONG_LENGTH = 65536

LN2 = math.log(2.0)


def register(sub: argparse._SubParsersAction) -> None:
    _register_eval(sub)
    _register_runs(sub)


def _register_eval(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser(
        "eval",
        help="loss and bits per byte of a trained model on held-out data",
        description="Evaluate a run's model (best checkpoint, else the latest) on its validation split, or on "
        "--data FILE (a file or folder of text), and print the loss and bits per byte. By default it scores the "
        "batches of the run's final evaluation (its eval.final_batches, same seed), so the number is the one "
        "training printed, with its standard error; each window of seq_len tokens on its own; --full scores "
        "every window of the split. "
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
    _add_reading_flags(e)
    e.add_argument("--device", default="auto", help=f"{DEVICE_HELP} (default auto)")
    e.set_defaults(func=cmd_eval)


def _add_reading_flags(p: argparse.ArgumentParser) -> None:
    """How much of the split ``bdh eval`` reads, how a long stream is read, and how it reports."""
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--batches",
        type=integer(1),
        default=None,
        help="score this many batches (default: the run's final evaluation's, as training printed; else "
        f"{EVAL_BATCHES}); with --carry-state/--sliding: windows per lane",
    )
    size.add_argument(
        "--length",
        type=integer(1),
        default=None,
        help=f"with --carry-state/--sliding: bytes per lane (default {LONG_LENGTH:,}, or the whole split if shorter)",
    )
    size.add_argument("--full", action="store_true", help="score every window of the split (slow on a large split)")
    p.add_argument(
        "--stride",
        type=integer(1),
        default=None,
        help="with --sliding: bytes the window advances by (default a quarter of the trained context)",
    )
    p.add_argument("--figure", metavar="FILE.png", help="with --carry-state/--sliding: draw the loss by position")
    p.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "none"),
        default="auto",
        help="progress of --full and --carry-state on stderr: a bar in a terminal, lines otherwise (default auto)",
    )


def _register_runs(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "runs",
        help="list run folders with their progress and best metrics",
        description="List the run folders under DIR (default: runs) with steps, tokens and best metrics.",
    )
    r.add_argument("dir", nargs="?", default="runs")
    r.set_defaults(func=cmd_runs)


def cmd_eval(args: argparse.Namespace) -> int:
    """Score a run's model on its validation split (or --data), windows independent or the state carried."""
    from bdh.train.eval_data import eval_data
    from bdh.train.evaluate import eval_batch_count, evaluate
    from bdh.train.log import EvalProgress, se_text

    model, folder = _load_model(args.source, args.checkpoint, args.device)
    ev = eval_data(args.source, model, args.data)
    task, unit = ev.task, ev.unit
    if args.carry_state or args.sliding:
        return _eval_long(args, model, folder, ev)
    if args.figure or args.stride:
        raise UserError("--figure and --stride go with --carry-state or --sliding")
    batch_size = args.batch_size or ev.batch_size
    n = eval_batch_count(task, ev.split, batch_size, None if args.full else args.batches or ev.batches)
    total = task.num_batches(ev.split, batch_size)
    mode = f"windows of {task.seq_len} {unit}s, independent"
    print(f"model: {folder}")
    print(f"data: {ev.description} ({task.seq_len}-{unit} windows)")
    print(f"mode: {mode} (each starts from an empty context; --carry-state carries the recurrent state)")
    of = total if total is not None else "endless"
    note = "" if args.full or n == total else "; the batches of the run's final evaluation. --full scores all"
    print(f"scoring {n} of {of} batches of {batch_size} windows (seed {ev.seed}){note}", flush=True)
    progress = EvalProgress(n, args.progress) if args.full and n > 1 else None
    metrics = evaluate(model, task, batch_size, n, ev.seed, split=ev.split, progress=progress)
    if not metrics:
        raise UserError("nothing to evaluate: no scored targets")
    se = "" if n == total else se_text(metrics)  # the whole split has no sampling error
    print(f"loss {metrics['val_loss']:.4f} nats per {unit}, bits per {unit} {metrics['val_bpb']:.4f}{se} ({mode})")
    for k, v in metrics.items():
        if k not in ("val_loss", "val_bpb", "val_bpb_se"):
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


def _eval_long(args: argparse.Namespace, model, folder, ev) -> int:
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

    task, split, config, unit = ev.task, ev.split, ev.config, ev.unit
    if args.carry_state:
        check_carry(model, task)
    T = task.seq_len
    trained = trained_context(config) if config is not None else None
    length = None if args.full else (args.batches * T if args.batches else args.length or LONG_LENGTH)
    lanes, length = plan_streams(task, split, length, args.batch_size)
    tokens = task_streams(task, split, lanes, length, ev.seed)
    print(f"model: {folder}")
    print(f"data: {ev.description}: {lanes} lane{'s' if lanes > 1 else ''} of {length:,} {unit}s, each read in order")
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
        title = f"{Path(args.source).resolve().name}: loss by context position"
        figure(curves, args.figure, trained, title=title, unit=unit)
        print(f"figure: {args.figure}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """Print `bdh.train.runs.list_runs` as a table."""
    from bdh.train.runs import COLUMNS, list_runs, run_folders

    if not run_folders(args.dir):
        print(f"no run folders in {args.dir}")
        return 0
    rows = [COLUMNS, *(summary.row() for summary in list_runs(args.dir))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
