"""The Triton kernel of `bdh.model.kernels.triton.encode_step` (imported only when it runs: Triton is optional)."""

from __future__ import annotations

import triton
import triton.language as tl

from .encode_jit import _pair_sums, _rotated


@triton.jit
def encode_step_kernel(
    v_ptr, w_ptr, cos_ptr, sin_ptr, x_ptr, xr_ptr, M, H, N, D,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """For one token: x[b, h, n] = ReLU(sum_d v[b, d] W[h, d, n]) and its interleaved RoPE, for BM rows and BN pairs
    (columns 2j, 2j + 1) of head h. The even and the odd columns are two sums in ACC; x is rounded once to its dtype,
    then rotated in ACC from the rounded x (cos, sin read at the even columns of the one-row tables) and rounded
    once: xr[2j] = x[2j] c - x[2j+1] s, xr[2j+1] = x[2j] s + x[2j+1] c. v is (B, D), W (H, D, N), x and xr
    (B, H, N); x's offsets in 64 bits, v's and a head of W's in 32 (`encode_step.takes` checks)."""
    head = tl.program_id(2)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    even = 2 * (tl.program_id(1) * BN + tl.arange(0, BN))
    live_c = even < N
    w_head = w_ptr + head.to(tl.int64) * D * N
    acc_e, acc_o = _pair_sums(v_ptr, w_head, rows, even, M, N, D, BM, BN, BK, ACC, PRECISION, WIDEN)
    x_e = tl.maximum(acc_e, 0.0).to(x_ptr.dtype.element_ty)
    x_o = tl.maximum(acc_o, 0.0).to(x_ptr.dtype.element_ty)
    c = tl.load(cos_ptr + even, mask=live_c, other=0.0).to(ACC)[None, :]
    s = tl.load(sin_ptr + even, mask=live_c, other=0.0).to(ACC)[None, :]
    r_e, r_o = _rotated(x_e, x_o, c, s, ACC)
    out = (rows * H + head).to(tl.int64)[:, None] * N + even[None, :]  # entry (b, h, 2j) of (B, H, N)
    live = (rows[:, None] < M) & live_c[None, :]
    tl.store(x_ptr + out, x_e, mask=live)
    tl.store(x_ptr + out + 1, x_o, mask=live)
    tl.store(xr_ptr + out, r_e.to(xr_ptr.dtype.element_ty), mask=live)
    tl.store(xr_ptr + out + 1, r_o.to(xr_ptr.dtype.element_ty), mask=live)
