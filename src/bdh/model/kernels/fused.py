"""Fused element-wise steps of the BDH layer, as custom autograd functions (same values, fewer passes).

The profile of a CPU training step (docs/performance.md) shows, after the matmuls, the element-wise
work on the (B, h, T, N) neuron tensors: the gate y = ReLU(z) * x (paper Eq. 8, z = Dy LN(a)) and
the RoPE rotation of x. Autograd records every primitive of these chains and keeps their outputs;
the functions here do the same arithmetic in fewer passes and save less for backward:

* `relu_mul(z, x, drop)` = ReLU(z) * x, with the dropout mask applied in the same function. Plain
  autograd with ``nn.Dropout`` runs relu, mul, bernoulli_, div_ and mul forward and five passes
  backward. Here the forward is relu, zeroing the dropped entries (`bdh.model.kernels.dropout.DropMask`;
  the 1 / (1 - p) factor is applied by the caller to y E, a tensor n / D times smaller) and one
  multiply; ReLU(z) with the dropped entries zeroed and x are kept, and the backward is
  dz = threshold_backward(g * x, ReLU(z)) (= g * x * [z > 0] * kept), dx = g * ReLU(z): three passes.
  Without dropout it is bit-identical to autograd's ReLU(z) * x (the same products).
* `rope_rotate(v, cos, sin)` = v * cos + rot(v) * sin, with rot the rotation by a quarter turn of each
  pair (interleaved (2k, 2k+1) for ``rope``, (i, i + N/2) for ``rope-standard``). rot(v) is written
  swap(v) * sign, the sign folded into the sin table, so the forward is three passes (mul, the
  swap copy, addcmul) instead of five; the tables are cast once to v's dtype (bf16 stays bf16), and
  the backward is the inverse rotation g * cos + swap(g) * swap(signed sin), three passes too
  (docs/performance.md has the measurements).

Both are tested against the plain expressions in values and gradients (tests/model/test_fused.py).
Under ``torch.compile`` without the compiled loops the model uses the plain expressions, which inductor fuses
itself.

Where the compiled loops of `bdh.model.kernels.native` are built, two functions fuse further, each step one
pass (tests/model/test_native.py):

* `native_relu_rope(h)` = (ReLU(h), R ReLU(h)): forward one pass writing x and R x; it keeps x only, and its
  backward receives the gradients of both outputs (from the gate and from attention) and writes
  dh = [x > 0] (gx + R^T gxr) in one pass, where autograd would add the two gradients, rotate, and apply
  ReLU's backward in four to six passes (with fp32 round trips for bf16).
* `native_gate(z, x, p)` = ReLU(z) * keep * x: forward one pass, the dropout draws made in the loop (no mask
  drawn beforehand, stored or read; ReLU(z) * keep is written beside y with dropout, else z is kept), backward
  one pass writing dz and dx.
"""

from __future__ import annotations

import torch

from . import native
from .dropout import DropMask, drop_count


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
    """ReLU(z) * x (the gated activation y of BDH), fused: see the module docstring.

    ``drop`` (a `bdh.model.kernels.dropout.DropMask` of z's shape) zeroes those entries of y, without the
    1 / (1 - p) rescaling of dropout, which the caller applies to the (much smaller) product y E instead.
    """
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


# The compiled loops as PyTorch operators (``torch.library.custom_op``): autograd differentiates them by the
# backward loops registered below, and ``torch.compile`` keeps them as opaque calls in its graph (with the shapes
# of their fake implementations) instead of breaking the graph at a ctypes call, so a compiled model runs the
# same one-pass loops as an eager one (docs/performance.md: why inductor's own CPU kernels lose here).


@torch.library.custom_op("bdh::relu_rope", mutates_args=(), device_types="cpu")
def _relu_rope_op(
    h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str
) -> tuple[torch.Tensor, torch.Tensor]:
    return native.relu_rope(h, cos, sin, kind)


