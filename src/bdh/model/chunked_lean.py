"""Memory-lean chunked linear attention: a custom autograd function that recomputes the state in backward.

The plain chunked form (`bdh.model.attention.chunked`) lets autograd keep the state S (B, H, N, D) of
every chunk for the backward pass: T / C copies of a matrix as large as a weight matrix, which for
BDH's large n costs more memory than the parallel form's T x T scores. This function keeps only q, k, v
(and the initial state) and recomputes what backward needs, one chunk at a time.

With S_t = u (S_{t-1} + k_t v_t^T) and o_t = q_t^T S_{t-1}, the gradients are

    dq_t = S_{t-1} do_t
    dS_t = q_{t+1} do_{t+1}^T + u dS_{t+1}       (dS of the last token = the gradient of the returned state)
    dk_t = u dS_t v_t,      dv_t = u dS_t^T k_t,      dS_{-1} = q_0 do_0^T + u dS_0.

Backward runs in reverse over the chunks, carrying dS, for dq, dk, dv and the gradient of the initial
state; it needs the state S_b before each chunk for the S_b do part of dq. Those states are kept by
the forward pass when they take no more memory than q (T / C chunks x N x D <= T x N, i.e. D <= C);
otherwise a first, forward pass re-builds them chunk by chunk. Inside a chunk everything is the masked
C x C form. Memory: at most one more q-sized tensor, or one (B, H, N, D) state plus per-chunk
temporaries, whatever T is. Under autocast the inputs are cast to its dtype (bf16 matmuls) and the
state is still summed in fp32.

Two things make it fast on CPU (docs/performance.md):

* **Chunk-major copies.** q, k, v are copied once into a (T / C, B, H, C, .) layout, so that every
  chunk is one contiguous tensor. A chunk sliced out of (B, H, T, N) is not, and its transpose (the
  keys in q k^T and k^T v) made each bf16 matmul copy its operand first (measured 2.5x slower per
  chunk product). The gradients are written chunk by chunk into the same layout and copied back once.
* **Shared keys.** BDH's keys are its queries (k = q = the rotated x). When both arguments are the
  same tensor, the intra-chunk terms of dq and dk are one product, (P + P^T) x_c, and autograd gets one
  gradient instead of two to add up.

Tested against the plain chunked and the recurrent forms (values and all gradients).
"""

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
    """A (B, H, T, X) tensor as chunks of C tokens, each a contiguous (B, H, C, X) tensor.

    The full chunks live in one (T // C, B, H, C, X) tensor; a shorter last chunk is kept apart.
    """

    def __init__(self, full: torch.Tensor | None, tail: torch.Tensor | None):
        self.full, self.tail = full, tail
        self.count = (0 if full is None else full.shape[0]) + (tail is not None)

    @classmethod
    def of(cls, t: torch.Tensor, C: int) -> "_Chunks":
        B, H, T, X = t.shape
        nf = T // C
        full = t[:, :, : nf * C].reshape(B, H, nf, C, X).permute(2, 0, 1, 3, 4).contiguous() if nf else None
        tail = t[:, :, nf * C :].contiguous() if T % C else None
        return cls(full, tail)

    @classmethod
    def empty(cls, B: int, H: int, T: int, X: int, C: int, like: torch.Tensor) -> "_Chunks":
        nf = T // C
        full = like.new_empty(nf, B, H, C, X) if nf else None
        tail = like.new_empty(B, H, T - nf * C, X) if T % C else None
        return cls(full, tail)

    def __getitem__(self, c: int) -> torch.Tensor:
        if self.full is not None and c < self.full.shape[0]:
            return self.full[c]
        return self.tail

    def joined(self) -> torch.Tensor:
        """The (B, H, T, X) tensor (one copy)."""
        parts = []
        if self.full is not None:
            nf, B, H, C, X = self.full.shape
            parts.append(self.full.permute(1, 2, 0, 3, 4).reshape(B, H, nf * C, X))
        if self.tail is not None:
            parts.append(self.tail)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)


def _bmm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, accumulate: bool) -> None:
    """out (B, H, M, P) = or += a (B, H, M, K) @ b (B, H, K, P), batched over B x H without a temporary."""
    B, H, M, P = out.shape
    o3, a3, b3 = out.view(B * H, M, P), a.reshape(B * H, M, -1), b.reshape(B * H, -1, P)
    if accumulate:
        o3.baddbmm_(a3, b3)
    else:
        torch.bmm(a3, b3, out=o3)


def _keep_states(chunks: int, D: int, T: int) -> bool:
    """Keep the state before each chunk for backward (instead of recomputing it) when the kept states take
    no more memory than q: chunks x N x D <= T x N. They are kept as the matmuls read them (in q's dtype),
    so both ways give the same values."""
    return chunks * D <= T


