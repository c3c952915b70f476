"""Memory-lean chunked linear attention: a custom autograd function with a hand-written backward.

It keeps q, k, v (chunk-major), the C x C scores, and the per-chunk states only when no larger than q, recomputing the
rest. With S_t = u (S_{t-1} + k_t v_t^T) and o_t = q_t^T S_{t-1}:

    dq_t = S_{t-1} do_t
    dS_t = q_{t+1} do_{t+1}^T + u dS_{t+1}       (dS of the last token = the gradient of the returned state)
    dk_t = u dS_t v_t,      dv_t = u dS_t^T k_t,      dS_{-1} = q_0 do_0^T + u dS_0.

Only the state is scanned chunk by chunk (fp32); the rest is batched matmuls over all chunks."""

from __future__ import annotations

import torch


def _powers(log_u: torch.Tensor | None, C: int, device, dtype):
    """(M, head, tail, whole): M[h, i, j] = u^(i-j) for i > j (else 0); head[h, i] = u^i; tail[h, j] = u^(C-j); u^C."""
    i = torch.arange(C, device=device)
    gap = i.view(-1, 1) - i.view(1, -1)
    mask = gap > 0
    if log_u is None:
        M = mask.to(dtype).unsqueeze(0)
        return M, None, None, None
    lu = log_u.to(torch.promote_types(log_u.dtype, torch.float32))
    M = (torch.exp(lu.view(-1, 1, 1) * gap.clamp(min=0).to(lu.dtype)) * mask).to(dtype)
    head = torch.exp(lu.view(-1, 1) * i.view(1, -1).to(lu.dtype)).to(dtype)  # H, C
    tail = torch.exp(lu.view(-1, 1) * (C - i).view(1, -1).to(lu.dtype)).to(dtype)  # H, C
    whole = torch.exp(lu * C).to(dtype)  # H
    return M, head, tail, whole


class _Powers:
    """`_powers` for each chunk length, computed once per call (a call has at most two lengths)."""

    def __init__(self, log_u: torch.Tensor | None, device, dtype):
        self.args, self.cache = (log_u, device, dtype), {}

    def __call__(self, C: int):
        if C not in self.cache:
            self.cache[C] = _powers(self.args[0], C, *self.args[1:])
        return self.cache[C]


class _Chunks:
    """A (B, H, T, X) tensor as (T // C, B, H, C, X) full chunks and, when C does not divide T, a (1, B, H, T % C,
    X) tail."""

    def __init__(self, groups: list[torch.Tensor]):
        self.groups = groups

    @classmethod
    def of(cls, t: torch.Tensor, C: int) -> _Chunks:
        B, H, T, X = t.shape
        nf = T // C
        groups = []
        if nf:
            groups.append(t[:, :, : nf * C].reshape(B, H, nf, C, X).permute(2, 0, 1, 3, 4).contiguous())
        if T % C:
            groups.append(t[:, :, nf * C :].unsqueeze(0).contiguous())
        return cls(groups)

    def joined(self) -> torch.Tensor:
        """The (B, H, T, X) tensor (one copy)."""
        parts = [g.permute(1, 2, 0, 3, 4).flatten(2, 3) for g in self.groups]
        return parts[0].contiguous() if len(parts) == 1 else torch.cat(parts, dim=2)


