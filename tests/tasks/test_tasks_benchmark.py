"""benchmarks/tasks.py (the data generators' timings in docs/tasks.md): ``--quick`` prints every table."""

from __future__ import annotations

import pytest


@pytest.fixture
def tasks_bench(load_benchmark):
    return load_benchmark("tasks")


def test_quick_prints_the_command_the_machine_and_every_table(tasks_bench, capsys):
    assert tasks_bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "command: `python benchmarks/tasks.py --quick`" in out
    assert "cores" in out and "load average" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    mqar = [float(c) for c in rows["seconds (200 examples, V = 8192)"].split("|")[2:-1]]
    assert len(mqar) == 2 and all(s >= 0 for s in mqar)
    ms = [float(c) for c in rows["ms per puzzle"].split("|")[2:-1]]
    assert len(ms) == 3 and all(m > 0 for m in ms)  # two targets and the default range
    reached = [float(c) for c in rows["givens reached (mean)"].split("|")[2:-1]]
    assert reached[:2] == [34.0, 30.0]  # high targets are always reached
    assert 24 <= reached[2] <= 34
    assert "boardpath pool (120 boards of 10×10" in out


def test_sudoku_column_reports_the_givens_of_the_puzzles_it_made(tasks_bench):
    from bdh.tasks.common import rng
    from bdh.tasks.sudoku import generate_puzzle

    ms, mean = tasks_bench.sudoku_column(2, 40, 40, 1)
    made = [int((generate_puzzle(rng(0, 40, 40, i), 40, 40, 1)[0] > 0).sum()) for i in range(2)]
    assert ms > 0 and mean == sum(made) / 2
