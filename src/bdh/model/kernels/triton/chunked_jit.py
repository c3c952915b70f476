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
def _chunk_update(
    S,
    x_ptr,
    y_ptr,
    b,
    h,
    sx_b,
    sx_h,
    sx_t,
    sx_n,
    sy_b,
    sy_h,
    sy_t,
    sy_d,
    rn,
    rd,
    c,
    C,
    T,
    N,
    D,
    log_u,
    REVERSE: tl.constexpr,
    HAS_U: tl.constexpr,
    BC: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """The tile [rn, rd] of the scan's state carried over chunk c (`_scan_chunk`), x and y read from memory."""
    rc = tl.arange(0, BC)
    length, live, t = _chunk(c, C, T, rc)
    x = tl.load(_tile(x_ptr, b, h, t, rn, sx_b, sx_h, sx_t, sx_n), mask=live[:, None] & (rn < N)[None, :], other=0.0)
    y = tl.load(_tile(y_ptr, b, h, t, rd, sy_b, sy_h, sy_t, sy_d), mask=live[:, None] & (rd < D)[None, :], other=0.0)
    return _scan_chunk(S, x, y, log_u, rc, length, REVERSE, HAS_U, ACC, PRECISION, WIDEN)


@triton.jit
def _kept(c, NC, REVERSE: tl.constexpr, STRIDE: tl.constexpr):
    """(the scan's step i at chunk c, the step of the last state kept at or before it, that state's slot): the scan
    keeps the state of every STRIDE-th step (i = c forward, NC - 1 - c in reverse)."""
    i = c
    if REVERSE:
        i = NC - 1 - c
    return i, i - i % STRIDE, i // STRIDE


@triton.jit
def _keep_state(states_ptr, S, bh, i, c, NC, N, D, rn, rd, tile, STRIDE: tl.constexpr):
    """The scan's state S before step i (chunk c) into its slot of ``states``: every step's (STRIDE = 1, slot c), or
    every STRIDE-th step's only (slot i // STRIDE, `_kept`)."""
    if STRIDE == 1:
        tl.store(
            states_ptr + _state_rows(bh * NC + c, N, rn) * D + rd[None, :], S.to(states_ptr.dtype.element_ty), mask=tile
        )
    else:
        out = states_ptr + _state_rows(bh * ((NC + STRIDE - 1) // STRIDE) + i // STRIDE, N, rn) * D + rd[None, :]
        tl.store(out, S.to(states_ptr.dtype.element_ty), mask=tile & (i % STRIDE == 0))


@triton.jit
def _state_tile(
    states_ptr,
    bh,
    c,
    NC,
    rn,
    rd,
    x_ptr,
    y_ptr,
    b,
    h,
    sx_b,
    sx_h,
    sx_t,
    sx_n,
    sy_b,
    sy_h,
    sy_t,
    sy_d,
    log_u,
    C,
    T,
    N,
    D,
    REVERSE: tl.constexpr,
    STRIDE: tl.constexpr,
    HAS_U: tl.constexpr,
    BC: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """The tile [rn, rd] of the scan's state at chunk c (S before it forward, dS after it in reverse) in the states'
    dtype: read (STRIDE = 1), or rebuilt from the last one kept with the chunks between (x, y: the scan's inputs)."""
    tile = (rn < N)[:, None] & (rd < D)[None, :]
    if STRIDE == 1:
        return tl.load(states_ptr + _state_rows(bh * NC + c, N, rn) * D + rd[None, :], mask=tile, other=0.0)
    i, i0, slot = _kept(c, NC, REVERSE, STRIDE)
    at = states_ptr + _state_rows(bh * ((NC + STRIDE - 1) // STRIDE) + slot, N, rn) * D + rd[None, :]
    S = tl.load(at, mask=tile, other=0.0).to(ACC)
    for j in range(i0, i):
        cj = j
        if REVERSE:
            cj = NC - 1 - j
        S = _chunk_update(
            S, x_ptr, y_ptr, b, h, sx_b, sx_h, sx_t, sx_n, sy_b, sy_h, sy_t, sy_d, rn, rd, cj, C, T, N, D, log_u,
            REVERSE, HAS_U, BC, ACC, PRECISION, WIDEN
        )  # fmt: skip
    return S.to(states_ptr.dtype.element_ty)


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
    STRIDE: tl.constexpr,
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
    STRIDE > 1: only every STRIDE-th step's state is written (`_kept`; the readers rebuild the others).
    ``final`` gets the state after the last chunk (forward) or before the first (reverse), in ACC.
    """
    pn, pd, bh, b, h = _program(H)
    rn = pn * BN + tl.arange(0, BN)
    rd = pd * BD + tl.arange(0, BD)
    mn, md = rn < N, rd < D
    tile = mn[:, None] & md[None, :]
    S = _initial_state(init_ptr, b, h, si_b, si_h, si_n, si_d, rn, rd, tile, HAS_INIT, BN, BD, ACC)
    log_u = _log_u(log_u_ptr, h, HAS_U, ACC)
    for i in range(NC):
        c = i
        if REVERSE:
            c = NC - 1 - i
        _keep_state(states_ptr, S, bh, i, c, NC, N, D, rn, rd, tile, STRIDE)
        S = _chunk_update(
            S, x_ptr, y_ptr, b, h, sx_b, sx_h, sx_t, sx_n, sy_b, sy_h, sy_t, sy_d, rn, rd, c, C, T, N, D, log_u,
            REVERSE, HAS_U, BC, ACC, PRECISION, WIDEN
        )  # fmt: skip
    tl.store(final_ptr + _state_rows(bh, N, rn) * D + rd[None, :], S, mask=tile)


@triton.jit
def _read_sums(
    x_rows,
    y_rows,
    sx_n,
    sy_n,
    states_ptr,
    bh,
    c,
    NC,
    rd,
    md,
    live,
    y_ptr,
    z_ptr,
    b,
    h,
    sy_b,
    sy_h,
    sy_t,
    sz_b,
    sz_h,
    sz_t,
    sz_d,
    log_u,
    C,
    T,
    N,
    D,
    BACKWARD: tl.constexpr,
    STRIDE: tl.constexpr,
    HAS_U: tl.constexpr,
    BC: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """x @ states[c] (the state read) and the chunk's scores x y^T, in ACC, summed over N in BN-wide steps (the
    two share the loads of x); with STRIDE > 1 the state tile is rebuilt from the scan's inputs y, z (`_state_tile`)."""
    acc = tl.zeros((BC, BD), dtype=ACC)
    scores = tl.zeros((BC, BC), dtype=ACC)
    for n0 in range(0, N, BN):
        rn = n0 + tl.arange(0, BN)
        mn = rn < N
        rows = live[:, None] & mn[None, :]
        x = tl.load(x_rows + rn[None, :] * sx_n, mask=rows, other=0.0)
        y = tl.load(y_rows + rn[None, :] * sy_n, mask=rows, other=0.0)
        st = _state_tile(
            states_ptr, bh, c, NC, rn, rd, y_ptr, z_ptr, b, h, sy_b, sy_h, sy_t, sy_n, sz_b, sz_h, sz_t, sz_d, log_u,
            C, T, N, D, BACKWARD, STRIDE, HAS_U, BC, ACC, PRECISION, WIDEN
        )  # fmt: skip
        acc += _mm(x, st, ACC, PRECISION, WIDEN)
        scores += _mm(x, tl.trans(y), ACC, PRECISION, WIDEN)
    return acc, scores


@triton.jit
def _read_damp(acc, scores, log_u, rc, length, BACKWARD: tl.constexpr, HAS_U: tl.constexpr, ACC: tl.constexpr):
    """The read times w and the scores times the mask M: forward w = u^i, M[i, j] = u^(i-j), i > j; backward
    w = u^(len - j), M[j, i] = u^(i-j), i > j."""
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
    STRIDE: tl.constexpr,
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
    log_u = _log_u(log_u_ptr, h, HAS_U, ACC)
    acc, scores = _read_sums(
        x_rows, y_rows, sx_n, sy_n, states_ptr, bh, c, NC, rd, md, live, y_ptr, z_ptr, b, h, sy_b, sy_h, sy_t,
        sz_b, sz_h, sz_t, sz_d, log_u, C, T, N, D, BACKWARD, STRIDE, HAS_U, BC, BN, BD, ACC, PRECISION, WIDEN
    )  # fmt: skip
    acc, scores = _read_damp(acc, scores, log_u, rc, length, BACKWARD, HAS_U, ACC)
    z = tl.load(_tile(z_ptr, b, h, t, rd, sz_b, sz_h, sz_t, sz_d), mask=live[:, None] & md[None, :], other=0.0)
    acc += _mm(scores.to(z.dtype), z, ACC, PRECISION, WIDEN)
    _store_tile(out_ptr, b, h, t, rd, so_b, so_h, so_t, so_d, acc, live[:, None] & md[None, :], False)


@triton.jit
def _grad_keys_sums(
    q_ptr, k_ptr, v_ptr, do_ptr, states_ptr, dstates_ptr, bh, b, h, c, NC, rn, live, log_u, C, T, N, D,
    sq_b, sq_h, sq_t, sq_n, sk_b, sk_h, sk_t, sk_n, sv_b, sv_h, sv_t, sv_d, sg_b, sg_h, sg_t, sg_d,
    STRIDE: tl.constexpr, HAS_U: tl.constexpr, BC: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """dO S_before^T, v dS_after^T and dO v^T of chunk c's rows and one BN-wide block ``rn`` of N, in ACC, summed
    over D in BD-wide steps; the state tiles read or rebuilt (`_state_tile`: S from k, v; dS from q, dO)."""
    t = (c * C + tl.arange(0, BC)).to(tl.int64)
    g_rows, v_rows = _rows(do_ptr, b, h, t, sg_b, sg_h, sg_t), _rows(v_ptr, b, h, t, sv_b, sv_h, sv_t)
    read_q = tl.zeros((BC, BN), dtype=ACC)
    read_k = tl.zeros((BC, BN), dtype=ACC)
    P = tl.zeros((BC, BC), dtype=ACC)
    for d0 in range(0, D, BD):
        rd = d0 + tl.arange(0, BD)
        rows = live[:, None] & (rd < D)[None, :]
        g = tl.load(g_rows + rd[None, :] * sg_d, mask=rows, other=0.0)
        v = tl.load(v_rows + rd[None, :] * sv_d, mask=rows, other=0.0)
        before = _state_tile(
            states_ptr, bh, c, NC, rn, rd, k_ptr, v_ptr, b, h, sk_b, sk_h, sk_t, sk_n, sv_b, sv_h, sv_t, sv_d,
            log_u, C, T, N, D, False, STRIDE, HAS_U, BC, ACC, PRECISION, WIDEN
        )  # fmt: skip
        after = _state_tile(
            dstates_ptr, bh, c, NC, rn, rd, q_ptr, do_ptr, b, h, sq_b, sq_h, sq_t, sq_n, sg_b, sg_h, sg_t, sg_d,
            log_u, C, T, N, D, True, STRIDE, HAS_U, BC, ACC, PRECISION, WIDEN
        )  # fmt: skip
        read_q += _mm(g, tl.trans(before), ACC, PRECISION, WIDEN)
        read_k += _mm(v, tl.trans(after), ACC, PRECISION, WIDEN)
        P += _mm(g, tl.trans(v), ACC, PRECISION, WIDEN)
    return read_q, read_k, P


@triton.jit
def _grad_keys_damp(read_q, read_k, P, log_u, rc, length, HAS_U: tl.constexpr, ACC: tl.constexpr):
    """u^i (dO S_before^T), u^(len - j) (v dS_after^T) and P = M * (dO v^T)."""
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
    STRIDE: tl.constexpr,
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
    length, live, t = _chunk(c, C, T, rc)
    log_u = _log_u(log_u_ptr, h, HAS_U, ACC)
    read_q, read_k, P = _grad_keys_sums(
        q_ptr, k_ptr, v_ptr, do_ptr, states_ptr, dstates_ptr, bh, b, h, c, NC, rn, live, log_u, C, T, N, D,
        sq_b, sq_h, sq_t, sq_n, sk_b, sk_h, sk_t, sk_n, sv_b, sv_h, sv_t, sv_d, sg_b, sg_h, sg_t, sg_d,
        STRIDE, HAS_U, BC, BN, BD, ACC, PRECISION, WIDEN
    )  # fmt: skip
    read_q, read_k, P = _grad_keys_damp(read_q, read_k, P, log_u, rc, length, HAS_U, ACC)
    q_at, k_at = _tile(q_ptr, b, h, t, rn, sq_b, sq_h, sq_t, sq_n), _tile(k_ptr, b, h, t, rn, sk_b, sk_h, sk_t, sk_n)
    dq, dk, rows = _grad_keys_values(read_q, read_k, P, q_at, k_at, live, rn < N, SHARED, ACC, PRECISION, WIDEN)
    _store_tile(dk_ptr, b, h, t, rn, sk_b, sk_h, sk_t, sk_n, dk, rows, SHARED)  # with shared keys, dk is in dq
    _store_tile(dq_ptr, b, h, t, rn, sq_b, sq_h, sq_t, sq_n, dq, rows, False)
