"""The Triton kernel of `bdh.model.kernels.triton.step` (imported only when it runs: Triton is optional)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def step_kernel(
    q_ptr, k_ptr, v_ptr, s_ptr, part_ptr, u_ptr,
    sq_b, sq_h, sk_b, sk_h, sv_b, sv_h,
    H, N, D, ROWS, SPLIT,
    SHARED: tl.constexpr, HAS_U: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    """One token of Eq. 8 on ROWS rows and BD columns of one head's N x D fp32 state S (contiguous, in place): the
    read q^T S over these rows into ``part`` (summed over the programs of a column block by the caller), then
    S <- u (S + k v^T); S read once and written once."""
    split, col, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = bh // H, bh % H
    d = col * BD + tl.arange(0, BD)
    live_d = d < D
    v = tl.load(v_ptr + b * sv_b + h * sv_h + d, mask=live_d, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + h).to(tl.float32) if HAS_U else 1.0
    acc = tl.zeros([BD], dtype=tl.float32)
    state = s_ptr + bh.to(tl.int64) * N * D
    for start in range(split * ROWS, split * ROWS + ROWS, BN):
        n = start + tl.arange(0, BN)
        live_n = n < N
        q = tl.load(q_ptr + b * sq_b + h * sq_h + n, mask=live_n, other=0.0).to(tl.float32)
        k = q if SHARED else tl.load(k_ptr + b * sk_b + h * sk_h + n, mask=live_n, other=0.0).to(tl.float32)
        where = state + n[:, None].to(tl.int64) * D + d[None, :]
        live = live_n[:, None] & live_d[None, :]
        s = tl.load(where, mask=live, other=0.0)
        acc += tl.sum(q[:, None] * s, axis=0)
        tl.store(where, (s + k[:, None] * v[None, :]) * u, mask=live)
    tl.store(part_ptr + (bh * SPLIT + split) * D + d, acc, mask=live_d)
