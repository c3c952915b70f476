"""The Triton kernels of `bdh.model.kernels.chunked_triton` (imported only when they run: Triton is optional).

Three kernels, each used twice (forward and backward); the tiling and the equations are in the docstring of
`bdh.model.kernels.chunked_triton`. Every pointer offset is built in 64-bit integers: at paper size the
chunk-state buffer alone has more than 2^31 entries.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _mm(a, b, ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    """a @ b summed in ACC. WIDEN (Triton's CPU interpreter, whose dot has no bf16 or fp16 path): the operands
    are widened to fp32 first, which is exact (a product of two bf16 or fp16 numbers is exact in fp32), so the
    result is the tensor cores' up to the order of the sums."""
    if WIDEN:
        return tl.dot(a.to(ACC), b.to(ACC), out_dtype=ACC, input_precision="ieee")
    return tl.dot(a, b, out_dtype=ACC, input_precision=PRECISION)


@triton.jit
def _decay_mask(log_u, rows, cols, HAS_U: tl.constexpr, ACC: tl.constexpr):
    """M[r, c] = u^(r - c) where r > c, else 0 (the strictly causal, damped mask of Eq. 4, within a chunk)."""
    gap = rows[:, None] - cols[None, :]
    keep = gap > 0
    if HAS_U:
        return tl.where(keep, tl.exp(log_u * tl.maximum(gap, 0).to(ACC)), 0.0)
    return tl.where(keep, 1.0, 0.0).to(ACC)


@triton.jit
def scan_kernel(
    x_ptr,
    y_ptr,
    init_ptr,
    states_ptr,
    final_ptr,
    log_u_ptr,
    sx_b,
    sx_h,
    sx_t,
    sx_n,
    sy_b,
    sy_h,
    sy_t,
    sy_d,
    si_b,
    si_h,
    si_n,
    si_d,
    H,
    T,
    N,
    D,
    C,
    NC,
    REVERSE: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_U: tl.constexpr,
    BC: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """The state at every chunk boundary, one (BN x BD) tile of it per program, kept in registers.

    Forward (x = k, y = v): states[c] = S before chunk c, S <- u^len S + k_c^T (u^(len - j) v_c).
    Reverse (x = q, y = dO): states[c] = dS after chunk c, dS <- u^len dS + q_c^T (u^i dO_c).
    ``final`` gets the state after the last chunk (forward) or before the first (reverse), in ACC.
    """
    pn, pd, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    b, h = bh // H, bh % H
    rn = pn * BN + tl.arange(0, BN)
    rd = pd * BD + tl.arange(0, BD)
    rc = tl.arange(0, BC)
    mn, md = rn < N, rd < D
    tile = mn[:, None] & md[None, :]
    if HAS_INIT:
        ptr = init_ptr + b * si_b + h * si_h + rn[:, None] * si_n + rd[None, :] * si_d
        S = tl.load(ptr, mask=tile, other=0.0).to(ACC)
    else:
        S = tl.zeros((BN, BD), dtype=ACC)
    log_u = 0.0
    if HAS_U:
        log_u = tl.load(log_u_ptr + h).to(ACC)
    for i in range(NC):
        c = i
        if REVERSE:
            c = NC - 1 - i
        t0 = c * C
        length = tl.minimum(C, T - t0)
        live = rc < length
        t = (t0 + rc).to(tl.int64)
        out = states_ptr + ((bh * NC + c) * N + rn[:, None]) * D + rd[None, :]
        tl.store(out, S.to(states_ptr.dtype.element_ty), mask=tile)
        x = tl.load(
            x_ptr + b * sx_b + h * sx_h + t[:, None] * sx_t + rn[None, :] * sx_n,
            mask=live[:, None] & mn[None, :],
            other=0.0,
        )
        y = tl.load(
            y_ptr + b * sy_b + h * sy_h + t[:, None] * sy_t + rd[None, :] * sy_d,
            mask=live[:, None] & md[None, :],
            other=0.0,
        )
        if HAS_U:
            if REVERSE:
                w = tl.exp(log_u * rc.to(ACC))  # u^i: token i of the chunk reads u^i S_before
            else:
                w = tl.exp(log_u * (length - rc).to(ACC))  # u^(len - j): token j's write, damped to the chunk end
            y = (y.to(ACC) * w[:, None]).to(y.dtype)  # the weight on the D-wide operand, not the N-wide one
            S = S * tl.exp(log_u * length.to(ACC))
        S += _mm(tl.trans(x), y, ACC, PRECISION, WIDEN)
    tl.store(final_ptr + (bh * N + rn[:, None]) * D + rd[None, :], S, mask=tile)


@triton.jit
def read_kernel(
    x_ptr,
    y_ptr,
    z_ptr,
    states_ptr,
    out_ptr,
    log_u_ptr,
    sx_b,
    sx_h,
    sx_t,
    sx_n,
    sy_b,
    sy_h,
    sy_t,
    sy_n,
    sz_b,
    sz_h,
    sz_t,
    sz_d,
    so_b,
    so_h,
    so_t,
    so_d,
    H,
    T,
    N,
    D,
    C,
    NC,
    BACKWARD: tl.constexpr,
    HAS_U: tl.constexpr,
    BC: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """One chunk's rows, one BD-wide block of D: out = w * (x @ states[c]) + (M * x y^T) @ z, summed over N in
    BN-wide steps (the chunk's scores x y^T and the state read share the loads of x).

    Forward (x = q, y = k, z = v, states = S before the chunk): the output a, w = u^i, M[i, j] = u^(i-j), i > j.
    Backward (x = k, y = q, z = dO, states = dS after the chunk): dv, w = u^(len - j), M[j, i] = u^(i-j), i > j.
    """
    c, pd, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    b, h = bh // H, bh % H
    rd = pd * BD + tl.arange(0, BD)
    rc = tl.arange(0, BC)
    md = rd < D
    t0 = c * C
    length = tl.minimum(C, T - t0)
    live = rc < length
    t = (t0 + rc).to(tl.int64)
    acc = tl.zeros((BC, BD), dtype=ACC)
    scores = tl.zeros((BC, BC), dtype=ACC)
    for n0 in range(0, N, BN):
        rn = n0 + tl.arange(0, BN)
        mn = rn < N
        rows = live[:, None] & mn[None, :]
        x = tl.load(x_ptr + b * sx_b + h * sx_h + t[:, None] * sx_t + rn[None, :] * sx_n, mask=rows, other=0.0)
        y = tl.load(y_ptr + b * sy_b + h * sy_h + t[:, None] * sy_t + rn[None, :] * sy_n, mask=rows, other=0.0)
        st = tl.load(
            states_ptr + ((bh * NC + c) * N + rn[:, None]) * D + rd[None, :],
            mask=mn[:, None] & md[None, :],
            other=0.0,
        )
        acc += _mm(x, st, ACC, PRECISION, WIDEN)
        scores += _mm(x, tl.trans(y), ACC, PRECISION, WIDEN)
    log_u = 0.0
    if HAS_U:
        log_u = tl.load(log_u_ptr + h).to(ACC)
        if BACKWARD:
            acc = acc * tl.exp(log_u * (length - rc).to(ACC))[:, None]
        else:
            acc = acc * tl.exp(log_u * rc.to(ACC))[:, None]
    if BACKWARD:
        scores = scores * tl.trans(_decay_mask(log_u, rc, rc, HAS_U, ACC))  # [j, i]: u^(i - j) where i > j
    else:
        scores = scores * _decay_mask(log_u, rc, rc, HAS_U, ACC)
    z = tl.load(
        z_ptr + b * sz_b + h * sz_h + t[:, None] * sz_t + rd[None, :] * sz_d,
        mask=live[:, None] & md[None, :],
        other=0.0,
    )
    acc += _mm(scores.to(z.dtype), z, ACC, PRECISION, WIDEN)
    ptr = out_ptr + b * so_b + h * so_h + t[:, None] * so_t + rd[None, :] * so_d
    tl.store(ptr, acc.to(out_ptr.dtype.element_ty), mask=live[:, None] & md[None, :])


@triton.jit
def grad_keys_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    do_ptr,
    states_ptr,
    dstates_ptr,
    dq_ptr,
    dk_ptr,
    log_u_ptr,
    sq_b,
    sq_h,
    sq_t,
    sq_n,
    sk_b,
    sk_h,
    sk_t,
    sk_n,
    sv_b,
    sv_h,
    sv_t,
    sv_d,
    sg_b,
    sg_h,
    sg_t,
    sg_d,
    H,
    T,
    N,
    D,
    C,
    NC,
    SHARED: tl.constexpr,
    HAS_U: tl.constexpr,
    BC: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """dq and dk of one chunk's rows and one BN-wide block of N, summed over D in BD-wide steps:

    dq = u^i (dO S_before^T) + P k,    dk = u^(len - j) (v dS_after^T) + P^T q,    P = M * (dO v^T).
    With shared keys (k is q) the two are summed into ``dq``.
    """
    c, pn, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    b, h = bh // H, bh % H
    rn = pn * BN + tl.arange(0, BN)
    rc = tl.arange(0, BC)
    mn = rn < N
    t0 = c * C
    length = tl.minimum(C, T - t0)
    live = rc < length
    t = (t0 + rc).to(tl.int64)
    read_q = tl.zeros((BC, BN), dtype=ACC)
    read_k = tl.zeros((BC, BN), dtype=ACC)
    P = tl.zeros((BC, BC), dtype=ACC)
    for d0 in range(0, D, BD):
        rd = d0 + tl.arange(0, BD)
        md = rd < D
        rows = live[:, None] & md[None, :]
        g = tl.load(do_ptr + b * sg_b + h * sg_h + t[:, None] * sg_t + rd[None, :] * sg_d, mask=rows, other=0.0)
        v = tl.load(v_ptr + b * sv_b + h * sv_h + t[:, None] * sv_t + rd[None, :] * sv_d, mask=rows, other=0.0)
        at = ((bh * NC + c) * N + rn[:, None]) * D + rd[None, :]
        tile = mn[:, None] & md[None, :]
        before = tl.load(states_ptr + at, mask=tile, other=0.0)
        after = tl.load(dstates_ptr + at, mask=tile, other=0.0)
        read_q += _mm(g, tl.trans(before), ACC, PRECISION, WIDEN)
        read_k += _mm(v, tl.trans(after), ACC, PRECISION, WIDEN)
        P += _mm(g, tl.trans(v), ACC, PRECISION, WIDEN)
    log_u = 0.0
    if HAS_U:
        log_u = tl.load(log_u_ptr + h).to(ACC)
        read_q = read_q * tl.exp(log_u * rc.to(ACC))[:, None]
        read_k = read_k * tl.exp(log_u * (length - rc).to(ACC))[:, None]
    P = P * _decay_mask(log_u, rc, rc, HAS_U, ACC)
    rows = live[:, None] & mn[None, :]
    q = tl.load(q_ptr + b * sq_b + h * sq_h + t[:, None] * sq_t + rn[None, :] * sq_n, mask=rows, other=0.0)
    if SHARED:
        k = q
    else:
        k = tl.load(k_ptr + b * sk_b + h * sk_h + t[:, None] * sk_t + rn[None, :] * sk_n, mask=rows, other=0.0)
    P_low = P.to(q.dtype)
    dq = read_q + _mm(P_low, k, ACC, PRECISION, WIDEN)
    dk = read_k + _mm(tl.trans(P_low), q, ACC, PRECISION, WIDEN)
    if SHARED:
        dq += dk
    else:
        ptr = dk_ptr + b * sk_b + h * sk_h + t[:, None] * sk_t + rn[None, :] * sk_n
        tl.store(ptr, dk.to(dk_ptr.dtype.element_ty), mask=rows)
    ptr = dq_ptr + b * sq_b + h * sq_h + t[:, None] * sq_t + rn[None, :] * sq_n
    tl.store(ptr, dq.to(dq_ptr.dtype.element_ty), mask=rows)
