"""Capability detection (forced both ways), the compile fallback, the CPU allocator setting and bf16 parity."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from _train_helpers import tiny, train_losses
from torch import nn

from bdh.train import load_config, train
from bdh.train.runtime import hardware
from bdh.train.runtime.device import autocast_dtype, resolve_device
from bdh.train.runtime.distributed import DistEnv


# --------------------------------------------------------------------------- capabilities
@pytest.mark.parametrize("capability, bf16", [((7, 0), False), ((8, 0), True), ((9, 0), True)])
def test_cuda_capabilities_come_from_the_device(monkeypatch, capability, bf16):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    caps = hardware.detect(torch.device("cuda"))
    assert caps.device_type == "cuda" and caps.compute_capability == capability
    assert caps.bf16 is bf16
    assert caps.tf32 is (capability[0] >= 8)
    assert caps.fused_adamw
    assert autocast_dtype("auto", torch.device("cuda")) == (torch.bfloat16 if bf16 else None)


@pytest.mark.parametrize(
    "name, env, want",
    [
        ("auto", DistEnv(), "cuda:1"),  # one process: the current device
        ("cuda", DistEnv(), "cuda:1"),
        ("cuda", DistEnv(rank=3, world_size=4, local_rank=0), "cuda:0"),  # torchrun: the local rank's GPU
        ("auto", DistEnv(rank=1, world_size=2, local_rank=1), "cuda:1"),
        ("cuda:0", DistEnv(), "cuda:0"),  # given: kept
    ],
)
def test_the_training_device_of_cuda_always_has_an_index(monkeypatch, name, env, want):
    """torch.cuda.set_device refuses a bare 'cuda' (ValueError: expected an index): the trainer must resolve one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device(name, env) == torch.device(want)
    with pytest.raises(ValueError, match="cuda:2"):  # a LOCAL_RANK beyond the GPUs is one line naming it
        resolve_device("cuda", DistEnv(rank=2, world_size=3, local_rank=2))


def test_tf32_is_switched_on_only_where_the_device_has_it(monkeypatch):
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        hardware.apply_backend_flags(hardware.Capabilities("cuda", bf16=False, tf32=False, fused_adamw=True))
        assert not torch.backends.cuda.matmul.allow_tf32
        hardware.apply_backend_flags(hardware.Capabilities("cuda", bf16=True, tf32=True, fused_adamw=True))
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("native", [True, False])
def test_cpu_capabilities_and_auto_precision(monkeypatch, native):
    monkeypatch.setattr(hardware, "cpu_bf16_supported", lambda: native)
    caps = hardware.detect("cpu")
    assert caps == hardware.Capabilities("cpu", bf16=native, tf32=False, fused_adamw=False)
    # auto stays fp32 on CPU whatever the CPU has (the documented default); bf16 is asked for explicitly
    assert autocast_dtype("auto", torch.device("cpu")) is None
    assert autocast_dtype("bf16", torch.device("cpu")) == torch.bfloat16


def test_cpu_bf16_query_answers_a_bool():
    assert isinstance(hardware.cpu_bf16_supported(), bool)


# --------------------------------------------------------------------------- compile fallback
class _Broken(nn.Module):
    def forward(self, *args, **kwargs):
        raise RuntimeError("backend exploded")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


def test_a_compile_that_fails_when_run_warns_once_and_runs_eager(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda module, **kw: _Broken())
    model = _model()
    wrapped = hardware.compile_or_eager(model)
    x = torch.randn(2, 4)
    with pytest.warns(RuntimeWarning, match="torch.compile failed.*backend exploded.*running eager"):
        out = wrapped(x)
    assert torch.equal(out, model(x)) and wrapped.failed is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert torch.equal(wrapped(x), model(x))
    assert list(wrapped.parameters()) == list(model.parameters())


def test_a_compile_that_fails_at_once_warns_and_runs_eager(monkeypatch):
    def refuse(module, **kw):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(torch, "compile", refuse)
    model = _model()
    with pytest.warns(RuntimeWarning, match="no compiler"):
        wrapped = hardware.compile_or_eager(model)
    x = torch.randn(2, 4)
    assert torch.equal(wrapped(x), model(x))


def test_a_bad_input_raises_the_eager_error_not_a_fallback(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda module, **kw: module)  # a compile that works
    wrapped = hardware.compile_or_eager(_model())
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        wrapped(torch.randn(2, 5))
    assert wrapped.failed is None


def test_the_trainer_falls_back_to_eager_when_compile_fails(monkeypatch, corpus_file, tmp_path):
    monkeypatch.setattr(torch, "compile", lambda module, **kw: _Broken())
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        result = train(
            load_config(
                None, tiny(corpus_file, tmp_path / "run", "train.max_steps=2", "train.compile=true", "eval.every=0")
            )
        )
    assert result.step == 2


# --------------------------------------------------------------------------- allocator
@pytest.mark.skipif(not sys.platform.startswith("linux") or hardware._glibc() is None, reason="glibc only")
def test_keep_freed_memory_applies_and_restores():
    assert hardware.keep_freed_memory(True)
    try:
        x = torch.ones(64, 2**16)  # 16 MiB, allocated and freed under the setting
        assert float(x.sum()) == 64 * 2**16
    finally:
        assert hardware.keep_freed_memory(False)


# --------------------------------------------------------------------------- bf16 autocast parity
def test_bf16_autocast_keeps_fp32_master_weights_and_the_losses_of_fp32(corpus_file, tmp_path):
    """30 steps of a tiny model, fp32 against bf16 autocast, same seed and batches.

    bf16 keeps 8 significant bits (relative rounding 2^-9 per operation); the optimiser runs on fp32
    master weights and the loss is taken in fp32, so the rounding does not accumulate in the weights.
    Measured on this tiny model: per-step losses within 7e-4 nats, the mean of the last ten within 4e-4.
    Bounds: every loss within 0.01 nats and the last-ten mean within 0.002 (about 10x the measured gap,
    and 25x below the gap to a run with another seed, checked below so the test can fail: bf16 weights or
    a wrong cast would drift by more).
    """
    common = ["train.max_steps=30", "eval.every=0", "optim.warmup_steps=3", "optim.lr=3e-3"]
    runs = {}
    for precision in ("fp32", "bf16"):
        result = train(
            load_config(None, tiny(corpus_file, tmp_path / precision, *common, f"train.precision={precision}"))
        )
        runs[precision] = train_losses(result.run_dir)
        assert all(p.dtype == torch.float32 for p in result.model.parameters())  # master weights stay fp32
    other = train(
        load_config(None, tiny(corpus_file, tmp_path / "seed", *common, "train.precision=fp32", "train.seed=7"))
    )
    other_losses = train_losses(other.run_dir)
    f32, b16 = runs["fp32"], runs["bf16"]
    assert f32[30] < f32[1] - 1.0  # it learns
    diffs = [abs(f32[s] - b16[s]) for s in f32]
    last = lambda d: sum(d[s] for s in range(21, 31)) / 10  # noqa: E731
    assert max(diffs) < 0.01, diffs
    assert abs(last(f32) - last(b16)) < 0.002
    assert max(abs(f32[s] - other_losses[s]) for s in f32) > 0.1  # the bound separates a different run
