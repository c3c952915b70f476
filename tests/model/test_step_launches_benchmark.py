"""benchmarks/step_launches.py (the kernels a layer of one generation step, today's against CUDA's choice with Triton,
counted on the CPU through Triton's interpreter): each path gets its counts, the fused encoder takes the product,
its ReLU and RoPE's complex multiply into one launch, the fused read-in the gate and E y's product, and the counts
are the same on a second run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


def test_the_fused_kernels_take_calls_of_a_layer_into_one_launch(load_benchmark, monkeypatch):
    monkeypatch.setenv("BDH_NATIVE", "0")  # restored after the test (the script turns the compiled loops off)
    bench = load_benchmark("step_launches")
    layer = {}
    for path in bench.PATHS:
        (a1, t1), (a2, t2) = (bench.count(n, path, "rope", damped=False) for n in (1, 2))
        layer[path] = (a2 - a1, t2[len(t1) :])
    aten, launches = layer["today"]
    assert launches == [] and aten["bmm"] == 4 and aten["complex"] == 1
    before, after = layer["step-only"], layer["encoder"]
    assert after[1] == ["encode_step_kernel"] + before[1]
    for name in ("relu", "complex", "mul"):  # the ReLU, the phasor and the complex multiply: in the kernel now
        assert before[0][name] == 1 and after[0][name] == 0
    assert before[0]["bmm"] - after[0]["bmm"] == 1  # Dx v
    assert sum(before[0].values()) + len(before[1]) - sum(after[0].values()) - len(after[1]) == 3
    read_in = layer["triton"]  # the gate, E y's product and its sum over the heads: one launch and its reduction
    assert read_in[1] == ["encode_step_kernel", "step_kernel", "read_in_step_kernel"]
    assert after[0]["bmm"] - read_in[0]["bmm"] == 1 and after[0]["sum"] == read_in[0]["sum"]
    assert bench.count(2, "triton", "rope", damped=False) == bench.count(2, "triton", "rope", damped=False)
