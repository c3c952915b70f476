"""benchmarks/eval_sampling.py (how close a run's printed bits per byte is to the whole split's, docs/training.md):
``--quick`` prints its table, whose numbers are read back against the definitions."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("eval_sampling")


def test_quick_prints_the_command_the_machine_and_the_table(bench, capsys):
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "command: `python benchmarks/eval_sampling.py --quick`" in out and "CPU:" in out
    rows = [l for l in out.splitlines() if l.startswith("| ") and l[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 8", "| 16", "| 32"]


def test_the_table_reads_the_windows_as_defined(bench):
    """On made-up per-window numbers: the first n windows' distance, sd / sqrt(n), and the cyclic starts."""
    bits = np.array([1.0, 3.0] * 50)  # the whole split: 2.0; any 2 consecutive windows: exactly 2.0
    text = bench.table(bits, (2, 3), draws=20, seed=0)
    two, three = (l.split(" | ") for l in text.splitlines()[-2:])
    assert two[1] == "+0.0000" and two[3] == "0.0000" and two[4] == "100%"
    # three consecutive windows: 5/3 or 7/3, each at half of the starts: sd 1/3, never within 0.02
    assert three[1] == f"{5 / 3 - 2:+.4f}" and three[3] == f"{1 / 3:.4f}" and three[4] == "0%"
    assert three[2] == f"{np.std(bits, ddof=1) / np.sqrt(3):.4f}"
    assert "per-window standard deviation" in text and "100 windows" in text
