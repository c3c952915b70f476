"""benchmarks/delta_kernels.py (the delta rule's Triton kernels against the PyTorch form and the plain rule's) at a
tiny size through Triton's interpreter: every kernel gets a time and a rate; bad sizes are refused in one line."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


def test_every_kernel_gets_a_time_a_rate_and_a_ratio(load_benchmark, capsys):
    bench = load_benchmark("delta_kernels")
    assert bench.main(["--quick", "--repeats", "1"]) == 0
    rows = [line.split("|")[1:5] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [r[0].strip() for r in rows] == list(bench.KERNELS)
    for _, ms, rate, ratio in rows:
        assert float(ms) > 0 and float(rate.replace(",", "")) > 0 and float(ratio) > 0
    assert float(rows[0][3]) == 1.0
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--repeats", "0"])
