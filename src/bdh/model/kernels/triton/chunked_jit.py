"""The Triton kernels of `bdh.model.kernels.triton.chunked` (imported only when they run: Triton is optional).

Three kernels, each used twice (forward and backward); the tiling and the equations are in the docstring of
`bdh.model.kernels.triton.chunked`. Every pointer offset is built in 64-bit integers: at paper size the
chunk-state buffer alone has more than 2^31 entries. The kernels are written as `triton.jit` helpers, which
Triton inlines into each kernel's one GPU program: the tiles stay in registers across the helpers.
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
def _damping(log_u, rc, length, WRITE: tl.constexpr, ACC: tl.constexpr):
    """Per row of a chunk: u^(len - j) (WRITE: token j's write, damped to the chunk's end), else u^i (token i of
    the chunk reads u^i S_before)."""
    if WRITE:
        return tl.exp(log_u * (length - rc).to(ACC))
    return tl.exp(log_u * rc.to(ACC))


@triton.jit
def _log_u(log_u_ptr, h, HAS_U: tl.constexpr, ACC: tl.constexpr):
    """log u of head h in ACC; 0 without damping (then never used)."""
    log_u = 0.0
    if HAS_U:
        log_u = tl.load(log_u_ptr + h).to(ACC)
    return log_u


@triton.jit
def _program(H):
    """This program's ids on grid axes 0 and 1, its (batch x head) id on axis 2 in 64 bits, its batch and head."""
    p0, p1, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    return p0, p1, bh, bh // H, bh % H


@triton.jit
def _chunk(c, C, T, rc):
    """Chunk c's length (the last chunk may be shorter), which of its local rows rc are in it, and their tokens."""
    t0 = c * C
    length = tl.minimum(C, T - t0)
    live = rc < length
    t = (t0 + rc).to(tl.int64)
    return length, live, t


@triton.jit
def _rows(ptr, b, h, t, s_b, s_h, s_t):
    """Pointers (a column) to the rows t of head (b, h) of a (B, H, rows, columns) tensor with strides s_*."""
    return ptr + b * s_b + h * s_h + t[:, None] * s_t


@triton.jit
def _tile(ptr, b, h, t, cols, s_b, s_h, s_t, s_c):
    """Pointers to the tile [rows t, columns ``cols``] of head (b, h) of a (B, H, rows, columns) tensor."""
    return _rows(ptr, b, h, t, s_b, s_h, s_t) + cols[None, :] * s_c


