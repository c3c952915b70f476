"""The Triton kernels of `bdh.model.kernels.triton.read_in` (imported only when they run: Triton is optional)."""

from __future__ import annotations

import triton
import triton.language as tl

from .chunked_jit import _mm
from .gate_jit import _kept


@triton.jit
def _gated(z_ptr, x_ptr, index, live, seed, p, DROP: tl.constexpr, ACC: tl.constexpr):
    """(y = ReLU(z) x with the dropped entries zeroed, in ACC; z; x; the kept mask) at the flat ``index`` of (B, H, T,
    N): the gate's values and its mask (`gate_jit.gate_kernel`, the same Philox counter)."""
    z = tl.load(z_ptr + index, mask=live, other=0.0).to(ACC)
    x = tl.load(x_ptr + index, mask=live, other=0.0).to(ACC)
    keep = _kept(seed, index, p, DROP)
    return tl.where(keep, tl.maximum(z, 0.0) * x, 0.0), z, x, keep


@triton.jit
def read_in_kernel(
    z_ptr, x_ptr, w_ptr, out_ptr, M, T, H, N, D, seed, p, scale,
    DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """out[b t, d] = scale sum_h sum_n y[b, h, t, n] E[h N + n, d], y formed from z and x in the prologue and rounded
    to their dtype as the gate writes it (never stored). One BM x BN tile; z, x (B, H, T, N), E (H N, D)."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    inner = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC)
    for h in range(H):
        base = (((rows // T) * H + h).to(tl.int64) * T + rows % T) * N
        for n0 in range(0, N, BK):
            ns = n0 + inner
            index = base[:, None] + ns[None, :]
            y = _gated(z_ptr, x_ptr, index, (rows[:, None] < M) & (ns[None, :] < N), seed, p, DROP, ACC)[0]
            k = h * N + ns
            w = tl.load(w_ptr + k[:, None] * D + cols[None, :], mask=(ns[:, None] < N) & (cols[None, :] < D), other=0.0)
            acc += _mm(y.to(z_ptr.dtype.element_ty), w, ACC, PRECISION, WIDEN)
    out = (acc * scale).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], out, mask=(rows[:, None] < M) & (cols[None, :] < D))


@triton.jit
def read_in_grad_kernel(
    g_ptr, z_ptr, x_ptr, w_ptr, dz_ptr, dx_ptr, M, T, H, N, D, seed, p, scale,
    DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """dy = scale g E_h^T for one BM x BN tile of head h, and in the epilogue dz = dy x [z > 0], dx = dy ReLU(z), both
    zero where dropped (dy is never stored). g (B T, D), E (H N, D); dz, dx (B, H, T, N)."""
    h = tl.program_id(2)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    ns = tl.program_id(1) * BN + tl.arange(0, BN)
    inner = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC)
    k = h * N + ns
    for d0 in range(0, D, BK):
        ds = d0 + inner
        g = tl.load(g_ptr + rows[:, None] * D + ds[None, :], mask=(rows[:, None] < M) & (ds[None, :] < D), other=0.0)
        wt = tl.load(w_ptr + k[None, :] * D + ds[:, None], mask=(ns[None, :] < N) & (ds[:, None] < D), other=0.0)
        acc += _mm(g, wt, ACC, PRECISION, WIDEN)
    dy = acc * scale
    base = (((rows // T) * H + h).to(tl.int64) * T + rows % T) * N
    index, live = base[:, None] + ns[None, :], (rows[:, None] < M) & (ns[None, :] < N)
    _, z, x, keep = _gated(z_ptr, x_ptr, index, live, seed, p, DROP, ACC)
    dy = tl.where(keep, dy, 0.0)
    tl.store(dz_ptr + index, tl.where(z > 0, dy * x, 0.0).to(dz_ptr.dtype.element_ty), mask=live)
    tl.store(dx_ptr + index, (dy * tl.maximum(z, 0.0)).to(dx_ptr.dtype.element_ty), mask=live)


@triton.jit
def read_in_grad_weight_kernel(
    g_ptr, z_ptr, x_ptr, dw_ptr, M, T, H, N, D, seed, p, scale,
    DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """dE[h N + n, d] = scale sum_{b t} y[b, h, t, n] g[b t, d] for one BM x BN tile of head h, y formed again from z
    and x (rounded as the forward rounds it) in the prologue."""
    h = tl.program_id(2)
    ns = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    inner = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC)
    for m0 in range(0, M, BK):
        rows = m0 + inner
        base = (((rows // T) * H + h).to(tl.int64) * T + rows % T) * N
        index, live = base[None, :] + ns[:, None], (rows[None, :] < M) & (ns[:, None] < N)  # y^T: (BM, BK)
        yt = _gated(z_ptr, x_ptr, index, live, seed, p, DROP, ACC)[0].to(z_ptr.dtype.element_ty)
        g = tl.load(
            g_ptr + rows[:, None] * D + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < D), other=0.0
        )
        acc += _mm(yt, g, ACC, PRECISION, WIDEN)
    out = (acc * scale).to(dw_ptr.dtype.element_ty)
    k = h * N + ns
    tl.store(dw_ptr + k[:, None] * D + cols[None, :], out, mask=(ns[:, None] < N) & (cols[None, :] < D))
