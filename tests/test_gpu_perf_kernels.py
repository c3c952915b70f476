"""benchmarks/gpu_all.py's perf plan, its kernel steps (benchmarks/fused_kernels.py, delta_kernels.py, step_kernel.py)
end to end on the CPU through Triton's interpreter: each step's process, its log, its table copied into summary.md;
without Triton they are recorded as skipped."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def gpu_all(load_benchmark):
    """benchmarks/gpu_all.py as a module."""
    return load_benchmark("gpu_all")


def test_the_kernel_steps_run_in_the_interpreter_and_their_tables_reach_the_summary(gpu_all, tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cpu would not be what runs there")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "run"
    others = [name for name in gpu_all.LIMITS if name not in gpu_all.TRITON_STEPS]
    assert gpu_all.main(["--device", "cpu", "--quick", "--out", str(out), "--skip", *others]) == 0
    files = {p.name for p in out.iterdir()}
    logs = {f"{step.replace('-', '_')}.log" for step in gpu_all.TRITON_STEPS}
    assert files == {"environment.txt", "summary.md"} | logs, files
    summary = (out / "summary.md").read_text()
    for step in gpu_all.TRITON_STEPS:
        assert f"| {step} | ok |" in summary and f"## {step.replace('-', '_')}.log" in summary, summary
    rows = ("| encode/triton |", "| read-in/gated-triton |", "| delta-chunked-triton |", "| chunked-triton |")
    rows += ("| 1 | triton |", "| 2 | pytorch |")  # the generation step's, by batch
    for kernel in rows:
        assert kernel in summary, kernel
    # the ranked order: the tests and the headline table before the new kernels, the profile and generation after
    assert list(gpu_all.LIMITS).index("training") < list(gpu_all.LIMITS).index("fused-kernels")
    assert sum(gpu_all.LIMITS.values()) <= 540  # inside a 10-minute command, with the environment and start-up


def test_without_triton_the_kernel_steps_are_skipped(gpu_all, tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cpu would not be what runs there")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    out = tmp_path / "run"
    others = [name for name in gpu_all.LIMITS if name not in gpu_all.TRITON_STEPS]
    assert gpu_all.main(["--device", "cpu", "--quick", "--out", str(out), "--skip", *others]) == 0
    summary = (out / "summary.md").read_text()
    assert all(f"| {step} | skipped (no Triton) |" in summary for step in gpu_all.TRITON_STEPS), summary
