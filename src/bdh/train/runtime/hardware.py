"""What the hardware can do, asked, never assumed: capabilities (bf16, TF32, fused AdamW), allocator, compile."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import warnings
from dataclasses import dataclass

import torch
from torch import nn

#: glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


@dataclass(frozen=True)
class Capabilities:
    """The fast paths a device supports (each found by a query, see `detect`)."""

    device_type: str
    bf16: bool  # bf16 arithmetic is native (autocast to bf16 pays)
    tf32: bool  # TF32 tensor-core matmuls (CUDA, capability >= 8.0)
    fused_adamw: bool  # torch.optim.AdamW(fused=True): one kernel per step (CUDA)
    compute_capability: tuple[int, int] | None = None


def cpu_bf16_supported() -> bool:
    """Whether this CPU has native bf16 matmuls (oneDNN: AVX512-BF16 or AMX)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def detect(device: torch.device | str) -> Capabilities:
    """Ask the device what it supports."""
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        ampere = major >= 8
        return Capabilities(
            "cuda",
            bf16=bool(torch.cuda.is_bf16_supported()),
            tf32=ampere,
            fused_adamw=True,
            compute_capability=(major, minor),
        )
    if device.type == "cpu":
        return Capabilities("cpu", bf16=cpu_bf16_supported(), tf32=False, fused_adamw=False)
    return Capabilities(device.type, bf16=False, tf32=False, fused_adamw=False)


def apply_backend_flags(caps: Capabilities) -> None:
    """Turn on what the device has: TF32 matmuls and convolutions on CUDA devices that have TF32."""
    if caps.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


_libc: ctypes.CDLL | None = None


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name or "libc.so.6")
            if hasattr(lib, "mallopt") and hasattr(lib, "gnu_get_libc_version"):
                _libc = lib
        except OSError:
            _libc = None
    return _libc


def keep_freed_memory(enable: bool = True) -> bool:
    """Make glibc keep freed memory (``enable``) or restore its defaults; True if applied.

    BDH's large activations are above the mmap threshold, so they would be unmapped and faulted in every step."""
    libc = _glibc()
    if libc is None:
        return False
    if enable:
        ok = libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(2**30))
    else:  # glibc's defaults
        ok = libc.mallopt(_M_MMAP_MAX, 65536) and libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
    return bool(ok)


class CompiledOrEager(nn.Module):
    """``torch.compile(module)``, falling back to eager with one warning if compiling or running fails."""

    def __init__(self, module: nn.Module, **compile_kwargs):
        super().__init__()
        self.eager = module
        self.failed: str | None = None
        try:
            self.compiled = torch.compile(module, **compile_kwargs)
        except Exception as exc:  # any failure of the compiler means: run eager
            self._fall_back(exc)
            self.compiled = None

    def _fall_back(self, exc: BaseException) -> None:
        self.failed = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        warnings.warn(
            f"torch.compile failed ({self.failed[:300]}); running eager instead", RuntimeWarning, stacklevel=3
        )

    def forward(self, *args, **kwargs):
        if self.compiled is None:
            return self.eager(*args, **kwargs)
        try:
            return self.compiled(*args, **kwargs)
        except Exception as exc:
            out = self.eager(*args, **kwargs)  # raises here if the input itself is bad
            self.compiled = None
            self._fall_back(exc)
            return out

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["eager"], name)


def compile_or_eager(module: nn.Module, **compile_kwargs) -> nn.Module:
    """`CompiledOrEager` around ``module`` (see there)."""
    return CompiledOrEager(module, **compile_kwargs)
