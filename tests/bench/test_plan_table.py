"""`bdh.bench.plan_table.plan_table`: a Python caller gets what ``bdh bench SUITE --dry-run`` printed."""

from __future__ import annotations

import pytest

from bdh.cli import main


@pytest.mark.parametrize("suite", ["recall", "boardpath", "sudoku"])
def test_plan_table_is_what_the_dry_run_printed(suite, tmp_path, capsys):
    from bdh.bench import boardpath, recall, sudoku
    from bdh.bench.plan_table import plan_table

    out = tmp_path / "o"
    assert main(["bench", suite, "--quick", "--dry-run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    module = {"recall": recall, "boardpath": boardpath, "sudoku": sudoku}[suite]
    sweep = {"recall": recall.RecallSweep, "boardpath": boardpath.BoardPathSweep, "sudoku": sudoku.SudokuSweep}[
        suite
    ].preset("quick")
    paths = (out / "data" / "train.csv", out / "data" / "val.csv")
    specs = module.plan(sweep, paths) if suite == "sudoku" else module.plan(sweep)
    table = plan_table(specs)
    assert printed == table + "\n"
    assert table.splitlines()[-1].startswith(f"{len(specs)} runs (") and " params; model " in table
