"""``bdh eval`` and ``bdh runs``: a trained run on held-out data, and the run folders with their best metrics."""

from __future__ import annotations

import argparse

from bdh.analysis.evaluation.data import EVAL_BATCHES
from bdh.analysis.evaluation.plan import LONG_LENGTH, MAX_LANES
from bdh.devices import DEVICE_HELP

from .checks import integer


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
        f"read side by side, each its own stream (default: as many lanes of --length bytes as the split holds, "
        f"at most {MAX_LANES}; with --full one, the whole split)",
    )
    e.add_argument(
        "--sliding",
        action="store_true",
        help="long context through a window: every byte predicted from at most the trained context before it "
        "(the context cropped, as nanoGPT's generate does); any model, the yardstick of --carry-state. Both "
        "together: the two curves on the same streams and the state's gain",
    )
    e.add_argument(
        "--hard-gate",
        action="store_true",
        help="read a BDH whose delta rule writes through the sigmoid gate with the hard gate instead "
        "(write_gate: hard, the same weights: the tokens the gate shuts write nothing; a read-time change)",
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
    size.add_argument(
        "--full",
        action="store_true",
        help="score every window of the split: one forward pass per window, so its time grows with the split (the "
        "main job's: several times the batches the default reads, about a tenth of its full training's passes); "
        "the line before scoring says how many times the default, the progress lines give the ETA",
    )
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
    """Score a run's model (`open_eval`) and print the plan's lines, then its numbers."""
    from bdh.analysis.evaluation.run import open_eval

    reading = dict(batches=args.batches, full=args.full, batch_size=args.batch_size, length=args.length)
    run = open_eval(
        args.source,
        checkpoint=args.checkpoint,
        device=args.device,
        data=args.data,
        carry=args.carry_state,
        sliding=args.sliding,
        figure=args.figure,
        stride=args.stride,
        hard_gate=args.hard_gate,
        **reading,
    )
    print(run.header(), flush=True)
    print(run.run(args.progress).table())
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """Print `bdh.train.run.listing.list_runs` as a table."""
    from bdh.train.run.listing import COLUMNS, list_runs, run_folders

    if not run_folders(args.dir):
        print(f"no run folders in {args.dir}")
        return 0
    rows = [COLUMNS, *(summary.row() for summary in list_runs(args.dir))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
