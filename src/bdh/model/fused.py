"""Fused element-wise steps of the BDH layer, as custom autograd functions (same values, fewer passes).

The profile of a CPU training step (docs/performance.md) shows, after the matmuls, the element-wise
work on the (B, h, T, N) neuron tensors: the gate y = ReLU(z) * x (paper Eq. 8, z = Dy LN(a)) and
the RoPE rotation of x. Autograd records every primitive of these chains and keeps their outputs;
the functions here do the same arithmetic in fewer passes and save less for backward:

* `relu_mul(z, x)` = ReLU(z) * x. Autograd keeps ReLU(z) (a full (B, h, T, N) tensor) and runs
  threshold_backward and two multiplies; here only z and x are kept and the backward is
  dz = g * x * [z > 0], dx = g * ReLU(z), bit-identical to autograd's (the same products).
* `rope_rotate(v, cos, sin)` = v * cos + rot(v) * sin, with rot the rotation by a quarter turn of each
  pair (interleaved (2k, 2k+1) for ``rope``, (i, i + N/2) for ``rope-standard``). The tables are
  cast once to v's dtype (so bf16 stays bf16, instead of an fp32 product cast back), and the
  backward is the inverse rotation, g * cos - rot(g * sin) (rot^T = -rot), one pass instead of
  autograd's chain through mul, stack, neg and index.

Both are tested against the plain expressions in values and gradients (tests/model/test_fused.py).
Under ``torch.compile`` the model uses the plain expressions, which inductor fuses itself.
"""

from __future__ import annotations

import torch


def _rot(v: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """A quarter turn of each pair: (a, b) -> (-b, a)."""
    if interleaved:
        pairs = v.view(*v.shape[:-1], v.shape[-1] // 2, 2)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).view(v.shape)
    half = v.shape[-1] // 2
    return torch.cat((-v[..., half:], v[..., :half]), dim=-1)


class ReluMul(torch.autograd.Function):
    """ReLU(z) * x with a backward that keeps z and x only."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # noqa: D401 - autograd signature
        ctx.save_for_backward(z, x)
        return torch.relu(z) * x

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        z, x = ctx.saved_tensors
        dz = dx = None
        if ctx.needs_input_grad[0]:
            dz = (g * x).masked_fill_(z <= 0, 0)
        if ctx.needs_input_grad[1]:
            dx = g * torch.relu(z)
        return dz, dx


def relu_mul(z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """ReLU(z) * x (the gated activation y of BDH), fused: see the module docstring."""
    if z.shape != x.shape or z.dtype != x.dtype:
        return torch.relu(z) * x  # broadcasting or mixed dtypes: the plain expression
    return ReluMul.apply(z, x)


class RopeRotate(torch.autograd.Function):
    """v * cos + rot(v) * sin with the inverse rotation as backward."""

    @staticmethod
    def forward(ctx, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:  # noqa: D401
        c, s = cos.to(v.dtype), sin.to(v.dtype)
        ctx.save_for_backward(c, s)
        ctx.interleaved = interleaved
        return v * c + _rot(v, interleaved) * s

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        c, s = ctx.saved_tensors
        return (g * c).sub_(_rot(g * s, ctx.interleaved)), None, None, None


def rope_rotate(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the pairs of the last dimension of v (..., T, N) by the tables (T, N); see the module docstring."""
    return RopeRotate.apply(v, cos, sin, interleaved)
