"""The compiled CPU loops (`native`) as PyTorch operators, with their backward loops (same values, one pass each):
`native_relu_rope` (x and R x forward; dh = [x > 0] (gx + R^T gxr) backward, the two gradients summed in the same
pass) and `native_gate` (ReLU(z) * keep * x, the dropout drawn in the loop). tests/model/test_native.py."""

from __future__ import annotations

import torch

from ..pytorch.dropout import drop_count
from . import native

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

    Dropout (``p`` > 0) draws inside the loop, `bdh.model.kernels.pytorch.dropout.counter_draws` for ``seed``
    (default: one taken from PyTorch's generator, as `draw_seed` takes it, so ``torch.manual_seed`` fixes the masks
    as it fixes `drop_mask`'s). The seed travels as a tensor, so that ``torch.compile`` draws it inside its graph.
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