@triton.jit
def _store_tile(ptr, b, h, t, cols, s_b, s_h, s_t, s_c, value, mask, SKIP: tl.constexpr):
    """``value`` in ptr's dtype into the tile [rows t, columns ``cols``] of head (b, h); nothing when SKIP."""
    if not SKIP:
        tl.store(_tile(ptr, b, h, t, cols, s_b, s_h, s_t, s_c), value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _state_rows(row, N, rn):
    """Offsets (a column) of the rows rn of N x D state number ``row`` of a contiguous buffer, to be times D."""
    return row * N + rn[:, None]


@triton.jit
def _initial_state(
    init_ptr,
    b,
    h,
    si_b,
    si_h,
    si_n,
    si_d,
    rn,
    rd,
    tile,
    HAS_INIT: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
):
    """The tile [rn, rd] of the state carried in (head (b, h) of ``init``), in ACC; zeros without one."""
    if HAS_INIT:
        return tl.load(_tile(init_ptr, b, h, rn, rd, si_b, si_h, si_n, si_d), mask=tile, other=0.0).to(ACC)
    return tl.zeros((BN, BD), dtype=ACC)


@triton.jit
def _scan_chunk(
    S,
    x,
    y,
    log_u,
    rc,
    length,
    REVERSE: tl.constexpr,
    HAS_U: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """One chunk of the scan: S <- u^len S + x^T (w y), w = u^(len - j) forward, u^i in reverse."""
    if HAS_U:
        w = _damping(log_u, rc, length, not REVERSE, ACC)
        y = (y.to(ACC) * w[:, None]).to(y.dtype)  # the weight on the D-wide operand, not the N-wide one
        S = S * tl.exp(log_u * length.to(ACC))
    S += _mm(tl.trans(x), y, ACC, PRECISION, WIDEN)
    return S


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
    pn, pd, bh, b, h = _program(H)
    rn = pn * BN + tl.arange(0, BN)
    rd = pd * BD + tl.arange(0, BD)
    rc = tl.arange(0, BC)
    mn, md = rn < N, rd < D
    tile = mn[:, None] & md[None, :]
    S = _initial_state(init_ptr, b, h, si_b, si_h, si_n, si_d, rn, rd, tile, HAS_INIT, BN, BD, ACC)
    log_u = _log_u(log_u_ptr, h, HAS_U, ACC)
    for i in range(NC):
        c = i
        if REVERSE:
            c = NC - 1 - i
        length, live, t = _chunk(c, C, T, rc)
        out = states_ptr + _state_rows(bh * NC + c, N, rn) * D + rd[None, :]
        tl.store(out, S.to(states_ptr.dtype.element_ty), mask=tile)
        x = tl.load(_tile(x_ptr, b, h, t, rn, sx_b, sx_h, sx_t, sx_n), mask=live[:, None] & mn[None, :], other=0.0)
        y = tl.load(_tile(y_ptr, b, h, t, rd, sy_b, sy_h, sy_t, sy_d), mask=live[:, None] & md[None, :], other=0.0)
        S = _scan_chunk(S, x, y, log_u, rc, length, REVERSE, HAS_U, ACC, PRECISION, WIDEN)
    tl.store(final_ptr + _state_rows(bh, N, rn) * D + rd[None, :], S, mask=tile)


@triton.jit
def _read_sums(
    x_rows,
    y_rows,
    sx_n,
    sy_n,
    states_ptr,
    row,
    rd,
    md,
    live,
    N,
    D,
    BC: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """x @ states[row] (the state read) and the chunk's scores x y^T, in ACC, summed over N in BN-wide steps (the
    two share the loads of x)."""
    acc = tl.zeros((BC, BD), dtype=ACC)
    scores = tl.zeros((BC, BC), dtype=ACC)
    for n0 in range(0, N, BN):
        rn = n0 + tl.arange(0, BN)
        mn = rn < N
        rows = live[:, None] & mn[None, :]
        x = tl.load(x_rows + rn[None, :] * sx_n, mask=rows, other=0.0)
        y = tl.load(y_rows + rn[None, :] * sy_n, mask=rows, other=0.0)
        st = tl.load(
            states_ptr + _state_rows(row, N, rn) * D + rd[None, :],
            mask=mn[:, None] & md[None, :],
            other=0.0,
        )
        acc += _mm(x, st, ACC, PRECISION, WIDEN)
        scores += _mm(x, tl.trans(y), ACC, PRECISION, WIDEN)
    return acc, scores


@triton.jit
def _read_damp(acc, scores, log_u_ptr, h, rc, length, BACKWARD: tl.constexpr, HAS_U: tl.constexpr, ACC: tl.constexpr):
    """The read times w and the scores times the mask M: forward w = u^i, M[i, j] = u^(i-j), i > j; backward
    w = u^(len - j), M[j, i] = u^(i-j), i > j."""
    log_u = _log_u(log_u_ptr, h, HAS_U, ACC)
    if HAS_U:
        acc = acc * _damping(log_u, rc, length, BACKWARD, ACC)[:, None]
    if BACKWARD:
        scores = scores * tl.trans(_decay_mask(log_u, rc, rc, HAS_U, ACC))  # [j, i]: u^(i - j) where i > j
    else:
        scores = scores * _decay_mask(log_u, rc, rc, HAS_U, ACC)
    return acc, scores


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
    c, pd, bh, b, h = _program(H)
    rd = pd * BD + tl.arange(0, BD)
    rc = tl.arange(0, BC)
    md = rd < D
    length, live, t = _chunk(c, C, T, rc)
    x_rows, y_rows = _rows(x_ptr, b, h, t, sx_b, sx_h, sx_t), _rows(y_ptr, b, h, t, sy_b, sy_h, sy_t)
    acc, scores = _read_sums(
        x_rows, y_rows, sx_n, sy_n, states_ptr, bh * NC + c, rd, md, live, N, D, BC, BN, BD, ACC, PRECISION, WIDEN
    )
    acc, scores = _read_damp(acc, scores, log_u_ptr, h, rc, length, BACKWARD, HAS_U, ACC)
    z = tl.load(_tile(z_ptr, b, h, t, rd, sz_b, sz_h, sz_t, sz_d), mask=live[:, None] & md[None, :], other=0.0)
    acc += _mm(scores.to(z.dtype), z, ACC, PRECISION, WIDEN)
    _store_tile(out_ptr, b, h, t, rd, so_b, so_h, so_t, so_d, acc, live[:, None] & md[None, :], False)


@triton.jit
def _grad_keys_sums(
    g_rows,
    v_rows,
    sg_d,
    sv_d,
    states_ptr,
    dstates_ptr,
    srows,
    mn,
    live,
    D,
    BC: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """dO S_before^T, v dS_after^T and dO v^T of one BN-wide block of N (the state rows ``srows``), in ACC, summed
    over D in BD-wide steps."""
    read_q = tl.zeros((BC, BN), dtype=ACC)
    read_k = tl.zeros((BC, BN), dtype=ACC)
    P = tl.zeros((BC, BC), dtype=ACC)
    for d0 in range(0, D, BD):
        rd = d0 + tl.arange(0, BD)
        md = rd < D
        rows = live[:, None] & md[None, :]
        g = tl.load(g_rows + rd[None, :] * sg_d, mask=rows, other=0.0)
        v = tl.load(v_rows + rd[None, :] * sv_d, mask=rows, other=0.0)
        at = srows * D + rd[None, :]
        tile = mn[:, None] & md[None, :]
        before = tl.load(states_ptr + at, mask=tile, other=0.0)
        after = tl.load(dstates_ptr + at, mask=tile, other=0.0)
        read_q += _mm(g, tl.trans(before), ACC, PRECISION, WIDEN)
        read_k += _mm(v, tl.trans(after), ACC, PRECISION, WIDEN)
        P += _mm(g, tl.trans(v), ACC, PRECISION, WIDEN)
    return read_q, read_k, P


@triton.jit
def _grad_keys_damp(read_q, read_k, P, log_u_ptr, h, rc, length, HAS_U: tl.constexpr, ACC: tl.constexpr):
    """u^i (dO S_before^T), u^(len - j) (v dS_after^T) and P = M * (dO v^T)."""
    log_u = _log_u(log_u_ptr, h, HAS_U, ACC)
    if HAS_U:
        read_q = read_q * _damping(log_u, rc, length, False, ACC)[:, None]
        read_k = read_k * _damping(log_u, rc, length, True, ACC)[:, None]
    return read_q, read_k, P * _decay_mask(log_u, rc, rc, HAS_U, ACC)


@triton.jit
def _grad_keys_values(
    read_q,
    read_k,
    P,
    q_at,
    k_at,
    live,
    mn,
    SHARED: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """(dq, dk, the tile's mask): dq = read_q + P k and dk = read_k + P^T q, q and k read at ``q_at`` and ``k_at``;
    with shared keys k is q, and dq holds dq + dk."""
    rows = live[:, None] & mn[None, :]
    q = tl.load(q_at, mask=rows, other=0.0)
    if SHARED:
        k = q
    else:
        k = tl.load(k_at, mask=rows, other=0.0)
    P_low = P.to(q.dtype)
    dq = read_q + _mm(P_low, k, ACC, PRECISION, WIDEN)
    dk = read_k + _mm(tl.trans(P_low), q, ACC, PRECISION, WIDEN)
    if SHARED:
        dq += dk
    return dq, dk, rows


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
    """dq and dk of one chunk's rows and one BN-wide block of N, summed over D in BD-wide steps (with shared keys,
    k is q, the two summed into ``dq``):
    dq = u^i (dO S_before^T) + P k,    dk = u^(len - j) (v dS_after^T) + P^T q,    P = M * (dO v^T)."""
    c, pn, bh, b, h = _program(H)
    rn = pn * BN + tl.arange(0, BN)
    rc = tl.arange(0, BC)
    mn = rn < N
    length, live, t = _chunk(c, C, T, rc)
    g_rows, v_rows = _rows(do_ptr, b, h, t, sg_b, sg_h, sg_t), _rows(v_ptr, b, h, t, sv_b, sv_h, sv_t)
    srows = _state_rows(bh * NC + c, N, rn)
    read_q, read_k, P = _grad_keys_sums(
        g_rows, v_rows, sg_d, sv_d, states_ptr, dstates_ptr, srows, mn, live, D, BC, BN, BD, ACC, PRECISION, WIDEN
    )
    read_q, read_k, P = _grad_keys_damp(read_q, read_k, P, log_u_ptr, h, rc, length, HAS_U, ACC)
    q_at, k_at = _tile(q_ptr, b, h, t, rn, sq_b, sq_h, sq_t, sq_n), _tile(k_ptr, b, h, t, rn, sk_b, sk_h, sk_t, sk_n)
    dq, dk, rows = _grad_keys_values(read_q, read_k, P, q_at, k_at, live, mn, SHARED, ACC, PRECISION, WIDEN)
    _store_tile(dk_ptr, b, h, t, rn, sk_b, sk_h, sk_t, sk_n, dk, rows, SHARED)  # with shared keys, dk is in dq
    _store_tile(dq_ptr, b, h, t, rn, sq_b, sq_h, sq_t, sq_n, dq, rows, False)
