"""The Triton kernels of `bdh.model.kernels.triton.delta` (imported only when they run: Triton is optional).

Four kernels; the equations are in the docstring of `bdh.model.kernels.triton.delta`. Tensors D wide are handed in
as (B H, NC C, D) (chunks padded to C rows), the chunk matrices as (B H, NC, C, C), the per-token vectors as
(B H, NC C), the states as (B H, slots, N, D) in ACC. Every pointer offset is built in 64-bit integers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .chunked_jit import _chunk, _mm


@triton.jit
def _rows_of(ptr, bh, t, rows_per_head, width):
    """Pointers (a column) to the rows t of head bh of a contiguous (B H, rows, width) tensor."""
    return ptr + (bh * rows_per_head + t[:, None]) * width


@triton.jit
def _square(ptr, bh, c, NC, C, rc):
    """The C x C matrix of chunk c of head bh (a (B H, NC, C, C) tensor), zero past C, in its dtype."""
    at = ptr + ((bh * NC + c) * C + rc[:, None]) * C + rc[None, :]
    return tl.load(at, mask=(rc[:, None] < C) & (rc[None, :] < C), other=0.0)


@triton.jit
def _per_token(ptr, bh, c, NC, C, rc):
    """The C values of chunk c of head bh of a (B H, NC C) tensor, zero past C."""
    return tl.load(ptr + (bh * NC + c) * C + rc, mask=rc < C, other=0.0)


@triton.jit
def _wide(ptr, bh, t, TP, D, rd):
    """Pointers to the tile [rows t, columns rd] of head bh of a contiguous (B H, TP, D) tensor."""
    return _rows_of(ptr, bh, t, TP, D) + rd[None, :]


@triton.jit
def gram_kernel(
    q_ptr, k_ptr, qk_ptr, kk_ptr,
    T, N, C, NC,
    BC: tl.constexpr, BN: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """Chunk c's q k^T and k k^T (C x C, in ACC), summed over N in BN-wide steps: one program per (chunk, head)."""
    c, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rc = tl.arange(0, BC)
    _, live, t = _chunk(c, C, T, rc)
    q_rows, k_rows = _rows_of(q_ptr, bh, t, T, N), _rows_of(k_ptr, bh, t, T, N)
    qk = tl.zeros((BC, BC), dtype=ACC)
    kk = tl.zeros((BC, BC), dtype=ACC)
    for n0 in range(0, N, BN):
        rn = n0 + tl.arange(0, BN)
        rows = live[:, None] & (rn < N)[None, :]
        q = tl.load(q_rows + rn[None, :], mask=rows, other=0.0)
        k = tl.load(k_rows + rn[None, :], mask=rows, other=0.0)
        qk += _mm(q, tl.trans(k), ACC, PRECISION, WIDEN)
        kk += _mm(k, tl.trans(k), ACC, PRECISION, WIDEN)
    at = ((bh * NC + c) * C + rc[:, None]) * C + rc[None, :]
    square = (rc[:, None] < C) & (rc[None, :] < C)
    tl.store(qk_ptr + at, qk, mask=square)
    tl.store(kk_ptr + at, kk, mask=square)