def _addmm_(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """out += a @ b for contiguous (..., M, P) out, batched over all leading dims without a temporary."""
    M, P = out.shape[-2:]
    out.view(-1, M, P).baddbmm_(a.reshape(-1, M, a.shape[-1]), b.reshape(-1, b.shape[-2], P))
    return out


def _weighted(t: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """t (G, B, H, C, X) with row i of head h scaled by w[h, i] (or t if w is None); applied to the D-wide factor."""
    return t if w is None else t * w.view(1, 1, *w.shape, 1)


def _add_weighted_(out: torch.Tensor, t: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """out += t with row i of head h scaled by w[h, i] (see `_weighted`), in place."""
    return out.add_(t) if w is None else out.addcmul_(t, w.view(1, 1, *w.shape, 1))


def _scan(
    parts: torch.Tensor, S: torch.Tensor, whole: torch.Tensor | None, low: torch.dtype, reverse: bool = False
) -> torch.Tensor:
    """The state before each of G chunks in ``low`` (G, B, H, N, D), ``S`` ending after them: S_{g+1} = u^C S_g
    + parts_g."""
    before = parts.new_empty(parts.shape, dtype=low)
    G = parts.shape[0]
    whole = None if whole is None else whole.view(1, -1, 1, 1).to(S.dtype)
    for g in reversed(range(G)) if reverse else range(G):
        before[g] = S
        if whole is not None:
            S.mul_(whole)
        S.add_(parts[g])
    return before


def _keep_states(chunks: int, D: int, T: int) -> bool:
    """Whether backward keeps each chunk's state (chunks x N x D <= T x N) instead of recomputing it; same values."""
    return chunks * D <= T


class ChunkedLinearAttention(torch.autograd.Function):
    """o, S_final = f(q, k, v, S0) with a hand-written backward (see the module docstring)."""

    @staticmethod
    def _states(ks: _Chunks, vs: _Chunks, S0, powers, H: int, acc, low):
        """The state before every chunk, per group, and the final state (fp32)."""
        B, N, D = ks.groups[0].shape[1], ks.groups[0].shape[-1], vs.groups[0].shape[-1]
        S = ks.groups[0].new_zeros(B, H, N, D, dtype=acc) if S0 is None else S0.to(acc, copy=True)
        befores = []
        for kg, vg in zip(ks.groups, vs.groups):
            C = kg.shape[-2]
            M, head, tail, whole = powers(C)
            befores.append(_scan(kg.mT @ _weighted(vg, tail), S, whole, low))
        return befores, S

    @staticmethod
    def forward(ctx, q, k, v, S0, log_u, chunk_size: int):
        B, H, T, N = q.shape
        D = v.shape[-1]
        acc = torch.promote_types(q.dtype, torch.float32)  # the state is summed in fp32 even for bf16 inputs
        shared = q is k
        qs = _Chunks.of(q, chunk_size)
        ks = qs if shared else _Chunks.of(k, chunk_size)
        vs = _Chunks.of(v.expand(B, H, T, D), chunk_size)
        powers = _Powers(log_u, q.device, q.dtype)
        # every chunk's state-free work is one batched matmul over all chunks; only the state is scanned
        befores, S = ChunkedLinearAttention._states(ks, vs, S0, powers, H, acc, q.dtype)
        outs, scores = [], []
        for qg, kg, vg, before in zip(qs.groups, ks.groups, vs.groups, befores):
            C = qg.shape[-2]
            M, head, tail, whole = powers(C)
            A = (qg @ kg.mT) * M  # (G, B, H, C, C): [i, j] = u^(i-j) q_i . k_j
            o = A @ vg
            _add_weighted_(o, qg @ before, head)
            outs.append(o)
            scores.append(A)
        keep = _keep_states(sum(g.shape[0] for g in qs.groups), D, T)
        # the chunk-major copies are kept instead of q, k and v (the same memory; no second copy in backward)
        n = len(qs.groups)
        ctx.save_for_backward(
            S0, log_u, *qs.groups, *(() if shared else ks.groups), *vs.groups, *scores, *(befores if keep else ())
        )
        ctx.layout = (n, shared, keep)
        ctx.chunk_size = chunk_size
        ctx.shapes = (q.shape, v.shape)
        return _Chunks(outs).joined(), S

    @staticmethod
    def backward(ctx, d_out, d_S):
        n, shared, has_kept = ctx.layout
        saved = list(ctx.saved_tensors)
        S0, log_u = saved[:2]
        rest = saved[2:]
        qs = _Chunks(rest[:n])
        rest = rest[n:]
        if shared:
            ks = qs
        else:
            ks, rest = _Chunks(rest[:n]), rest[n:]
        vs, rest = _Chunks(rest[:n]), rest[n:]
        scores, rest = rest[:n], rest[n:]
        (B, H, T, N), v_shape = ctx.shapes
        low = qs.groups[0].dtype
        acc = torch.promote_types(low, torch.float32)
        powers = _Powers(log_u, qs.groups[0].device, low)
        befores = rest if has_kept else ChunkedLinearAttention._states(ks, vs, S0, powers, H, acc, low)[0]
        dos = _Chunks.of(d_out.to(low), ctx.chunk_size)
        dS = qs.groups[0].new_zeros(B, H, N, v_shape[-1], dtype=acc) if d_S is None else d_S.to(acc, copy=True)
        dqs, dks, dvs = [None] * n, [None] * n, [None] * n
        for i in reversed(range(n)):  # the last group first: dS flows backwards
            qg, kg, vg, dog, A, before = qs.groups[i], ks.groups[i], vs.groups[i], dos.groups[i], scores[i], befores[i]
            C = qg.shape[-2]
            M, head, tail, whole = powers(C)
            # dS after each chunk: dS_g = u^C dS_{g+1} + (u^i q_i)^T do_i of chunk g + 1, in reverse
            after = _scan(qg.mT @ _weighted(dog, head), dS, whole, low, reverse=True)
            P = (dog @ vg.mT) * M  # [i, j] = u^(i-j) do_i . v_j
            dq = _weighted(dog, head) @ before.mT  # u^i S_b do_i
            if shared:  # dq + dk of the chunk: (P + P^T) x_c + u^(C-j) v_j dS^T
                _addmm_(dq, P + P.mT, qg)
                dk = dq
            else:
                _addmm_(dq, P, kg)
                dk = P.mT @ qg
            _addmm_(dk, _weighted(vg, tail), after.mT)
            dv = _add_weighted_(A.mT @ dog, kg @ after, tail)
            dqs[i], dks[i], dvs[i] = dq, dk, dv
        dv_full = _Chunks(dvs).joined()
        if v_shape[1] == 1:
            dv_full = dv_full.sum(dim=1, keepdim=True)
        dS0 = dS.to(S0.dtype) if (S0 is not None and ctx.needs_input_grad[3]) else None
        return _Chunks(dqs).joined(), (None if shared else _Chunks(dks).joined()), dv_full, dS0, None, None


def chunked_lean(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int,
    log_u: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    need_state: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`attention.chunked`'s values with a lean backward: (a (B, H, T, D), the state after (B, H, N, D) or None)."""
    log_u = None if log_u is None else log_u.detach()
    if torch.is_autocast_enabled(q.device.type):
        # one dtype inside (autocast's, e.g. bf16): the backward runs outside autocast, so the inputs are cast
        # here, where autograd records the casts; the state is summed in fp32 all the same
        low = torch.get_autocast_dtype(q.device.type)
        shared = q is k
        q, v = q.to(low), v.to(low)
        k = q if shared else k.to(low)
    out, after = ChunkedLinearAttention.apply(q, k, v, state, log_u, chunk_size)
    return out, (after if need_state else None)
