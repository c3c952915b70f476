"""benchmarks/write_capacity.py (the delta rule's write keys under filler writes, a synthetic probe of one head) at a
tiny size: one fact with no filler is read back by every kind of write key, fillers wear unit keys down, rectified
keys overlap with mean cosine 1/pi and centred ones about 0, and bad sizes are refused."""

from __future__ import annotations

import math

import pytest


def _rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")][1:]


def test_the_probe_reads_what_it_wrote_and_what_fillers_erase(load_benchmark, capsys):
    bench = load_benchmark("write_capacity")
    sizes = ["--neurons", "64", "--width", "16", "--trials", "8", "--key-tokens", "4", "--filler-tokens", "16"]
    args = ["--facts", "1", "--fillers", "0", "64", "--active", "0.5", "--kinds", "unit", "centred", "top1", *sizes]
    assert bench.main(args) == 0
    rows = {r[0]: r for r in _rows(capsys.readouterr().out)}
    assert set(rows) == {"unit", "centred", "top1"}
    for kind, (_, _, facts, none, _) in rows.items():
        assert facts == "1" and none.startswith("1.00"), kind  # a single write, read back alone
    # ReLU'd Gaussians: E[relu(z) relu(z')] / E[relu(z)^2] = 1/pi; 4,096 pairs of 64 neurons leave about 0.01
    assert abs(float(rows["unit"][1]) - 1 / math.pi) < 0.03
    assert abs(float(rows["centred"][1])) < 0.03
    assert float(rows["unit"][4].split()[0]) < 1.0  # 64 dense filler writes into 64 rows wear the fact down


def test_bad_sizes_are_refused(load_benchmark):
    bench = load_benchmark("write_capacity")
    for bad in (["--active", "1.5"], ["--facts", "80"], ["--neurons", "8", "--kinds", "top16"]):
        with pytest.raises(SystemExit):
            bench.main(bad)
