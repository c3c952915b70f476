"""benchmarks/matmul_share.py (the step's matmuls by shape against the peak, docs/performance.md): ``--quick``."""

from __future__ import annotations

import pytest


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("matmul_share")


def test_flops_of_a_key_are_two_m_k_n_times_the_batch(bench):
    assert bench.flops("bmm bf16 (8, 32, 64) x (64, 16)") == 2 * 8 * 32 * 64 * 16
    assert bench.flops("mm fp32 (128, 256) x (256, 4096)") == 2 * 128 * 256 * 4096


def test_quick_times_the_matmuls_of_forward_and_backward(bench, capsys):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert bench.main(["--quick", "--setting", "fp32"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| mm ") or line.startswith("| bmm ")]
    # the decoder's and encoders' products forward and backward, and attention's batched ones
    assert any(r.startswith("| mm ") for r in rows) and any(r.startswith("| bmm ") for r in rows)
    assert all(" fp32 " in r for r in rows)
    assert "of the step" in out and "every matmul at the peak" in out
    assert _get_current_dispatch_mode() is None  # the timing mode is gone