@triton.jit
def _sweep(
    src, dst, x1_rows, x2_rows, x_live, y1_rows, y2_rows, y_live, Z1, Z2, decay, rd, md, N, D,
    HAS_SRC: tl.constexpr, UPDATE: tl.constexpr, HAS_X2: tl.constexpr, HAS_Y2: tl.constexpr, BC: tl.constexpr,
    BN: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """One pass over the N rows of the BD columns ``rd`` of a state: S <- decay S + x1^T Z1 (+ x2^T Z2) (UPDATE),
    S read at ``src`` (zero without HAS_SRC) and stored at ``dst``, both N x D matrices; returns y1 S and y2 S of the
    stored S (C x BD, in ACC): the next chunk's reads, which share this pass's loads of S."""
    r1 = tl.zeros((BC, BD), dtype=ACC)
    r2 = tl.zeros((BC, BD), dtype=ACC)
    for n0 in range(0, N, BN):
        rn = n0 + tl.arange(0, BN)
        mn = rn < N
        at = rn[:, None].to(tl.int64) * D + rd[None, :]
        tile = mn[:, None] & md[None, :]
        if HAS_SRC:
            S = tl.load(src + at, mask=tile, other=0.0).to(ACC)
        else:
            S = tl.zeros((BN, BD), dtype=ACC)
        if UPDATE:
            xm = x_live[:, None] & mn[None, :]
            x1 = tl.load(x1_rows + rn[None, :], mask=xm, other=0.0)
            S = S * decay + _mm(tl.trans(x1), Z1.to(x1.dtype), ACC, PRECISION, WIDEN)
            if HAS_X2:
                x2 = tl.load(x2_rows + rn[None, :], mask=xm, other=0.0)
                S += _mm(tl.trans(x2), Z2.to(x2.dtype), ACC, PRECISION, WIDEN)
        tl.store(dst + at, S, mask=tile)
        ym = y_live[:, None] & mn[None, :]
        y1 = tl.load(y1_rows + rn[None, :], mask=ym, other=0.0)
        r1 += _mm(y1, S.to(y1.dtype), ACC, PRECISION, WIDEN)
        if HAS_Y2:
            y2 = tl.load(y2_rows + rn[None, :], mask=ym, other=0.0)
            r2 += _mm(y2, S.to(y2.dtype), ACC, PRECISION, WIDEN)
    return r1, r2


@triton.jit
def scan_kernel(
    q_ptr, k_ptr, v_ptr, init_ptr, p_ptr, tb_ptr, g_ptr, tail_ptr, ec_ptr, states_ptr, out_ptr, ks_ptr, qs_ptr,
    sv_b, sv_h, sv_t, sv_d, H, T, TP, N, D, C, NC, SLOTS,
    HAS_INIT: tl.constexpr, STORE_ALL: tl.constexpr, BC: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
    ACC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """The delta rule chunk by chunk for BD columns of the state (they do not mix): one program per (column block,
    head), the N x BD state streamed through ``states`` (slot c: S before chunk c with STORE_ALL, else two slots
    in turn). Per chunk: X = V - G (K S), W = Tb X, out = P W + G (Q S), S <- ec S + K^T (tail W); with STORE_ALL,
    K S and Q S are stored instead of the output, for the backward pass."""
    pd, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    rd = pd * BD + tl.arange(0, BD)
    rc = tl.arange(0, BC)
    md = rd < D
    head = states_ptr + bh * SLOTS * N * D
    _, live, t = _chunk(0, C, T, rc)
    k_rows = _rows_of(k_ptr, bh, t, T, N)
    zero = tl.zeros((BC, BD), dtype=ACC)
    ks, qs = _sweep(
        init_ptr + bh * N * D, head, k_rows, k_rows, live, k_rows, _rows_of(q_ptr, bh, t, T, N), live, zero, zero,
        1.0, rd, md, N, D, HAS_INIT, False, False, True, BC, BN, BD, ACC, PRECISION, WIDEN,
    )  # fmt: skip
    tl.debug_barrier()  # a thread may read next what another stored: the state is in global memory
    for c in range(NC):
        length, live, t = _chunk(c, C, T, rc)
        rows = live[:, None] & md[None, :]
        v_at = v_ptr + b * sv_b + h * sv_h + t[:, None] * sv_t + rd[None, :] * sv_d
        G = _per_token(g_ptr, bh, c, NC, C, rc)[:, None]
        if STORE_ALL:  # K S and Q S for the backward pass, which needs no output
            tl.store(_wide(ks_ptr, bh, t, TP, D, rd), ks, mask=rows)
            tl.store(_wide(qs_ptr, bh, t, TP, D, rd), qs, mask=rows)
        X = tl.load(v_at, mask=rows, other=0.0).to(ACC) - G * ks
        W = _mm(_square(tb_ptr, bh, c, NC, C, rc), X, ACC, PRECISION, WIDEN)
        if not STORE_ALL:
            out = _mm(_square(p_ptr, bh, c, NC, C, rc), W, ACC, PRECISION, WIDEN) + G * qs
            tl.store(_wide(out_ptr, bh, t, TP, D, rd), out.to(out_ptr.dtype.element_ty), mask=rows)
        Z = _per_token(tail_ptr, bh, c, NC, C, rc)[:, None] * W
        src, dst = c % 2, (c + 1) % 2
        if STORE_ALL:
            src, dst = c, c + 1
        _, nxt, t1 = _chunk(c + 1, C, T, rc)  # past the last chunk no row is live
        ks, qs = _sweep(
            head + src * N * D, head + dst * N * D, _rows_of(k_ptr, bh, t, T, N), k_rows, live,
            _rows_of(k_ptr, bh, t1, T, N), _rows_of(q_ptr, bh, t1, T, N), nxt, Z, Z, tl.load(ec_ptr + bh * NC + c),
            rd, md, N, D, True, True, False, True, BC, BN, BD, ACC, PRECISION, WIDEN,
        )  # fmt: skip
        tl.debug_barrier()


@triton.jit
def grad_scan_kernel(
    q_ptr, k_ptr, do_ptr, dfinal_ptr, y_ptr, tbt_ptr, g_ptr, tail_ptr, ec_ptr, dstates_ptr, kds_ptr, dx_ptr,
    T, TP, N, D, C, NC,
    HAS_FINAL: tl.constexpr, BC: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr,
    PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):  # fmt: skip
    """The state's gradient chunk by chunk from the last, for BD columns: dstates slot c + 1 = dS after chunk c
    (slot 0: before the first). Per chunk, with Y = P^T dO: dW = Y + tail (K dS), dX = Tb^T dW (stored, with K dS),
    dS <- ec dS + Q^T (G dO) - K^T (G dX)."""
    pd, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rd = pd * BD + tl.arange(0, BD)
    rc = tl.arange(0, BC)
    md = rd < D
    head = dstates_ptr + bh * (NC + 1) * N * D
    _, live, t = _chunk(NC - 1, C, T, rc)
    k_rows = _rows_of(k_ptr, bh, t, T, N)
    zero = tl.zeros((BC, BD), dtype=ACC)
    kds, _ = _sweep(
        dfinal_ptr + bh * N * D, head + NC * N * D, k_rows, k_rows, live, k_rows, k_rows, live, zero, zero,
        1.0, rd, md, N, D, HAS_FINAL, False, False, False, BC, BN, BD, ACC, PRECISION, WIDEN,
    )  # fmt: skip
    tl.debug_barrier()  # a thread may read next what another stored: the state is in global memory
    for i in range(NC):
        c = NC - 1 - i
        _, live, t = _chunk(c, C, T, rc)
        rows = live[:, None] & md[None, :]
        G = _per_token(g_ptr, bh, c, NC, C, rc)[:, None]
        dW = tl.load(_wide(y_ptr, bh, t, TP, D, rd), mask=rows, other=0.0)
        dW += _per_token(tail_ptr, bh, c, NC, C, rc)[:, None] * kds
        dX = _mm(_square(tbt_ptr, bh, c, NC, C, rc), dW, ACC, PRECISION, WIDEN)
        tl.store(_wide(kds_ptr, bh, t, TP, D, rd), kds, mask=rows)
        tl.store(_wide(dx_ptr, bh, t, TP, D, rd), dX, mask=rows)
        dQS = G * tl.load(_wide(do_ptr, bh, t, TP, D, rd), mask=rows, other=0.0)
        _, before, t0 = _chunk(c - 1, C, T, rc)
        before = before & (t0 >= 0)  # before the first chunk no row is live
        kds, _ = _sweep(
            head + (c + 1) * N * D, head + c * N * D, _rows_of(q_ptr, bh, t, T, N), _rows_of(k_ptr, bh, t, T, N),
            live, _rows_of(k_ptr, bh, t0, T, N), k_rows, before, dQS, -G * dX, tl.load(ec_ptr + bh * NC + c),
            rd, md, N, D, True, True, True, False, BC, BN, BD, ACC, PRECISION, WIDEN,
        )  # fmt: skip
        tl.debug_barrier()


@triton.jit
def grad_keys_kernel(
    q_ptr, k_ptr, fq_ptr, fk_ptr, a1_ptr, a2_ptr, a3_ptr, states_ptr, dstates_ptr, dq_ptr, dk_ptr, dec_ptr,
    T, TP, N, D, C, NC,
    BC: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
):  # fmt: skip
    """dQ and dK of chunk c for BN columns of N, summed over D in BD-wide steps, and <S, dS'> of the tile:
    dQ = Fq K + A1 S^T,  dK = Fq^T Q + Fk K + A2 S^T + A3 dS'^T  (S before the chunk, dS' the gradient after it)."""
    c, pn, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    rn = pn * BN + tl.arange(0, BN)
    rc = tl.arange(0, BC)
    mn = rn < N
    _, live, t = _chunk(c, C, T, rc)
    rows = live[:, None] & mn[None, :]
    q = tl.load(_rows_of(q_ptr, bh, t, T, N) + rn[None, :], mask=rows, other=0.0)
    k = tl.load(_rows_of(k_ptr, bh, t, T, N) + rn[None, :], mask=rows, other=0.0)
    Fq = _square(fq_ptr, bh, c, NC, C, rc).to(q.dtype)
    dq = _mm(Fq, k, ACC, PRECISION, WIDEN)
    dk = _mm(tl.trans(Fq), q, ACC, PRECISION, WIDEN)
    dk += _mm(_square(fk_ptr, bh, c, NC, C, rc).to(k.dtype), k, ACC, PRECISION, WIDEN)
    before = states_ptr + (bh * (NC + 1) + c) * N * D
    after = dstates_ptr + (bh * (NC + 1) + c + 1) * N * D
    dec = tl.zeros((BN, BD), dtype=ACC)
    for d0 in range(0, D, BD):
        rd = d0 + tl.arange(0, BD)
        md = rd < D
        wide = live[:, None] & md[None, :]
        at = rn[:, None].to(tl.int64) * D + rd[None, :]
        tile = mn[:, None] & md[None, :]
        S = tl.load(before + at, mask=tile, other=0.0)
        dS = tl.load(after + at, mask=tile, other=0.0)
        dec += S * dS
        S_low, dS_low = tl.trans(S.to(q.dtype)), tl.trans(dS.to(q.dtype))
        a1 = tl.load(_wide(a1_ptr, bh, t, TP, D, rd), mask=wide, other=0.0).to(q.dtype)
        a2 = tl.load(_wide(a2_ptr, bh, t, TP, D, rd), mask=wide, other=0.0).to(q.dtype)
        a3 = tl.load(_wide(a3_ptr, bh, t, TP, D, rd), mask=wide, other=0.0).to(q.dtype)
        dq += _mm(a1, S_low, ACC, PRECISION, WIDEN)
        dk += _mm(a2, S_low, ACC, PRECISION, WIDEN) + _mm(a3, dS_low, ACC, PRECISION, WIDEN)
    tl.store(_rows_of(dq_ptr, bh, t, T, N) + rn[None, :], dq.to(dq_ptr.dtype.element_ty), mask=rows)
    tl.store(_rows_of(dk_ptr, bh, t, T, N) + rn[None, :], dk.to(dk_ptr.dtype.element_ty), mask=rows)
    tl.store(dec_ptr + (bh * NC + c) * tl.num_programs(1) + pn, tl.sum(tl.sum(dec, axis=1), axis=0))
