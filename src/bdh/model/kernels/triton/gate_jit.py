"""The Triton kernels of `bdh.model.kernels.triton.gate` (imported only when they run: Triton is optional)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _block(numel, BLOCK: tl.constexpr):
    """This program's entries (their flat indices, in 64 bits: the Philox counter of each) and which exist."""
    index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    return index, index < numel


@triton.jit
def _kept(seed, index, p, DROP: tl.constexpr):
    """Whether each entry survives dropout at rate p: u >= p, u ~ U(0, 1) by Philox from (seed, the entry's index)."""
    if DROP:
        return tl.rand(seed, index) >= p
    return index >= 0


@triton.jit
def gate_kernel(
    z_ptr, x_ptr, y_ptr, numel, seed, p, DROP: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr
):  # fmt: skip
    """y = ReLU(z) * x, the dropped entries zeroed, computed in ACC (fp32, fp64 for fp64) and rounded once to y's
    dtype."""
    index, live = _block(numel, BLOCK)
    z = tl.load(z_ptr + index, mask=live, other=0.0).to(ACC)
    x = tl.load(x_ptr + index, mask=live, other=0.0).to(ACC)
    y = tl.where(_kept(seed, index, p, DROP), tl.maximum(z, 0.0) * x, 0.0)
    tl.store(y_ptr + index, y.to(y_ptr.dtype.element_ty), mask=live)


@triton.jit
def gate_backward_kernel(
    g_ptr, z_ptr, x_ptr, dz_ptr, dx_ptr, numel, seed, p, DROP: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr
):  # fmt: skip
    """dz = g x [z > 0], dx = g ReLU(z), both zero where the entry was dropped (the mask drawn again), in ACC."""
    index, live = _block(numel, BLOCK)
    g = tl.load(g_ptr + index, mask=live, other=0.0).to(ACC)
    z = tl.load(z_ptr + index, mask=live, other=0.0).to(ACC)
    x = tl.load(x_ptr + index, mask=live, other=0.0).to(ACC)
    g = tl.where(_kept(seed, index, p, DROP), g, 0.0)
    tl.store(dz_ptr + index, tl.where(z > 0, g * x, 0.0).to(dz_ptr.dtype.element_ty), mask=live)
    tl.store(dx_ptr + index, (g * tl.maximum(z, 0.0)).to(dx_ptr.dtype.element_ty), mask=live)
