"""The Triton kernels of `bdh.model.kernels.triton.encode` (imported only when they run: Triton is optional); the
pair sums and the rotation are the generation step's too (`encode_step_jit`)."""

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


@triton.jit
def _pair_sums(
    v_ptr, w_head, rows, even, M, N, D,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """The sums v W of BM rows at the even columns ``even`` and at the odd ones after them (BN interleaved pairs of
    one head, ``w_head`` its (D, N) weight), each in ACC. v is (M, D) row-major."""
    live_c = even < N
    inner = tl.arange(0, BK)
    acc_e = tl.zeros((BM, BN), dtype=ACC)
    acc_o = tl.zeros((BM, BN), dtype=ACC)
    for k0 in range(0, D, BK):
        ks = k0 + inner
        a = tl.load(v_ptr + rows[:, None] * D + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < D), other=0.0)
        live_w = (ks[:, None] < D) & live_c[None, :]
        b_e = tl.load(w_head + ks[:, None] * N + even[None, :], mask=live_w, other=0.0)
        b_o = tl.load(w_head + ks[:, None] * N + even[None, :] + 1, mask=live_w, other=0.0)
        acc_e += _mm(a, b_e, ACC, PRECISION, WIDEN)
        acc_o += _mm(a, b_o, ACC, PRECISION, WIDEN)
    return acc_e, acc_o


@triton.jit
def _rotated(x_e, x_o, c, s, ACC: tl.constexpr):
    """R x of interleaved pairs in ACC from the rounded x (as `pytorch.rope.rotate_complex`): (x_e c - x_o s,
    x_e s + x_o c)."""
    x_e, x_o = x_e.to(ACC), x_o.to(ACC)
    return x_e * c - x_o * s, x_e * s + x_o * c


@triton.jit
def encode_rope_kernel(
    v_ptr, w_ptr, cos_ptr, sin_ptr, x_ptr, xr_ptr, M, T, H, N, D,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """x[b, h, t, n] = ReLU(sum_d v[b t, d] W[h, d, n]) and its interleaved RoPE R x for BM rows and BN pairs of head
    h: x rounded once to its dtype, then rotated in ACC by the pair tables (T, N / 2: one angle a pair) at the row's
    position t and rounded once. v (B T, D) row-major, W (H, D, N), x and xr (B, H, T, N); x's offsets in 64 bits,
    v's, a head of W's and the tables' in 32 (`encode.takes_rope` checks)."""
    head = tl.program_id(2)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    even = 2 * (tl.program_id(1) * BN + tl.arange(0, BN))
    w_head = w_ptr + head.to(tl.int64) * D * N
    acc_e, acc_o = _pair_sums(v_ptr, w_head, rows, even, M, N, D, BM, BN, BK, ACC, PRECISION, WIDEN)
    x_e = tl.maximum(acc_e, 0.0).to(x_ptr.dtype.element_ty)
    x_o = tl.maximum(acc_o, 0.0).to(x_ptr.dtype.element_ty)
    live = (rows[:, None] < M) & (even[None, :] < N)
    t = rows % T
    table = t[:, None] * (N // 2) + (even // 2)[None, :]
    c = tl.load(cos_ptr + table, mask=live, other=0.0).to(ACC)
    s = tl.load(sin_ptr + table, mask=live, other=0.0).to(ACC)
    r_e, r_o = _rotated(x_e, x_o, c, s, ACC)
    out = (((rows // T) * H + head).to(tl.int64) * T + t)[:, None] * N + even[None, :]  # entry (b, h, t, 2j)
    tl.store(x_ptr + out, x_e, mask=live)
    tl.store(x_ptr + out + 1, x_o, mask=live)
    tl.store(xr_ptr + out, r_e.to(xr_ptr.dtype.element_ty), mask=live)
    tl.store(xr_ptr + out + 1, r_o.to(xr_ptr.dtype.element_ty), mask=live)


@triton.jit
def encode_rope_grad_kernel(
    gx_ptr, gxr_ptr, x_ptr, cos_ptr, sin_ptr, dh_ptr, B, H, T, N,
    GX: tl.constexpr, GXR: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    """dh = [x > 0] (g_x + R^T g_xr) for BLOCK interleaved pairs (entries 2j, 2j + 1) of one row (b, h, t) of (B, H,
    T, N), in ACC and rounded once: R^T g = (g_e c + g_o s, g_o c - g_e s), c and s of the pair tables (T, N / 2).
    The programs run position-major, the B H rows of a position one after another, so they read its table row
    together (from L2 after the first). dh is written in (H, B, T, N) storage (the heads outermost: the products
    after it fold the batch into their rows). GX, GXR: whether x's, R x's gradient is given (else zero)."""
    p = tl.program_id(0).to(tl.int64)  # position t, then the (b, h) of its rows
    t = p // (B * H)
    row = (p % (B * H)) * T + t  # (b, h, t) of (B, H, T, N)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = j < N // 2
    e = row * N + 2 * j
    out = ((((row // T) % H) * B + row // (H * T)) * T + t) * N + 2 * j  # entry (h, b, t, 2j) of (H, B, T, N)
    table = t * (N // 2) + j
    x_e = tl.load(x_ptr + e, mask=live, other=0.0)
    x_o = tl.load(x_ptr + e + 1, mask=live, other=0.0)
    g_e = tl.zeros((BLOCK,), dtype=ACC)
    g_o = tl.zeros((BLOCK,), dtype=ACC)
    if GX:
        g_e += tl.load(gx_ptr + e, mask=live, other=0.0).to(ACC)
        g_o += tl.load(gx_ptr + e + 1, mask=live, other=0.0).to(ACC)
    if GXR:
        c = tl.load(cos_ptr + table, mask=live, other=0.0).to(ACC)
        s = tl.load(sin_ptr + table, mask=live, other=0.0).to(ACC)
        r_e = tl.load(gxr_ptr + e, mask=live, other=0.0).to(ACC)
        r_o = tl.load(gxr_ptr + e + 1, mask=live, other=0.0).to(ACC)
        g_e += r_e * c + r_o * s
        g_o += r_o * c - r_e * s
    tl.store(dh_ptr + out, tl.where(x_e > 0, g_e, 0.0).to(dh_ptr.dtype.element_ty), mask=live)
    tl.store(dh_ptr + out + 1, tl.where(x_o > 0, g_o, 0.0).to(dh_ptr.dtype.element_ty), mask=live)
