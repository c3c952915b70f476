"""benchmarks/zoo_forms.py (the forms' timings in docs/baselines.md) at a tiny size."""

from __future__ import annotations

import pytest


def rows(capsys, model: str) -> tuple[list[str], list[list[float]]]:
    """The forms of ``model``'s rows in the printed table and each row's numbers (seconds, then a read rate)."""
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {model} ")]
    numbers = [[float(c.replace(",", "")) for c in line.split("|")[4:-1]] for line in lines]
    return [line.split("|")[2].strip() for line in lines], numbers


def test_every_form_gets_a_step_time_and_a_read_rate(load_benchmark, capsys):
    bench = load_benchmark("zoo_forms")
    argv = ["--models", "rwkv", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]
    assert bench.main([*argv, "--read-batch", "3"]) == 0
    forms, numbers = rows(capsys, "rwkv")
    assert forms == [
        "wkv=sequential",
        "wkv=chunked, chunk_size=8",
        "wkv=chunked, chunk_size=16",
        "wkv=chunked, chunk_size=32",
    ]
    assert all(seconds > 0 and rate > 0 for seconds, rate in numbers)
    with pytest.raises(SystemExit):
        bench.main([*argv, "--read-batch", "-1"])
    assert (
        bench.main(["--models", "deltanet", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]) == 0
    )
    assert rows(capsys, "deltanet")[0] == [
        "form=reference",
        "form=chunked, chunk_size=16",
        "form=chunked, chunk_size=32",
        "form=chunked, chunk_size=64",
    ]


def test_gla_rows_time_every_within_chunk_form(load_benchmark, capsys):
    bench = load_benchmark("zoo_forms")
    argv = ["--models", "gla", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]
    assert bench.main([*argv, "--gla-expand-k", "2", "--read-batch", "2"]) == 0
    forms, numbers = rows(capsys, "gla")
    assert forms == [
        "form=reference",
        "form=pairs, chunk_size=8",
        "form=pairs, chunk_size=16",
        "form=fast, chunk_size=8",
        "form=fast, chunk_size=16",
        "form=fast, chunk_size=64",
    ]
    assert all(seconds > 0 and rate > 0 for seconds, rate in numbers)


def test_mamba_rows_include_the_compiled_scan_where_built(load_benchmark, capsys):
    from bdh.model.kernels.cpu import native

    bench = load_benchmark("zoo_forms")
    argv = ["--models", "mamba", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]
    assert bench.main([*argv, "--mamba-d-state", "12"]) == 0
    forms, numbers = rows(capsys, "mamba")
    want = ["scan=sequential", "scan=recurrent", "scan=parallel"] + (["scan=native"] if native.available() else [])
    assert forms == want
    assert all(seconds > 0 for seconds, *_ in numbers)
