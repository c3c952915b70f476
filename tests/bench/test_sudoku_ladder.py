"""The Sudoku suite's ladder (`bdh.bench.ladder`): rungs and their checks, every rung scored beside the exact solver,
the depth sweep per rung, and ``--full`` end to end at tiny size on CSV files in Hyper-SET's (RRN) and
Sudoku-Extreme's formats."""

import csv
import dataclasses
import re

import numpy as np
import pytest

from bdh.bench import ladder, runner, sudoku
from bdh.bench.spec import BenchError
from bdh.cli import main
from bdh.tasks.sudoku import generate_puzzle


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _boards(n, seed, lo=60, hi=70):
    gen = np.random.default_rng(seed)
    return [generate_puzzle(gen, lo, hi) for _ in range(n)]


def write_extreme(path, n, seed):
    """A CSV in Sudoku-Extreme's published form: ``source,question,answer,rating``, ``.`` for a blank."""
    lines = ["source,question,answer,rating"]
    for i, (p, s) in enumerate(_boards(n, seed)):
        q = "".join("." if v == 0 else str(v) for v in p)
        lines.append(f"puzzles{i % 3}_test,{q},{''.join(map(str, s))},{i % 5}")
    path.write_text("\n".join(lines) + "\n")


def write_rrn(path, n, seed):
    """A CSV in the RRN's sudoku-hard form (Hyper-SET's data): ``puzzle,solution`` digits, ``0`` for a blank."""
    path.write_text("".join(f"{''.join(map(str, p))},{''.join(map(str, s))}\n" for p, s in _boards(n, seed)))


@pytest.mark.parametrize(
    "fields,message",
    [
        (
            {"rungs": ("70-60",)},
            "sudoku.rungs: expected givens LO-HI with 17 <= LO <= HI <= 81, e.g. 60-70, got '70-60'",
        ),
        ({"rungs": ("16-20",)}, "got '16-20'"),
        ({"rungs": (60,)}, "sudoku.rungs: expected a list of LO-HI givens, got (60,)"),
        ({"rungs": (), "csv_rungs": ()}, "sudoku.rungs: give at least one rung"),
        ({"rungs": ("60-70", "60-70")}, "two rungs share the column name '60_70'"),
        ({"train_csv": ""}, "sudoku.train_csv: must be a CSV file path or null"),
    ],
)
def test_a_bad_rung_is_one_line(fields, message):
    with pytest.raises(BenchError, match=re.escape(message)) as got:
        dataclasses.replace(sudoku.SudokuSweep(), **fields).validate()
    assert "\n" not in str(got.value)


def test_the_default_is_the_ladder_with_the_recipe():
    sweep = sudoku.SudokuSweep()
    assert [r.name for r in sweep.ladder()] == ["60-70", "45-50", "34-40"]
    assert (sweep.min_givens, sweep.max_givens) == (34, 70)  # trained over the whole ladder
    assert all(getattr(sweep, k) == v for k, v in sudoku.RECIPE.items()) and max(sweep.depth_passes) == 1024
    assert ladder.columns(sweep.ladder()) == ["board_60_70", "cell_60_70", "board_45_50", "cell_45_50"] + [
        "board_34_40",
        "cell_34_40",
    ]