@_relu_rope_op.register_fake
def _(h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(h), torch.empty_like(h)


@torch.library.custom_op("bdh::relu_rope_back", mutates_args=(), device_types="cpu")
def _relu_rope_back_op(
    x: torch.Tensor, gx: torch.Tensor, gxr: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str
) -> torch.Tensor:
    return native.relu_rope_back(x, gx, gxr, cos, sin, kind)


@_relu_rope_back_op.register_fake
def _(x: torch.Tensor, gx: torch.Tensor, gxr: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str):
    return torch.empty_like(x)


def _relu_rope_context(ctx, inputs, output) -> None:
    _, cos, sin, kind = inputs
    ctx.save_for_backward(output[0], cos, sin)  # x: its sign is ReLU's mask
    ctx.kind = kind


def _relu_rope_backward(ctx, gx: torch.Tensor | None, gxr: torch.Tensor | None):
    """dh = [x > 0] (gx + R^T gxr): the gradients of both outputs (gate and attention) summed in one pass."""
    x, cos, sin = ctx.saved_tensors
    gx, gxr = (torch.zeros_like(x) if g is None else g.to(x.dtype).contiguous() for g in (gx, gxr))
    return _relu_rope_back_op(x, gx, gxr, cos, sin, ctx.kind), None, None, None


_relu_rope_op.register_autograd(_relu_rope_backward, setup_context=_relu_rope_context)


@torch.library.custom_op("bdh::gate", mutates_args=(), device_types="cpu")
def _gate_op(z: torch.Tensor, x: torch.Tensor, seed: torch.Tensor, drop: int) -> tuple[torch.Tensor, torch.Tensor]:
    y, r = native.gate(z, x, int(seed), drop, keep_r=drop > 0)
    return y, (z.new_empty(0) if r is None else r)  # r = ReLU(z) * keep, kept for the backward when dropping


@_gate_op.register_fake
def _(z: torch.Tensor, x: torch.Tensor, seed: torch.Tensor, drop: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(z), (z.new_empty(0) if drop == 0 else torch.empty_like(z))


@torch.library.custom_op("bdh::gate_back", mutates_args=(), device_types="cpu")
def _gate_back_op(
    g: torch.Tensor, r: torch.Tensor, x: torch.Tensor, need_dz: bool, need_dx: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    dz, dx = native.gate_back(g, r, x, need_dz, need_dx)
    return (r.new_empty(0) if dz is None else dz), (r.new_empty(0) if dx is None else dx)


@_gate_back_op.register_fake
def _(g: torch.Tensor, r: torch.Tensor, x: torch.Tensor, need_dz: bool, need_dx: bool):
    return tuple(torch.empty_like(like) if need else r.new_empty(0) for need, like in ((need_dz, r), (need_dx, x)))


def _gate_context(ctx, inputs, output) -> None:
    z, x, _, drop = inputs
    ctx.save_for_backward(output[1] if drop else z, x)  # ReLU(z) * keep, or z itself without dropout
    ctx.needs = ctx.needs_input_grad[:2]
    ctx.set_materialize_grads(False)  # r has no gradient: autograd would fill a (B, H, T, N) tensor of zeros for it


def _gate_backward(ctx, g: torch.Tensor | None, _r_grad: torch.Tensor | None):
    """dz = [r > 0] g x, dx = g ReLU(r) in one pass (r = ReLU(z) * keep)."""
    if g is None:
        return None, None, None, None
    r, x = ctx.saved_tensors
    need_dz, need_dx = ctx.needs
    dz, dx = _gate_back_op(native.rows(g.to(r.dtype)), r, x, need_dz, need_dx)
    return (dz if need_dz else None), (dx if need_dx else None), None, None


_gate_op.register_autograd(_gate_backward, setup_context=_gate_context)


def native_relu_rope(
    h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kind: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, R x) with x = ReLU(h) (paper Eq. 8), ``cos`` and ``sin`` per pair (`native.half_tables`); one pass each
    way. Needs `native.supports(h)`."""
    return _relu_rope_op(h.contiguous(), cos, sin, kind)


def native_gate(z: torch.Tensor, x: torch.Tensor, p: float = 0.0, seed: int | None = None) -> torch.Tensor | None:
    """ReLU(z) * x with dropout's dropped entries zeroed (unscaled, as `relu_mul`), one pass each way; None where the
    compiled loops cannot take these tensors (then the caller runs `relu_mul`).

    Dropout (``p`` > 0) draws inside the loop, `bdh.model.kernels.dropout.counter_draws` for ``seed`` (default: one
    taken from PyTorch's generator, as `draw_seed` takes it, so ``torch.manual_seed`` fixes the masks as it fixes
    `drop_mask`'s). The seed travels as a tensor, so that ``torch.compile`` draws it inside its graph.
    """
    if z.shape != x.shape or not native.supports(z, x):
        return None
    drop = drop_count(p)
    if seed is not None:
        seed_t = torch.tensor(seed, dtype=torch.int64)
    elif drop:
        seed_t = torch.randint(0, 2**62, (), dtype=torch.int64)  # draw_seed's draw, kept a tensor
    else:
        seed_t = torch.zeros((), dtype=torch.int64)
    return _gate_op(native.rows(z), native.rows(x), seed_t, drop)[0]
