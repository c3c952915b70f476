"""The Sudoku suite's ladder of difficulty: every trained model scored on each rung (generated boards of LO-HI givens,
or a ``puzzle,solution`` CSV), beside the trivial row, the exact solver and the test-time depth sweep."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bdh.seed_stats import spread_cell

from .spec import TRIVIAL, BenchError

_GIVENS = re.compile(r"^(\d+)-(\d+)$")


@dataclass(frozen=True)
class Rung:
    """One rung: ``name`` (``60-70``, or a CSV file's stem), the generator's ``givens`` range or a ``csv`` path."""

    name: str
    givens: tuple[int, int] | None = None
    csv: str | None = None

    @property
    def column(self) -> str:
        """The suffix of the rung's result columns (``board_60_70``): its name in lower-case letters, digits and _."""
        return re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_") or "csv"


def givens_rung(text: str, what: str) -> Rung:
    """A generated rung from ``LO-HI`` (17 <= LO <= HI <= 81); a one-line `BenchError` naming ``what`` otherwise."""
    m = _GIVENS.match(str(text).strip())
    if m is None or not 17 <= int(m[1]) <= int(m[2]) <= 81:
        raise BenchError(f"{what}: expected givens LO-HI with 17 <= LO <= HI <= 81, e.g. 60-70, got {text!r}")
    lo, hi = int(m[1]), int(m[2])
    return Rung(f"{lo}-{hi}", givens=(lo, hi))


def rungs_of(givens: tuple[str, ...], csvs: tuple[str, ...], what: str) -> list[Rung]:
    """The rungs of a sweep: its generated ``givens`` rungs, then its CSV files; names (and columns) unique."""
    rungs = [givens_rung(g, f"{what}.rungs") for g in givens] + [Rung(Path(c).stem, csv=str(c)) for c in csvs]
    seen: dict[str, str] = {}
    for r in rungs:
        if r.column in seen:
            raise BenchError(f"{what}: two rungs share the column name {r.column!r} ({seen[r.column]!r}, {r.name!r})")
        seen[r.column] = r.name
    return rungs


def columns(rungs: list[Rung]) -> list[str]:
    """The result columns of the rungs: ``board_<rung>`` and ``cell_<rung>`` of each, in order."""
    return [f"{kind}_{r.column}" for r in rungs for kind in ("board", "cell")]


_TASKS: dict[tuple[Rung, int, int], Any] = {}


def rung_task(rung: Rung, boards: int, data_seed: int):
    """The Sudoku task whose validation split is the rung's ``boards`` (a CSV's first rows, or generated;
    per process)."""
    from bdh.tasks.sudoku import Sudoku, SudokuConfig

    key = (rung, boards, data_seed)
    if key not in _TASKS:
        if rung.csv is not None:
            config = SudokuConfig(train_csv=rung.csv, val_csv=rung.csv, num_train=1, num_val=boards)
        else:
            assert rung.givens is not None
            lo, hi = rung.givens
            config = SudokuConfig(num_train=1, num_val=boards, min_givens=lo, max_givens=hi, data_seed=data_seed)
        _TASKS[key] = Sudoku(config)
    return _TASKS[key]


def score(model: Any, task: Any, batch_size: int, seed: int) -> dict[str, float]:
    """Board and cell accuracy of ``model`` on the task's validation boards at its trained depth."""
    from .results import evaluate_examples

    got = evaluate_examples(model, task, batch_size, None, seed)
    return {"board": got["board_accuracy"], "cell": got["cell_accuracy"]}


def solver_row(task: Any) -> dict[str, float]:
    """The exact solver on the validation boards: board accuracy and milliseconds per board on this machine."""
    from bdh.tasks.sudoku import solve

    n, right, start = task.size("val"), 0, time.perf_counter()
    for i in range(n):
        puzzle, solution = task.puzzle("val", i, 0)
        got = solve(puzzle)
        right += bool(got is not None and np.array_equal(got, solution))
    return {"board": right / n, "cell": float("nan"), "ms_per_board": 1000 * (time.perf_counter() - start) / n}


def ladder_rows(results: list[dict[str, Any]], rungs: list[Rung], solver: dict[str, dict[str, float]]) -> list[dict]:
    """``ladder.csv``: per (model, width, rung) board and cell accuracy over seeds, then the solver's row per rung."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((str(r["model"]), str(r["width"])), []).append(r)
    out = []
    for (model, width), rs in groups.items():
        for rung in rungs:
            row: dict[str, Any] = {"model": model, "width": width, "rung": rung.name, "seeds": len(rs)}
            for kind in ("board", "cell"):
                vals = [
                    float(r[f"{kind}_{rung.column}"]) for r in rs if r.get(f"{kind}_{rung.column}") not in (None, "")
                ]
                if vals:
                    row.update({f"{kind}_mean": np.mean(vals), f"{kind}_min": min(vals), f"{kind}_max": max(vals)})
            out.append(row)
    for rung in rungs:
        s = solver[rung.name]
        out.append({"model": "exact solver", "width": "", "rung": rung.name, "seeds": 1, "board_mean": s["board"],
                    "ms_per_board": s["ms_per_board"]})  # fmt: skip
    return out


def ladder_markdown(rows: list[dict[str, Any]], rungs: list[Rung]) -> str:
    """``ladder.md``: board (cell) accuracy per model and rung, mean (min–max) over seeds, and the solver's row."""
    names = [r.name for r in rungs]
    head = "| model | width | " + " | ".join(names) + " |\n|---|---|" + "---:|" * len(names) + "\n"
    by_model: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault((str(r["model"]), str(r["width"])), {})[str(r["rung"])] = r
    lines = []
    for (model, width), cells in sorted(
        by_model.items(), key=lambda kv: ({TRIVIAL: 1, "exact solver": 2}.get(kv[0][0], 0), kv)
    ):
        shown = []
        for name in names:
            r = cells.get(name, {})
            if "board_mean" not in r:
                shown.append("")
            elif model == "exact solver":
                shown.append(f"{r['board_mean']:.3f} ({r['ms_per_board']:.2f} ms a board)")
            else:
                board = spread_cell(r["board_mean"], r["board_min"], r["board_max"], int(r["seeds"]))
                cell = f"{r['cell_mean']:.3f}" if "cell_mean" in r else ""
                shown.append(f"{board}; cells {cell}")
        lines.append(f"| {model} | {width} | " + " | ".join(shown) + " |\n")
    return (
        "# bench sudoku: the ladder\n\nBoard accuracy per rung, mean (min–max) over seeds at the trained depth, "
        "and the cell accuracy (mean); the exact solver's board accuracy and its milliseconds per board.\n\n"
        + head
        + "".join(lines)
    )


def depth_markdown(rows: list[dict[str, Any]], trained: str) -> str:
    """``depth.md``: board accuracy (mean over seeds) against test-time passes, one row per (rung, model, width)."""
    passes = sorted({int(r["passes"]) for r in rows})
    cells: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    for r in rows:
        key = (str(r["rung"]), str(r["model"]), str(r["width"]))
        cells.setdefault(key, {}).setdefault(int(r["passes"]), []).append(float(r["board_accuracy"]))
    head = "| rung | model | width | " + " | ".join(map(str, passes)) + " |\n|---|---|---|" + "---:|" * len(passes)
    lines = [
        f"| {rung} | {model} | {width} | "
        + " | ".join(f"{np.mean(got[k]):.3f}" if k in got else "" for k in passes)
        + " |"
        for (rung, model, width), got in cells.items()
    ]
    return (
        f"# bench sudoku: board accuracy against test-time passes\n\nTrained with {trained}; mean over seeds.\n\n"
        + head
        + "\n"
        + "\n".join(lines)
        + "\n"
    )