def test_the_solver_row_and_the_ladder_tables(tmp_path):
    write_extreme(tmp_path / "extreme.csv", 6, 1)
    rung = ladder.Rung("extreme", csv=str(tmp_path / "extreme.csv"))
    solver = ladder.solver_row(ladder.rung_task(rung, 5, 0))
    assert solver["board"] == 1.0 and solver["ms_per_board"] > 0  # every generated board has one solution
    results = [
        {"model": "bdh", "width": 8, "seed": s, "board_extreme": b, "cell_extreme": c}
        for s, b, c in ((0, 0.2, 0.5), (1, 0.4, 0.7))
    ] + [{"model": "trivial", "width": 8, "seed": 0, "board_extreme": 0.0, "cell_extreme": 0.1}]
    rows = ladder.ladder_rows(results, [rung], {"extreme": solver})
    (bdh,) = [r for r in rows if r["model"] == "bdh"]
    assert bdh["board_mean"] == pytest.approx(0.3) and (bdh["board_min"], bdh["board_max"]) == (0.2, 0.4)
    text = ladder.ladder_markdown(rows, [rung])
    assert "| bdh | 8 | 0.300 (0.200–0.400); cells 0.600 |" in text
    lines = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert [line.split(" | ")[0] for line in lines[1:]] == ["| bdh", "| trivial", "| exact solver"]
    depth = [
        {"rung": "extreme", "model": "bdh", "width": 8, "passes": k, "board_accuracy": a}
        for k, a in ((1, 0.0), (4, 0.5), (4, 0.3))
    ]
    assert "| extreme | bdh | 8 | 0.000 | 0.400 |" in ladder.depth_markdown(depth, "2-8")


def test_full_runs_end_to_end_at_tiny_size_on_csv_files(tmp_path):
    """``--full``'s sweep (its depths, passes, batch and recipe) at a tiny width and a few steps, trained on an RRN
    CSV and scored on a generated rung and a Sudoku-Extreme CSV: every file of the suite written."""
    write_rrn(tmp_path / "hard.csv", 24, 0)
    write_extreme(tmp_path / "extreme.csv", 8, 1)
    full = sudoku.SudokuSweep.preset("full")
    sweep = dataclasses.replace(
        full,
        widths=(8,),
        lrs=(3e-3,),
        seeds=(0,),
        steps=2,
        batch_size=8,
        num_train=16,
        num_val=8,
        rungs=("66-70",),
        csv_rungs=(str(tmp_path / "extreme.csv"),),
        train_csv=str(tmp_path / "hard.csv"),
        eval_batch_size=8,
        time_freq=16,
    )
    out = tmp_path / "bench"
    suite = sudoku.suite_def(sweep)
    specs = sudoku.plan(sweep, sudoku.make_data(sweep, out / "data"))
    assert not (out / "data" / "train.csv").exists()  # trains on the CSV: nothing generated
    assert all(s.task_section["train_csv"] == str(tmp_path / "hard.csv") for s in specs)
    opts = runner.BenchOptions(out=out, threads=1, plots=False)
    done = runner.run_suite(suite, specs, opts, finish=sudoku.finisher(sweep))
    results = _rows(out / "results.csv")
    assert {r["model"] for r in results} == {"bdh", "gpt", "hyperset", "trivial"}
    for r in results:
        for col in ("board_66_70", "cell_66_70", "board_extreme", "cell_extreme"):
            assert 0.0 <= float(r[col]) <= 1.0, (r["model"], col)
    depth = _rows(out / "depth.csv")
    assert {r["rung"] for r in depth} == {"66-70", "extreme"} and {r["model"] for r in depth} == {
        "bdh",
        "gpt",
        "hyperset",
    }
    assert sorted({int(r["passes"]) for r in depth}) == list(full.depth_passes)
    table = _rows(out / "ladder.csv")
    solver = [r for r in table if r["model"] == "exact solver"]
    assert [(r["rung"], float(r["board_mean"])) for r in solver] == [("66-70", 1.0), ("extreme", 1.0)]
    assert "exact solver" in (out / "ladder.md").read_text() and out / "depth.md" in done["files"]


def test_the_rung_flags(tmp_path, capsys):
    write_extreme(tmp_path / "extreme.csv", 4, 0)
    argv = ["bench", "sudoku", "--out", str(tmp_path / "b"), "--dry-run", "--csv-rungs", str(tmp_path / "extreme.csv")]
    assert main([*argv, "--rungs", "66-70,45-50"]) == 0
    assert sudoku.SudokuSweep(rungs="66-70,45-50").rungs == ("66-70", "45-50")  # a flag's text, comma-separated
    capsys.readouterr()
    assert main([*argv, "--rungs", "70-60"]) == 2
    assert "--rungs: expected givens LO-HI" in capsys.readouterr().err
