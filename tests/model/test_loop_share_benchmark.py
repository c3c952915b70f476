"""benchmarks/loop_share.py (the compiled loops' wall-clock share of a step, docs/performance.md): ``--quick``."""

from __future__ import annotations

import pytest

from bdh.model.kernels.cpu import native


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("loop_share")


@pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here")
def test_quick_times_every_loop_and_restores_them(bench, capsys):
    originals = {name: getattr(native, name) for name in bench.LOOPS}
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = [l for l in out.splitlines() if l.startswith("| ") and l[2].isdigit()]
    assert len(rows) == 2 and "median share of the four compiled loops" in out
    for row in rows:  # every loop ran once per layer (2 layers), and the share is a share
        cells = row.strip("|").split("|")
        assert all(c.strip().startswith("2 x ") for c in cells[1:5])
        assert 0 < float(cells[5].strip().rstrip("%")) < 100
    assert {name: getattr(native, name) for name in bench.LOOPS} == originals  # the wrappers are removed


def test_without_the_loops_it_says_so(bench, capsys):
    with native.disabled():
        assert bench.main(["--quick"]) == 1
    assert "not built" in capsys.readouterr().err
