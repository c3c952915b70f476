"""``bdh inspect RUN --sudoku [CELLS]``: a Sudoku model's board at every pass, the pass at which each cell settles, and
for BDH the neurons most selective for a digit in a row, column or box (`bdh.analysis.sudoku_board`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bdh.errors import UserError

from .checks import integer, load_model

#: the flags that go with --sudoku, and their defaults
DEFAULTS = {"passes": None, "digit": 1, "unit": "row:0", "boards": 200, "givens": "45-50"}


def add_args(p: argparse.ArgumentParser, src: argparse._MutuallyExclusiveGroup) -> None:
    """``--sudoku`` (in the input group ``src``) and the flags that go with it."""
    src.add_argument(
        "--sudoku",
        nargs="?",
        const="",
        metavar="CELLS",
        help="a weight-shared Sudoku model: the board after every pass and the pass each blank settles at; for BDH "
        "also the neurons of a digit in a unit (neurons.csv). CELLS: 81 digits, 0 or . for a blank (default: the "
        "first generated board of --givens)",
    )
    p.add_argument("--passes", type=integer(1, 4096), help="with --sudoku: passes to run (default: twice the trained)")
    p.add_argument("--digit", type=integer(1, 9), help="with --sudoku: the digit of the neuron table (default 1)")
    p.add_argument("--unit", metavar="KIND:I", help="with --sudoku: row:I, col:I or box:I, I in 0..8 (default row:0)")
    p.add_argument(
        "--boards", type=integer(1, 4096), help="with --sudoku: generated boards the neuron table reads (default 200)"
    )
    p.add_argument("--givens", metavar="LO-HI", help="with --sudoku: givens of the generated boards (default 45-50)")


def given(args: argparse.Namespace) -> bool:
    """Whether ``--sudoku`` or a flag that goes with it was given (one without it is refused in `cmd_sudoku`)."""
    return args.sudoku is not None or any(getattr(args, k) is not None for k in DEFAULTS)


def _unit(text: str) -> tuple[str, int]:
    kind, _, index = text.partition(":")
    if kind not in ("row", "col", "box") or not index.isdigit() or not 0 <= int(index) <= 8:
        raise UserError(f"--unit: expected row:I, col:I or box:I with I in 0..8, got {text!r}")
    return kind, int(index)


def _boards(args: argparse.Namespace):
    """(puzzle, solution) to show, and the (puzzles, solutions) the neuron table reads."""
    import numpy as np

    from bdh.bench.ladder import givens_rung, rung_task
    from bdh.tasks.sudoku import solve
    from bdh.viz.inputs import parse_sudoku

    rung = givens_rung(args.givens or DEFAULTS["givens"], "--givens")
    task = rung_task(rung, args.boards or DEFAULTS["boards"], 1)
    pairs = [task.puzzle("val", i, 0) for i in range(task.size("val"))]
    if args.sudoku:
        puzzle = np.array(parse_sudoku(args.sudoku), dtype=np.int64)
        solution = solve(puzzle)
        if solution is None:
            raise UserError("--sudoku: this puzzle has no solution")
    else:
        puzzle, solution = pairs[0]
    return (puzzle, solution), (np.stack([p for p, _ in pairs]), np.stack([s for _, s in pairs]))


def cmd_sudoku(args: argparse.Namespace, model_dir: Path) -> int:
    """The board view of ``--sudoku``, written into --out (passes.txt, neurons.csv) and printed."""
    from bdh.analysis.sudoku_board import write_sudoku_view
    from bdh.outputs import check_output

    if args.sudoku is None:
        raise UserError("--passes, --digit, --unit, --boards and --givens go with --sudoku")
    kind, index = _unit(args.unit or DEFAULTS["unit"])
    (puzzle, solution), boards = _boards(args)
    out = check_output(
        args.out if args.out else Path(args.run) / "reports" / time.strftime("sudoku-%Y%m%d-%H%M%S"),
        overwrite=args.overwrite,
        folder=True,
        inputs=[args.run, model_dir],
    )
    model = load_model(model_dir)
    passes = args.passes or 2 * int(getattr(model, "depth", 1))
    out.mkdir(parents=True, exist_ok=True)
    print(write_sudoku_view(model, puzzle, solution, passes, boards, out, (args.digit or 1, kind, index)), end="")
    print(f"wrote {out}")
    return 0
