"""benchmarks/step_kernel.py (the generation step's state read and write as one Triton kernel against the PyTorch
step) at a tiny size through Triton's interpreter: every row gets a time, a rate and a ratio; bad sizes are refused in
one line."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


def test_every_batch_and_kernel_gets_a_time_a_rate_and_a_ratio(load_benchmark, capsys):
    bench = load_benchmark("step_kernel")
    assert bench.main(["--quick", "--repeats", "1"]) == 0
    rows = [line.split("|")[1:6] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [(b, k) for b in ("1", "2") for k in bench.KERNELS]
    for _, _, us, rate, ratio in rows:
        assert float(us) > 0 and float(rate) >= 0 and float(ratio) > 0
    assert all(float(r[4]) == 1.0 for r in rows if r[1].strip() == "pytorch")
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--calls", "0"])
