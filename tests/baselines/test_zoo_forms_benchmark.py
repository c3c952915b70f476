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


def test_gla_rows_time_every_within_chunk_form(load_benchmark, capsys):
    bench = load_benchmark("zoo_forms")
    argv = ["--models", "gla", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]
    assert bench.main([*argv, "--gla-expand-k", "2", "--read-batch", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| gla")]
    assert [line.split("|")[2].strip() for line in lines] == [
        "form=reference",
        "form=pairs, chunk_size=8",
        "form=pairs, chunk_size=16",
        "form=fast, chunk_size=8",
        "form=fast, chunk_size=16",
        "form=fast, chunk_size=64",
    ]
    for line in lines:
        seconds, rate = (float(c.replace(",", "")) for c in line.split("|")[4:6])
        assert seconds > 0 and rate > 0


def test_mamba_rows_include_the_compiled_scan_where_built(load_benchmark, capsys):
    from bdh.model.kernels.cpu import native

    bench = load_benchmark("zoo_forms")
    argv = ["--models", "mamba", "--lengths", "12", "--batch", "2", "--width", "8", "--repeats", "1"]
    assert bench.main([*argv, "--mamba-d-state", "12"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| mamba")]
    want = ["scan=sequential", "scan=recurrent", "scan=parallel"] + (["scan=native"] if native.available() else [])
    assert [line.split("|")[2].strip() for line in lines] == want
    assert all(float(line.split("|")[4]) > 0 for line in lines)
