"""Rotary position embedding over the neuron dimension of each head (keys = queries = x, Eq. 8's U with k = 2 blocks).

* ``rope``: the official ``pathwaycom/bdh`` scheme: ``f_i = theta^(-2 floor(i/2) / N) / (2 pi)`` turns per token (theta
= 2^16), interleaved pairs (2k, 2k+1), phase ``(t * f_i mod 1) * 2 pi`` in float32, so a recurrent step uses the
parallel form's exact angles.
* ``rope-standard``: the common RoPE (Su et al.): base 10000, neuron i paired with i + N/2, angle ``t * theta^(-2 i
/ N)``."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from bdh.errors import UserError

from .fused import rope_rotate


def official_frequencies(N: int, theta: float) -> torch.Tensor:
    """Frequencies in turns per token for the official layout, shape (N,), float32."""
    i = torch.arange(0, N, 1, dtype=torch.float32)
    paired = torch.floor(i / 2) * 2
    return 1.0 / (theta ** (paired / N)) / (2 * math.pi)


def standard_frequencies(N: int, theta: float) -> torch.Tensor:
    """Frequencies in radians per token for the standard (halves) layout, shape (N // 2,), float32."""
    i = torch.arange(0, N // 2, 1, dtype=torch.float32)
    return theta ** (-2.0 * i / N)


def frequencies(kind: str, N: int, theta: float) -> torch.Tensor:
    """The frequency vector of a scheme: (N,) turns for ``rope``, (N/2,) radians for ``rope-standard``."""
    if kind == "rope":
        return official_frequencies(N, theta)
    if kind == "rope-standard":
        return standard_frequencies(N, theta)
    return torch.zeros(0)


def rope_tables(kind: str, freqs: torch.Tensor, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (length, N) float32, for absolute positions start .. start+length-1 (once per forward)."""
    return rope_tables_at(kind, freqs, torch.arange(start, start + length, device=freqs.device, dtype=torch.float32))


#: positions split as hi * SPLIT + lo in `phase_turns` (a power of two: scaling a frequency by it is exact)
SPLIT = 4096


def phase_turns(pos: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """frac(pos * f) in turns for integer float32 positions, as frac(hi frac(SPLIT f)) + frac(lo f) with pos = hi SPLIT
    + lo: exactly ``(pos * f) % 1`` below SPLIT, and past it accurate to the rounding of lo f
    (tests/model/test_rope.py). No branch on the values, so the host never reads a position."""
    hi = torch.div(pos, SPLIT, rounding_mode="trunc")
    return (hi * (freqs * SPLIT % 1) % 1 + (pos - hi * SPLIT) * freqs % 1) % 1


def rope_tables_at(kind: str, freqs: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (len(positions), N) float32, at the tensor ``positions``, read on the device only (CUDA
    graphs); equal to `rope_tables` below 2^24."""
    freqs = freqs.float()
    pos = positions.to(device=freqs.device, dtype=torch.float32).view(-1, 1)
    if kind == "rope":
        phases = phase_turns(pos, freqs.view(1, -1)) * (2 * math.pi)
        return torch.cos(phases), torch.sin(phases)
    if kind == "rope-standard":
        angles = pos * freqs.view(1, -1)
        cos, sin = torch.cos(angles), torch.sin(angles)
        return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    raise UserError(f"rope: unknown positional scheme {kind!r}")


def rotation(kind: str, impl: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The function (v, cos, sin) -> v (..., T, N) rotated by the ``kind`` tables (T, N), as ``impl`` (chosen once by
    `rope_impl`); all give the same values: ``none`` (identity), ``complex`` (`rotate_complex`), ``fused``
    (`fused.rope_rotate`), ``plain`` (`rope_plain`, the official expression)."""
    if impl == "none" or kind == "none":
        return _identity
    if impl == "complex":
        return rotate_complex
    if impl == "fused":
        return partial(_rotate_fused, interleaved=kind == "rope")
    if impl == "plain":
        return partial(rope_plain, kind)
    raise UserError(f"rope: unknown implementation {impl!r}")


def _identity(v: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    return v


def rotate_complex(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved pairs rotated as one complex multiply each; bf16 / fp16 rotate in fp32 and round once."""
    work = v.contiguous() if v.dtype in (torch.float32, torch.float64) else v.float()
    phasor = torch.complex(cos[..., ::2].to(work.dtype), sin[..., ::2].to(work.dtype))
    pairs = torch.view_as_complex(work.view(*v.shape[:-1], v.shape[-1] // 2, 2))
    return torch.view_as_real(pairs * phasor).view(v.shape).to(v.dtype)


def _rotate_fused(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    return rope_rotate(v.contiguous(), cos, sin, interleaved=interleaved)


def rope_plain(kind: str, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotation as the official code writes it (the reference the fast paths are tested against)."""
    if kind == "rope":
        v_rot = torch.stack((-v[..., 1::2], v[..., ::2]), dim=-1).view(*v.shape)
    else:
        half = v.shape[-1] // 2
        v_rot = torch.cat((-v[..., half:], v[..., :half]), dim=-1)
    return (v * cos).to(v.dtype) + (v_rot * sin).to(v.dtype)
