"""benchmarks/fused_kernels.py (the encoder's and the gated read-in's Triton kernels against today's step) at a tiny
size through Triton's interpreter: every kernel gets its times, a rate and a ratio; bad sizes are refused in one
line."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


def test_every_kernel_gets_times_a_rate_and_a_ratio(load_benchmark, capsys):
    bench = load_benchmark("fused_kernels")
    assert bench.main(["--quick", "--repeats", "1"]) == 0
    rows = [line.split("|")[1:6] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [r[0].strip() for r in rows] == list(bench.KERNELS)
    for _, fwd, both, rate, ratio in rows:
        assert float(fwd) > 0 and float(both) > 0 and float(rate.replace(",", "")) > 0 and float(ratio) > 0
    assert float(rows[0][4]) == 1.0 and float(rows[2][4]) == 1.0  # today's row of each step
    for bad in (["--repeats", "0"], ["--dropout", "1"]):
        with pytest.raises(SystemExit):
            bench.main(["--quick", *bad])
