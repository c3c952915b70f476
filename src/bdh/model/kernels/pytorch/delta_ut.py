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


def delta_ut(q, k, v, *, chunk_size, log_g=None, beta, state=None, need_state=False, query_keys=False):
    """The delta rule over chunks of `ut_chunk` tokens (at most ``chunk_size``). q, k (B, H, T, N), unit keys; v (B,
    1 or H, T, D); log_g (B, H, T) or None; beta (B, H, T); state (B, H, N, D) or None. ``query_keys``: the keys are
    the unit queries
    q / max(|q|, KEY_EPS) (BDH's, without ``separate_keys`` or shaped write keys) and ``k`` is not read (`_gram`).
    Returns (a (B, H, T, D), the state after or None). The products run in q's dtype, the solve in fp32 at least
    (no bf16 solver)."""
    B, H, T, N = q.shape
    C = min(ut_chunk(chunk_size, N, v.shape[-1]), T)
    dt, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    M, head, tail, whole = _decay(_retention(log_g, B, H, T, C, q.device), dt)
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
    G = qc @ qc.mT
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
