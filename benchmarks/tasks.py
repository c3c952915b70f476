"""How long the tasks' data generators take: MQAR examples, Sudoku puzzles and the boardpath pool.

    python benchmarks/tasks.py                 # the settings docs/tasks.md quotes
    python benchmarks/tasks.py --quick         # the same tables at a few examples (a test; seconds)

Prints markdown: the machine, then the MQAR table (``bdh.tasks.mqar.generate_mqar``: seconds for
``--examples`` examples of each (N, D) setting at vocabulary V), the Sudoku table
(``bdh.tasks.sudoku.generate_puzzle``: ms per puzzle and the mean givens reached, ``--puzzles`` puzzles
per target with one digging attempt, and the task's default range with its default attempts) and the
seconds for the default boardpath pool. Pure numpy and Python: the time is one core's.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from _shared import Parser, cpu_description, run

MQAR_SETTINGS = ((64, 4), (256, 16), (512, 64), (1024, 256))  # (input_seq_len N, num_kv_pairs D)
SUDOKU_TARGETS = (34, 30, 26, 24, 22, 17)


def seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mqar_seconds(examples: int, vocab: int, N: int, D: int, repeats: int) -> float:
    """Median seconds to generate ``examples`` MQAR examples of length N with D key-value pairs."""
    from bdh.tasks.common import rng
    from bdh.tasks.mqar import generate_mqar

    return seconds(lambda: generate_mqar(rng(0), examples, vocab_size=vocab, input_seq_len=N, num_kv_pairs=D), repeats)


def mqar_table(examples: int, vocab: int, repeats: int, settings=MQAR_SETTINGS) -> str:
    """Seconds to generate ``examples`` MQAR examples per (N, D) setting, as a markdown table."""
    cells = [f"{mqar_seconds(examples, vocab, N, D, repeats):.2f}" for N, D in settings]
    head = " | ".join(f"{N}, {D}" for N, D in settings)
    return (
        f"| N, D | {head} |\n|---|{'---|' * len(settings)}\n"
        f"| seconds ({examples:,} examples, V = {vocab}) | {' | '.join(cells)} |"
    )


def sudoku_column(puzzles: int, low: int, high: int, attempts: int) -> tuple[float, float]:
    """(ms per puzzle, mean givens reached) over ``puzzles`` puzzles with targets in [low, high]."""
    from bdh.tasks.common import rng
    from bdh.tasks.sudoku import generate_puzzle

    givens = []
    t0 = time.perf_counter()
    for i in range(puzzles):
        puzzle, _ = generate_puzzle(rng(0, low, high, i), low, high, attempts)
        givens.append(int((puzzle > 0).sum()))
    return 1000 * (time.perf_counter() - t0) / puzzles, float(np.mean(givens))


def sudoku_table(puzzles: int, targets=SUDOKU_TARGETS) -> str:
    """ms per puzzle and givens reached per target (one attempt), then the default range (its attempts)."""
    from bdh.tasks.sudoku import SudokuConfig

    cfg = SudokuConfig()
    columns = [(t, t, 1) for t in targets] + [(cfg.min_givens, cfg.max_givens, cfg.dig_attempts)]
    results = [sudoku_column(puzzles, lo, hi, a) for lo, hi, a in columns]
    head = [str(t) for t in targets] + [f"{cfg.min_givens}–{cfg.max_givens}, {cfg.dig_attempts} attempts (default)"]
    return (
        f"| target givens | {' | '.join(head)} |\n|---|{'---|' * len(columns)}\n"
        f"| ms per puzzle | {' | '.join(f'{ms:.0f}' for ms, _ in results)} |\n"
        f"| givens reached (mean) | {' | '.join(f'{g:.2f}' for _, g in results)} |"
    )


def boardpath_seconds(repeats: int, num_train: int | None = None, num_val: int | None = None) -> tuple[float, str]:
    """Seconds to build the boardpath pool (train + val boards) of the default config, and its size."""
    from bdh.tasks.boardpath import BoardPath, BoardPathConfig

    defaults = BoardPathConfig()
    cfg = BoardPathConfig(num_train=num_train or defaults.num_train, num_val=num_val or defaults.num_val)
    size = f"{cfg.num_train + cfg.num_val:,} boards of {cfg.board_size}×{cfg.board_size}"
    return seconds(lambda: BoardPath(cfg).dataset(0), repeats), size


def machine_line(command: str) -> str:
    """The command, the CPU, its cores and the load when the run started (other jobs show up there)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"command: `{command}`\nCPU: {cpu_description()}, {os.cpu_count()} cores; "
        f"1-minute load average {load:.2f} at the start (this run uses one core: above about 0.5, other jobs "
        "were running)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few examples of everything: a test, not a measurement")
    ap.add_argument("--examples", type=int, default=100_000, help="MQAR examples per setting (default 100,000)")
    ap.add_argument("--vocab", type=int, default=8192, help="MQAR vocabulary (default 8192)")
    ap.add_argument("--puzzles", type=int, default=20, help="Sudoku puzzles per column (default 20)")
    ap.add_argument("--repeats", type=int, default=3, help="MQAR and boardpath: median of this many runs")
    args = ap.parse_args(argv)
    words = sys.argv[1:] if argv is None else argv
    print(machine_line(" ".join(["python benchmarks/tasks.py", *words])) + "\n")
    if args.quick:
        args.examples, args.puzzles, args.repeats = 200, 2, 1
        settings, targets = MQAR_SETTINGS[:2], SUDOKU_TARGETS[:2]
    else:
        settings, targets = MQAR_SETTINGS, SUDOKU_TARGETS
    print("MQAR generation (`bdh.tasks.mqar.generate_mqar`):\n")
    print(mqar_table(args.examples, args.vocab, args.repeats, settings))
    small = mqar_seconds(1000, args.vocab, *MQAR_SETTINGS[-1], args.repeats)
    print(f"\nN, D = 1024, 256 at 1,000 examples (Zoology's test set of that slice): {small:.2f} s")
    print(f"\nSudoku (`bdh.tasks.sudoku.generate_puzzle`, {args.puzzles} puzzles per column):\n")
    print(sudoku_table(args.puzzles, targets))
    pool = (100, 20) if args.quick else (None, None)
    secs, size = boardpath_seconds(args.repeats, *pool)
    print(f"\nboardpath pool ({size}, `BoardPath.dataset`): {secs:.2f} s")
    return 0


if __name__ == "__main__":
    run(main)
