"""benchmarks/compile_probe.py (eager against torch.compile, with and without the compiled loops): ``--quick``."""

from __future__ import annotations

import pytest

from bdh.model.kernels.cpu import native


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("compile_probe")


def _rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in l.strip("|").split("|")] for l in out.splitlines() if l.startswith("| 0")]


@pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here")
def test_quick_runs_every_way(bench, capsys):
    """Every way once, ``--dropout 0`` (its rows not repeated): compiling is most of a minute a way here, and the
    compiled pass with dropout is tests/model/test_compile.py's (the rows with and without: the test below)."""
    assert bench.main(["--quick", "--threads", "1", "--dropout", "0"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [(r[0], r[1]) for r in rows] == [("0.0", w) for w in bench.WAYS]
    for _dropout, way, ms, ratio, graphs in rows:
        assert float(ms.replace(",", "")) > 0 and float(ratio) > 0
        # the compiled rows count dynamo's graphs of one forward: the model's, and the token check's breaks
        assert graphs == "-" if way.startswith("eager") else int(graphs) >= 1
        if way == bench.WAYS[0]:
            assert ratio == "1.00"  # the baseline of its dropout


def test_without_the_loops_only_the_pytorch_ways_run(bench, capsys, monkeypatch):
    # which ways run is main's choice: the measurement itself (compiling each way, minutes on two cores) is the
    # test above's, so a stand-in records the ways asked for
    asked = []

    def measure(way, dropout, args):
        asked.append(way)
        return {"way": way, "dropout": dropout, "ms": 1.0, "graphs": 0, "top": []}

    monkeypatch.setattr(bench, "measure", measure)
    with native.disabled():
        assert bench.main(["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "not built" in out
    assert asked == ["eager, PyTorch", "compiled, inductor"] * 2  # with dropout and without
    assert {r[1] for r in _rows(out)} == {"eager, PyTorch", "compiled, inductor"}
