"""benchmarks/zoo_forms.py (the forms' timings in docs/baselines.md) at a tiny size."""

from __future__ import annotations

import pytest


def test_every_form_gets_a_step_time_and_a_read_rate(load_benchmark, capsys):
    bench = load_benchmark("zoo_forms")
    argv = ["--models", "rwkv", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]
    assert bench.main([*argv, "--read-batch", "3"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| rwkv")]
    assert [line.split("|")[2].strip() for line in lines] == [
        "wkv=sequential",
        "wkv=chunked, chunk_size=8",
        "wkv=chunked, chunk_size=16",
        "wkv=chunked, chunk_size=32",
    ]
    for line in lines:
        seconds, rate = (float(c.replace(",", "")) for c in line.split("|")[4:6])
        assert seconds > 0 and rate > 0
    with pytest.raises(SystemExit):
        bench.main([*argv, "--read-batch", "-1"])
    assert (
        bench.main(["--models", "deltanet", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]) == 0
    )
    forms = [line.split("|")[2].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("| delta")]
    assert forms == [
        "form=reference",
        "form=chunked, chunk_size=16",
        "form=chunked, chunk_size=32",
        "form=chunked, chunk_size=64",
    ]