class ChunkedLinearAttention(torch.autograd.Function):
    """o, S_final = f(q, k, v, S0) with state recomputation in backward (see the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, S0, log_u, chunk_size: int):  # noqa: D401 - autograd signature
        B, H, T, N = q.shape
        D = v.shape[-1]
        acc = torch.promote_types(q.dtype, torch.float32)  # the state is summed in fp32 even for bf16 inputs
        S = q.new_zeros(B, H, N, D, dtype=acc) if S0 is None else S0.to(acc, copy=True)
        shared = q is k
        qs = _Chunks.of(q, chunk_size)
        ks = qs if shared else _Chunks.of(k, chunk_size)
        vs = _Chunks.of(v.expand(B, H, T, D), chunk_size)
        powers = _Powers(log_u, q.device, q.dtype)
        kept = q.new_empty(qs.count, B, H, N, D) if _keep_states(qs.count, D, T) else None
        outs = []
        for c in range(qs.count):
            qc, kc, vc = qs[c], ks[c], vs[c]
            C = qc.shape[2]
            M, head, tail, whole = powers(C)
            Sq = S.to(q.dtype)
            if kept is not None:
                kept[c] = Sq
            o = ((qc @ kc.mT) * M) @ vc
            o += ((qc * head.view(1, H, C, 1)) if head is not None else qc) @ Sq
            outs.append(o)
            if whole is not None:
                S.mul_(whole.view(1, H, 1, 1).to(acc))
            S.add_((kc * tail.view(1, H, C, 1) if tail is not None else kc).mT @ vc)  # fp32 += product
        # the chunk-major copies are kept instead of q, k and v (the same memory; no second copy in backward)
        ctx.save_for_backward(qs.full, qs.tail, ks.full, ks.tail, vs.full, vs.tail, S0, log_u, kept)
        ctx.chunk_size = chunk_size
        ctx.shared = shared
        ctx.shapes = (q.shape, v.shape)
        return torch.cat(outs, dim=2), S

    @staticmethod
    def backward(ctx, d_out, d_S):
        q_full, q_tail, k_full, k_tail, v_full, v_tail, S0, log_u, kept = ctx.saved_tensors
        C0, shared = ctx.chunk_size, ctx.shared
        (B, H, T, N), v_shape = ctx.shapes
        D = v_shape[-1]
        qs = _Chunks(q_full, q_tail)
        ks = qs if shared else _Chunks(k_full, k_tail)
        vs = _Chunks(v_full, v_tail)
        q = qs[0]  # dtype and device
        acc = torch.promote_types(q.dtype, torch.float32)
        dos = _Chunks.of(d_out.to(q.dtype), C0)
        dq = _Chunks.empty(B, H, T, N, C0, q)
        dk = dq if shared else _Chunks.empty(B, H, T, N, C0, q)
        dv = _Chunks.empty(B, H, T, D, C0, q)
        powers = _Powers(log_u, q.device, q.dtype)
        if kept is None:
            # pass 1 (forward): rebuild the state S_b before each chunk for the u^i S_b do_t part of dq
            S = q.new_zeros(B, H, N, D, dtype=acc) if S0 is None else S0.to(acc, copy=True)
            for c in range(qs.count):
                kc, vc, doc = ks[c], vs[c], dos[c]
                M, head, tail, whole = powers(kc.shape[2])
                C = kc.shape[2]
                _bmm_into(dq[c], doc * head.view(1, H, C, 1) if head is not None else doc, S.to(q.dtype).mT, False)
                if whole is not None:
                    S.mul_(whole.view(1, H, 1, 1).to(acc))
                S.add_((kc * tail.view(1, H, C, 1) if tail is not None else kc).mT @ vc)
        # pass 2 (reverse): carry dS (the gradient of the state after the chunk) backwards
        dS = q.new_zeros(B, H, N, D, dtype=acc) if d_S is None else d_S.to(acc, copy=True)
        for c in reversed(range(qs.count)):
            qc, kc, vc, doc = qs[c], ks[c], vs[c], dos[c]
            C = qc.shape[2]
            M, head, tail, whole = powers(C)
            if kept is not None:  # the states were kept in forward: the S_b do part of dq here
                _bmm_into(dq[c], doc * head.view(1, H, C, 1) if head is not None else doc, kept[c].mT, False)
            P = (doc @ vc.mT) * M  # [i, j] = u^(i-j) do_i . v_j
            A = (qc @ kc.mT) * M  # [i, j] = u^(i-j) q_i . k_j
            dSq = dS.to(q.dtype)
            if shared:  # dq + dk of the chunk: (P + P^T) x_c + u^(C-j) v_j dS^T
                _bmm_into(dq[c], P + P.mT, qc, accumulate=True)
            else:
                _bmm_into(dq[c], P, kc, accumulate=True)
                _bmm_into(dk[c], P.mT, qc, accumulate=False)
            _bmm_into(dk[c], vc * tail.view(1, H, C, 1) if tail is not None else vc, dSq.mT, accumulate=True)
            _bmm_into(dv[c], A.mT, doc, accumulate=False)
            _bmm_into(dv[c], kc * tail.view(1, H, C, 1) if tail is not None else kc, dSq, accumulate=True)
            if whole is not None:
                dS.mul_(whole.view(1, H, 1, 1).to(acc))
            dS.add_((qc * head.view(1, H, C, 1) if head is not None else qc).mT @ doc)
        dv_full = dv.joined()
        if v_shape[1] == 1:
            dv_full = dv_full.sum(dim=1, keepdim=True)
        dS0 = dS.to(S0.dtype) if (S0 is not None and ctx.needs_input_grad[3]) else None
        return dq.joined(), (None if shared else dk.joined()), dv_full, dS0, None, None


def chunked_lean(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int,
    log_u: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked linear attention (same values as `bdh.model.attention.chunked`) with a lean backward.

    Returns (a (B, H, T, D), the state after the block (B, H, N, D)).
    """
    log_u = None if log_u is None else log_u.detach()
    if torch.is_autocast_enabled(q.device.type):
        # one dtype inside (autocast's, e.g. bf16): the backward runs outside autocast, so the inputs are cast
        # here, where autograd records the casts; the state is summed in fp32 all the same
        low = torch.get_autocast_dtype(q.device.type)
        shared = q is k
        q, v = q.to(low), v.to(low)
        k = q if shared else k.to(low)
    return ChunkedLinearAttention.apply(q, k, v, state, log_u, chunk_size)
