"""The fused matmuls of a training step on the GPU: the encoder with its ReLU in the epilogue
(`bdh.model.kernels.triton.encode`) and the gate inside the decoder product (`bdh.model.kernels.triton.read_in`),
compiled for the device: chosen in a training step, and the model's logits and every gradient with them equal to
today's path (``BDH_TRITON=0``). fp32 with TF32 off (tests/cuda/conftest.py) and under bf16 autocast."""

from __future__ import annotations

import pytest
import torch
from model.helpers import rel_err, tiny_model

from bdh.model.kernels import Pass

pytestmark = pytest.mark.cuda
pytest.importorskip("triton", reason="Triton is not installed")

GPU = torch.device("cuda")


def test_a_training_step_takes_the_fused_matmuls(monkeypatch):
    model = tiny_model(dropout=0.1).to(GPU).train()
    c = model.kernels(Pass("parallel", 0, 16)).choice
    assert (c.encode, c.read_in) == ("triton", "gated-triton")
    assert model.kernels(Pass("parallel", 0, 16, hooked=True)).choice.read_in == "per-head"
    monkeypatch.setenv("BDH_TRITON", "0")
    c = model.kernels(Pass("parallel", 0, 16)).choice
    assert (c.encode, c.read_in) == ("heads-relu", "per-head")


def _logits_and_grads(idx: torch.Tensor, triton: str, autocast: bool, monkeypatch) -> list[torch.Tensor]:
    """Logits and every parameter gradient of a training forward (dropout off; keys of their own, D_k, and RoPE)."""
    monkeypatch.setenv("BDH_TRITON", triton)
    model = tiny_model(seed=1, separate_keys=True, positional="rope-standard").to(GPU).train()
    assert model.kernels(Pass("parallel", 0, 40)).choice.read_in == ("gated-triton" if triton == "1" else "per-head")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(idx)
    logits.float().pow(2).mean().backward()
    return [logits.float().detach()] + [p.grad for p in model.parameters()]


def test_the_model_with_the_fused_matmuls_equals_todays_path(monkeypatch):
    """fp32: the same fp32 sums in another order, within 1e-5 of the largest (the CPU tests' fp32 bound). bf16
    autocast: each path rounds its N-wide products to bf16 at other points (the fused kernels once, after the sum
    over every head), so each is compared with the fp32 path: the fused one as close to it as today's bf16 path,
    within a factor 2 and 0.01 of the largest (docs/performance.md has the distances through the interpreter)."""
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0)).to(GPU)
    fused32, today32 = (_logits_and_grads(idx, on, False, monkeypatch) for on in ("1", "0"))
    for a, b in zip(fused32, today32):
        assert rel_err(a, b) < 1e-5
    fused16, today16 = (_logits_and_grads(idx, on, True, monkeypatch) for on in ("1", "0"))
    for a, b, ref in zip(fused16, today16, today32):
        assert rel_err(a, ref) <= 2 * rel_err(b, ref) + 0.01
