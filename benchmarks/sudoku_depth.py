"""Test-time depth of a trained Sudoku model: board and cell accuracy against layer passes, beside the exact solver.

    python benchmarks/sudoku_depth.py RUN_DIR                        # 200 generated boards at 60-70 givens
    python benchmarks/sudoku_depth.py RUN_DIR --givens 45-50 --passes 1,2,4,8,16,32,64 --stop
    python benchmarks/sudoku_depth.py RUN_DIR --csv sudoku-extreme-test.csv --boards 1000

The model (a run or model folder, `bdh.train.run.model.load_run_model`) must be weight-shared with ``pass_logits``
(BDH, Hyper-SET, GPT with shared layers): it is run once per batch to the largest count (`bdh.tasks.depth.iterate`),
with ``--stop`` each board keeping its answer once it no longer changes. The exact solver row (`bdh.tasks.sudoku.solve`,
depth-first search, most constrained cell first) gives the limit and its ms per board on this machine. The table
(markdown) goes to stdout; docs/bench.md ("Sudoku") has the measured ones.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="a run or model folder of a weight-shared Sudoku model")
    p.add_argument("--givens", default="60-70", help="generated boards' givens, LO-HI (default 60-70)")
    p.add_argument("--csv", help="read puzzle,solution rows from this CSV instead of generating")
    p.add_argument("--boards", type=int, default=200, help="boards to score (default 200)")
    p.add_argument("--data-seed", type=int, default=1, help="seed of the generated boards (default 1)")
    p.add_argument("--passes", default="1,2,4,8,16,32,64", help="pass counts, comma-separated")
    p.add_argument("--stop", action="store_true", help="a board keeps its answer once it no longer changes")
    p.add_argument("--batch-size", type=int, default=100)
    return p.parse_args(argv)


def task_of(args: argparse.Namespace):
    """The Sudoku task whose validation split holds the boards to score."""
    from bdh.errors import UserError
    from bdh.tasks.sudoku import Sudoku, SudokuConfig

    if args.csv:
        return Sudoku(SudokuConfig(train_csv=args.csv, val_csv=args.csv, num_train=1, num_val=args.boards))
    try:
        lo, hi = (int(v) for v in args.givens.split("-"))
    except ValueError:
        raise UserError(f"--givens: expected LO-HI, e.g. 60-70, got {args.givens!r}") from None
    return Sudoku(
        SudokuConfig(num_train=1, num_val=args.boards, min_givens=lo, max_givens=hi, data_seed=args.data_seed)
    )


def main(argv: list[str] | None = None) -> None:
    from bdh.bench.ladder import solver_row
    from bdh.tasks.depth import depth_sweep
    from bdh.train.run.model import load_run_model
    from bdh.typed_config import parse_list

    args = parse_args(argv)
    passes = list(parse_list(args.passes, int, "--passes"))
    task = task_of(args)
    model, folder = load_run_model(Path(args.model), device="cpu")
    start = time.perf_counter()
    curve = depth_sweep(model, task, passes, batch_size=args.batch_size, stop=args.stop)
    seconds = time.perf_counter() - start
    solver = solver_row(task)
    accuracy, ms = solver["board"], solver["ms_per_board"]
    source = args.csv or f"{task.size('val')} generated boards, {args.givens} givens"
    print(f"{folder} ({model.num_params():,} parameters), {source}; stop: {args.stop}; sweep {seconds:.0f} s\n")
    print("| passes | board_accuracy | cell_accuracy |" + (" mean passes run |" if args.stop else ""))
    print("|---:|---:|---:|" + ("---:|" if args.stop else ""))
    for k, m in curve.items():
        extra = f" {m['mean_passes']:.1f} |" if args.stop else ""
        print(f"| {k} | {m['board_accuracy']:.3f} | {m['cell_accuracy']:.3f} |{extra}")
    print(f"\nexact solver: board accuracy {accuracy:.3f}, {ms:.2f} ms per board")


if __name__ == "__main__":
    main()
