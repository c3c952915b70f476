"""The Triton kernel of `bdh.model.kernels.triton.encode` (imported only when it runs: Triton is optional)."""

from __future__ import annotations

import triton
import triton.language as tl

from .chunked_jit import _mm


@triton.jit
def encode_kernel(
    v_ptr, w_ptr, x_ptr, M, T, H, N, D,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """x[b, h, t, n] = ReLU(sum_d v[b t, d] W[h, d, n]) for one BM x BN tile of head h: the sum in ACC, the ReLU and
    the one rounding to x's dtype in the epilogue (the pre-activation is never written). v is (B T, D) row-major,
    W (H, D, N), x (B, H, T, N); x's offsets in 64 bits (it has more than 2^31 entries at paper size), v's and a
    head of W's in 32 (`encode.takes` checks)."""
    head = tl.program_id(2)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    inner = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC)
    w_head = w_ptr + head.to(tl.int64) * D * N
    for k0 in range(0, D, BK):
        ks = k0 + inner
        a = tl.load(v_ptr + rows[:, None] * D + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < D), other=0.0)
        b = tl.load(w_head + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < D) & (cols[None, :] < N), other=0.0)
        acc += _mm(a, b, ACC, PRECISION, WIDEN)
    x = tl.maximum(acc, 0.0).to(x_ptr.dtype.element_ty)
    out = (((rows // T) * H + head).to(tl.int64) * T + rows % T) * N  # row (b, h, t) of x (B, H, T, N)
    tl.store(x_ptr + out[:, None] + cols[None, :], x, mask=(rows[:, None] < M) & (cols[None, :] < N))
