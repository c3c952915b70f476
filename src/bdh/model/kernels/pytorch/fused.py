"""Fused element-wise steps of the BDH layer as custom autograd functions (same values, fewer passes): `relu_mul`, the
gate y = ReLU(z) * x of Eq. 8 with the dropout mask, and `rope_rotate`, v * cos + rot(v) * sin."""

from __future__ import annotations

import torch

from .dropout import DropMask


def _swap(v: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Exchange the two members of each rotated pair (its own inverse and its own transpose)."""
    if interleaved:
        return v.view(*v.shape[:-1], v.shape[-1] // 2, 2).flip(-1).reshape(v.shape)
    half = v.shape[-1] // 2
    return torch.cat((v[..., half:], v[..., :half]), dim=-1)


def _signed(sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """sin with the sign of the quarter turn folded in: rot(v) * sin = swap(v) * _signed(sin)."""
    N = sin.shape[-1]
    if interleaved:
        sign = torch.tensor([-1.0, 1.0], dtype=sin.dtype, device=sin.device).repeat(N // 2)
    else:
        sign = torch.cat((-sin.new_ones(N // 2), sin.new_ones(N - N // 2)))
    return sin * sign


class GateDrop(torch.autograd.Function):
    """ReLU(z) * x, with optional dropped entries zeroed; the backward keeps ReLU(z) (dropped) and x only."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, x: torch.Tensor, drop: DropMask | None) -> torch.Tensor:
        rz = torch.relu(z)
        if drop is not None:
            rz = drop.zero(rz)
        ctx.save_for_backward(rz, x)
        return rz * x

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        rz, x = ctx.saved_tensors
        dz = dx = None
        if ctx.needs_input_grad[0]:
            # [z > 0] and not dropped  <=>  rz > 0: one pass, as autograd's ReLU backward
            dz = torch.ops.aten.threshold_backward(g * x, rz, 0)
        if ctx.needs_input_grad[1]:
            dx = g * rz
        return dz, dx, None


def relu_mul(z: torch.Tensor, x: torch.Tensor, drop: DropMask | None = None) -> torch.Tensor:
    """ReLU(z) * x (Eq. 8's y), fused; ``drop`` (a `DropMask` of z's shape) zeroes entries without the 1 / (1 -
    p) rescale."""
    if z.shape != x.shape or z.dtype != x.dtype:
        y = torch.relu(z) * x  # broadcasting or mixed dtypes: the plain expression
        return y if drop is None else y.masked_fill(drop.dropped(), 0)
    return GateDrop.apply(z, x, drop)


class RopeRotate(torch.autograd.Function):
    """v * cos + rot(v) * sin, written as v * cos + swap(v) * signed sin, with the inverse rotation as backward."""

    @staticmethod
    def forward(ctx, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
        c = cos.to(v.dtype)
        s = _signed(sin, interleaved)
        ctx.save_for_backward(c, _swap(s, interleaved).to(v.dtype))
        ctx.interleaved = interleaved
        return torch.addcmul(v * c, _swap(v, interleaved), s.to(v.dtype))

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        # d/dv of v c + swap(v) s is g c + swap(g s) = g c + swap(g) swap(s)   (swap^T = swap)
        c, s_swapped = ctx.saved_tensors
        return torch.addcmul(g * c, _swap(g, ctx.interleaved), s_swapped), None, None, None


def rope_rotate(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the pairs of the last dimension of v (..., T, N) by the tables (T, N); see the module docstring."""
    return RopeRotate.apply(v, cos, sin, interleaved)
