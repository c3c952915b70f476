"""The delta rule (`bdh.model.state_rules`, ``state_write: delta``) in the chunkwise UT form: every chunk's
triangular solve at once, only the state carried chunk by chunk (DeltaNet's WY/UT transform, Yang et al. 2024).

In BDH's order (read before write, decay after it; `bdh.model.kernels.pytorch.state_rules`), inside a chunk with
the state S0 before it, e_i = sum_{j<i} l_j, c = sum_j l_j and A_ij = b_i e^{e_i - e_j} (k_i . k_j) for j < i:

    W = Tb (V - diag(e^e) K S0),   Tb = (I + A)^{-1} diag(b)
    a = diag(e^e) Q S0 + (Q K^T * M) W,   S_after = e^c S0 + K^T diag(e^{c - e}) W

Tb does not depend on S0, so one batched solve (C columns) serves every chunk, and the loop over chunks is five
products per chunk (K S0 and Q S0, like Q K^T and K K^T, stay two products: one over [K; Q] would copy the N-wide
keys). Where the keys are the unit queries (BDH's, ``query_keys``) they are never formed: K K^T and Q K^T come from
one Gram Q Q^T and K S0 from Q S0, scaled by one norm per token (`_gram`), four products per chunk.
A retention that is one per head (U's damping, no decay gate: the gate arrives broadcast over the batch) makes one
decay matrix M for every sequence. Equal to
`bdh.model.kernels.naive.naive_state_rule` in values and gradients (tests/model/test_delta_ut.py); the CPU's form
of the delta rule, for the ``parallel`` and ``chunked`` attention modes (`bdh.model.kernels.choice`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..naive import KEY_EPS


def ut_chunk(chunk_size: int, N: int, D: int) -> int:
    """The chunk of the delta rule's UT form in both modes: sqrt(N D / 8) rounded to a power of two, at least 16 and
    at most ``chunk_size``. The T x C work per token grows with C, the cost of carrying the N x D state from chunk
    to chunk falls with it: in training at T = 256 on the CPU, 32 was fastest at N = 128, D = 64 and 128 at N = 1,024,
    D = 128 (docs/performance.md)."""
    return min(chunk_size, max(16, 2 ** round(math.log2(math.sqrt(N * D / 8)))))


def _chunks(x: torch.Tensor, C: int) -> torch.Tensor:
    """(B, H, T, ...) -> (B, H, n, C, ...), the tail padded with zeros (a zero key with b = 0 writes nothing)."""
    T = x.shape[2]
    pad = -T % C
    if pad:
        x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
    return x.reshape(*x.shape[:2], (T + pad) // C, C, *x.shape[3:])


def _retention(log_g: torch.Tensor | None, B: int, H: int, T: int, C: int, device) -> torch.Tensor:
    """The log-retention per token in fp64, chunked (B or 1, H or 1, n, C): one row for the whole batch when the
    gates arrive broadcast over it (stride 0), zero without damping; the padded tail keeps the state (l = 0)."""
    if log_g is None:
        return torch.zeros(1, 1, -(-T // C), C, dtype=torch.float64, device=device)
    if log_g.stride(0) == 0:
        log_g = log_g[:1]
    return _chunks(log_g.double().unsqueeze(-1), C).squeeze(-1)


def _decay(lg: torch.Tensor, dtype: torch.dtype):
    """(M, head, tail, whole) of each chunk from its log-retentions ``lg`` (.., n, C) in fp64: M[i, j] =
    e^{e_i - e_j} for j < i (else 0), head = e^{e_i}, tail = e^{c - e_j}, whole = e^c, in ``dtype``."""
    C = lg.shape[-1]
    c = lg.cumsum(-1)
    e = c - lg
    on_or_above = torch.ones(C, C, dtype=torch.bool, device=lg.device).triu()
    # masked before exp: no overflow above the diagonal and no NaN in its gradient
    M = torch.exp((e.unsqueeze(-1) - e.unsqueeze(-2)).masked_fill(on_or_above, float("-inf"))).to(dtype)
    head, tail, whole = torch.exp(e).to(dtype), torch.exp(c[..., -1:] - e).to(dtype), torch.exp(c[..., -1]).to(dtype)
    return M, head, tail, whole


def one_block(T: int, N: int, D: int, C: int) -> bool:
    """Whether the whole sequence as one block (`_QueryKeyBlock`) costs less than chunks of C: per token and head its
    forward and backward take about 2 T N + 6 T D multiply-adds (the Gram and dQ, three T x T x D products and two
    solves, which run at about half the products' rate), the chunks' about 2 C N + 6 N D (the Gram, the state
    products K S, Q S, K^T W and their gradients); in training at T = 256 on the CPU the block was faster at N =
    1,024, D = 128 and slower at N = 128, D = 64 (docs/performance.md)."""
    return T * (N + 3 * D) <= C * N + 3 * N * D


def delta_ut(q, k, v, *, chunk_size, log_g=None, beta, state=None, need_state=False, query_keys=False, parallel=False):
    """The delta rule over chunks of `ut_chunk` tokens (at most ``chunk_size``). q, k (B, H, T, N), unit keys; v (B,
    1 or H, T, D); log_g (B, H, T) or None; beta (B, H, T); state (B, H, N, D) or None. ``query_keys``: the keys are
    the unit queries
    q / max(|q|, KEY_EPS) (BDH's, without ``separate_keys`` or shaped write keys) and ``k`` is not read (`_gram`).
    ``parallel`` (the ``parallel`` mode): with query keys and no state in or out, the sequence in one block where
    `one_block` says it is cheaper (`_QueryKeyBlock`). Returns (a (B, H, T, D), the state after or None). The
    products run in q's dtype, the solve in fp32 at least (no bf16 solver)."""
    B, H, T, N = q.shape
    C = min(ut_chunk(chunk_size, N, v.shape[-1]), T)
    block = parallel and query_keys and state is None and not need_state and one_block(T, N, v.shape[-1], C)
    C = T if block else C
    dt, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    M, head, tail, whole = _decay(_retention(log_g, B, H, T, C, q.device), dt)
    if block:
        return _QueryKeyBlock.apply(q, v, beta, M.squeeze(2)), None
    qc, b = _chunks(q, C), _chunks(beta.unsqueeze(-1), C).squeeze(-1)  # b: (B, H, n, C)
    if query_keys:
        kk, qk, r = _gram(qc)
        kc = None
    else:
        kc, r = _chunks(k, C), None
        kk, qk = kc @ kc.mT, qc @ kc.mT
    A = kk * M * b.unsqueeze(-1).to(dt)
    # Tb = (I + A)^{-1} diag(b): C columns, fewer than the N + D of solving for [V | K] (the Triton kernels' form)
    eye_b = torch.diag_embed(b.to(acc))
    Tb = torch.linalg.solve_triangular(A.to(acc), eye_b, upper=False, unitriangular=True).to(dt)
    out, S = _scan((qc, kc, qk * M, Tb, _chunks(v, C), r), (head, tail, whole), state, need_state)
    return out[:, :, :T], S


def _gram(qc: torch.Tensor):
    """(K K^T, Q K^T, r) of each chunk from one product G = Q Q^T, for the unit keys k_i = r_i q_i with r_i = 1 /
    max(|q_i|, KEY_EPS) = 1 / sqrt(max(G_ii, KEY_EPS^2)): K K^T = diag(r) G diag(r), Q K^T = G diag(r); r (.., n, C,
    1). The N-wide keys are never formed (and K S0 = diag(r) Q S0, K^T W = Q^T diag(r) W in `_scan`)."""
    G = _Gram.apply(qc)
    # clamped before the root: the same value as max(|q|, eps), and no infinite derivative at a silent token
    r = G.diagonal(dim1=-2, dim2=-1).clamp_min(KEY_EPS**2).rsqrt().unsqueeze(-1)
    qk = G * r.mT
    return qk * r, qk, r


def _scan(chunks, decay, S, need_state):
    """The chunks in order, the state S carried (None: zero): W = Tb (V - e^e K S), a = e^e Q S + P W, S = e^c S +
    K^T e^{c-e} W; the state after the last chunk only when it is wanted. Keys None: k = r q (`_gram`)."""
    head, tail, whole = decay
    n, outs = chunks[0].shape[2], []
    qs, ks, P, Tb, vs, rs = (None if x is None else x.unbind(2) for x in chunks)  # unbound once: a slice per chunk
    for i in range(n):  # would cost a zero-filled gradient of the whole tensor each
        hi, ti, wi = (x[:, :, min(i, x.shape[2] - 1)] for x in (head, tail, whole))  # one row when broadcast
        hi, ti = hi.unsqueeze(-1), ti.unsqueeze(-1)
        if S is None:
            W = Tb[i] @ vs[i]
            outs.append(P[i] @ W)
        else:
            Sd = S.to(P[i].dtype)
            QS = qs[i] @ Sd
            KS = QS * rs[i] if ks is None else ks[i] @ Sd
            W = Tb[i] @ (vs[i] - hi * KS)
            outs.append(P[i] @ W + hi * QS)
        if i + 1 < n or need_state:
            after = qs[i].mT @ (rs[i] * ti * W) if ks is None else ks[i].mT @ (ti * W)
            S = after if S is None else after + wi.view(*wi.shape, 1, 1).to(S.dtype) * S
    return torch.cat(outs, dim=2), (S if need_state else None)


class _Gram(torch.autograd.Function):
    """G = X X^T with the backward in one product, dX = (dG + dG^T) X (autograd's takes two)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x @ x.mT

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return (g + g.mT) @ x


class _QueryKeyBlock(torch.autograd.Function):
    """The delta rule over one block from an empty state, its keys the unit queries, no state after (training's
    pass): with G = Q Q^T, r_i = 1 / sqrt(max(G_ii, KEY_EPS^2)) and M the decay matrix (zero on and above the
    diagonal),

        P = G diag(r) * M,   A = diag(r b) P,   (I + A) W = diag(b) V,   a = P W

    and the backward by hand (`_block_grads`): one N-wide product (dQ = (dG + dG^T) Q, as Eq. 8's `shared_keys`),
    three T x T x D products and one solve, fewer passes over T x T tensors than autograd's."""

    @staticmethod
    def forward(ctx, q, v, beta, M):
        acc = torch.promote_types(q.dtype, torch.float32)
        G = q @ q.mT
        r = G.diagonal(dim1=-2, dim2=-1).clamp_min(KEY_EPS**2).rsqrt()
        P = G * r.unsqueeze(-2) * M
        A = (P * (r * beta.to(q.dtype)).unsqueeze(-1)).to(acc)
        W = torch.linalg.solve_triangular(A, (beta.unsqueeze(-1) * v).to(acc), upper=False, unitriangular=True)
        W = W.to(q.dtype)
        out = P @ W
        ctx.save_for_backward(q, v, beta, M, G, r, W, out)
        return out

    @staticmethod
    def backward(ctx, d_out):
        return _block_grads(*ctx.saved_tensors, d_out, need_m=ctx.needs_input_grad[3])


def _block_grads(q, v, beta, M, G, r, W, out, d_out, need_m: bool):
    """(dq, dv, dbeta, dM) of `_QueryKeyBlock`. With dY = (I + A)^{-T} P^T da (Y = diag(b) V), dA = -dY W^T, so P's
    gradient is dP = (da - diag(r b) dY) W^T (its own and A's in one product); r_j enters through P's columns, r_i
    and b_i through A's rows: sum_j dA_ij A_ij = -r_i b_i (dY_i . a_i), no T x T pass. Then dG = dP * M diag(r), its
    diagonal plus -r_i^3 / 2 times r_i's gradient (zero where the clamp holds), and dq = (dG + dG^T) q."""
    dt, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    d_out = d_out.to(dt)
    b = beta.to(dt)
    rb = (r * b).unsqueeze(-1)
    P = G * r.unsqueeze(-2) * M
    A = (P * rb).to(acc)
    dW = P.mT @ d_out
    # (I + A)^T dY = dW as dY^T (I + A) = dW^T: the lower solve from the right (a transposed upper solve is slower)
    dY = torch.linalg.solve_triangular(A, dW.to(acc).mT, upper=False, left=False, unitriangular=True).mT.to(dt)
    dP = (d_out - rb * dY) @ W.mT
    X = dP * M
    ya = (dY * out).sum(-1)
    dr = (X * G).sum(-2) - b * ya
    db = (dY * v).sum(-1) - r * ya
    dv = b.unsqueeze(-1) * dY
    if dv.shape[1] != v.shape[1]:
        dv = dv.sum(1, keepdim=True)  # values shared by the heads
    dG = X * r.unsqueeze(-2)
    kept = G.diagonal(dim1=-2, dim2=-1) >= KEY_EPS**2  # clamp_min's gradient passes where the input is kept
    dG.diagonal(dim1=-2, dim2=-1).add_(-0.5 * dr * r**3 * kept)
    dq = (dG + dG.mT) @ q
    dM = (dP * G * r.unsqueeze(-2)).sum_to_size(M.shape) if need_m else None  # M: one row for the batch
    return dq, dv.to(v.dtype), db.to(beta.dtype), dM
