"""The delta-rule write of `bdh.model.kernels.pytorch.state_rules` as Triton kernels, forward and backward, at BDH's
shapes (keys N = n / h wide, to 8,192 a head; values D wide).

Per chunk of C tokens (e_i = sum_{j<i} l_j, c = sum_j l_j of the log-retentions l; b the write strengths of the
sigmoid or the hard write gate; S the N x D state before the chunk), the UT form of the token rule's docstring:

    M_ij = e^{e_i - e_j} (j < i),   P = (Q K^T) * M,   Tb = (I + diag(b) (K K^T) * M)^{-1} diag(b)
    G = e^{e},   tail = e^{c - e},   ec = e^c
    X = V - G (K S),   W = Tb X,   out = P W + G (Q S),   S' = ec S + K^T (tail W).

Everything N wide runs in the kernels (`delta_jit`): ``gram_kernel`` (Q K^T and K K^T of each chunk),
``scan_kernel`` (the chunks in order, one program per block of the state's D columns, which the rule never
mixes: the N x BD state streams through global memory, read and written once a chunk), and for the backward
``grad_scan_kernel`` (dS chunk by chunk from the last) and ``grad_keys_kernel`` (dQ, dK). The C x C and C x D
algebra between them (M, the triangular solve, P^T dO, ...) is small and runs in PyTorch, its gradient through
autograd. Backward, with dS' the gradient of the state after the chunk:

    dW = P^T dO + tail (K dS'),   dX = Tb^T dW,   dV = dX,   dS = ec dS' + Q^T (G dO) - K^T (G dX)
    dQ = dP' K + (G dO) S^T,   dK = dP'^T Q + (dA' + dA'^T) K - (G dX) S^T + (tail W) dS'^T
    dP = dO W^T,  dTb = dW X^T,  de = G dG = sum_d (dO G (Q S) - dX G (K S)),  dtail = sum_d W (K dS'),
    dec = <S, dS'>

(dP', dA' the gradients of Q K^T and K K^T through the PyTorch algebra). The forward keeps two state slots; the
backward recomputes the states at every chunk boundary (B H (T / C + 1) N D in fp32)."""

from __future__ import annotations

import dataclasses

import torch

from bdh.errors import UserError

from ..pytorch.state_rules import _decay
from .chunked import NUM_WARPS, _on, _Plan, autocast_inputs, check_call
from .chunked import _plan as _chunked_plan

#: the widest tile of N and of D: at 64 ptxas spills registers in the scan and the backward kernels at bf16, at 32
#: none (compiled for sm_90 without a GPU, tests/model/test_delta_triton.py)
MAX_TILE = 32


def _plan(q: torch.Tensor, v: torch.Tensor, chunk_size: int) -> _Plan:
    """`chunked`'s plan with tiles of N and D at most `MAX_TILE` wide."""
    p = _chunked_plan(q, v, chunk_size)
    return dataclasses.replace(p, BN=min(p.BN, MAX_TILE), BD=min(p.BD, MAX_TILE))


def chunk_matrices(qk, kk, log_g, beta):
    """(P, Tb, G, tail, ec, e) of every chunk (module docstring) from its Gram matrices qk, kk (B H, NC, C, C) and the
    chunked log-retentions and write strengths (B H, NC, C): the token rule's decay matrix (`state_rules._decay`, its
    sums in fp64), the rest in qk's dtype. Differentiable: the backward pass takes its gradient through autograd."""
    M, e, total = _decay(qk, log_g)  # (B H, NC) as its (B, H): a chunk is a block
    c = total[..., -1:]
    Tb = torch.linalg.solve_triangular(
        kk * M * beta.unsqueeze(-1), torch.diag_embed(beta), upper=False, unitriangular=True
    )
    G, tail, ec = torch.exp(e).to(qk.dtype), torch.exp(c - e).to(qk.dtype), torch.exp(c[..., 0]).to(qk.dtype)
    return qk * M, Tb, G, tail, ec, e


def _chunks(x: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """(B, H, T, ...) -> (B H, NC, C, ...) in the plan's accumulation dtype, zero past T."""
    p = plan
    x = x.to(p.acc).reshape(p.B * p.H, p.T, *x.shape[3:])
    pad = p.NC * p.C - p.T
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], dim=1)
    return x.reshape(p.B * p.H, p.NC, p.C, *x.shape[2:])


def _gram(plan: _Plan, q, k):
    """(Q K^T, K K^T) of every chunk, (B H, NC, C, C) in the accumulation dtype."""
    from .delta_jit import gram_kernel

    p = plan
    qk = q.new_empty(p.B * p.H, p.NC, p.C, p.C, dtype=p.acc)
    kk = torch.empty_like(qk)
    c = p.constants()
    gram_kernel[(p.NC, p.B * p.H)](
        q, k, qk, kk, p.T, p.N, p.C, p.NC, BC=p.BC, BN=p.BN, ACC=c["ACC"], PRECISION=c["PRECISION"],
        WIDEN=p.widen, num_warps=NUM_WARPS,
    )  # fmt: skip
    return qk, kk


def _scan(plan: _Plan, q, k, v, S0, mats, store_all: bool):
    """(out (B H, NC C, D) in q's dtype, the state buffer (B H, slots, N, D)), or with ``store_all`` (None, the
    states at every chunk boundary, K S and Q S (B H, NC C, D))): `scan_kernel`."""
    from .delta_jit import scan_kernel

    p = plan
    P, Tb, G, tail, ec = mats[:5]
    TP = p.NC * p.C
    slots = p.NC + 1 if store_all else 2
    states = q.new_empty(p.B * p.H, slots, p.N, p.D, dtype=p.acc)
    out = q.new_empty(p.B * p.H, TP, p.D)
    # zeros: the kernel writes the rows of tokens only, and the rows past T meet zeros of Tb on the host (0 * NaN)
    saved = [q.new_zeros(p.B * p.H, TP, p.D, dtype=p.acc) for _ in range(2)] if store_all else [out] * 2
    init = None if S0 is None else S0.reshape(p.B * p.H, p.N, p.D).contiguous()
    c = p.constants()
    scan_kernel[(-(-p.D // p.BD), p.B * p.H)](
        q, k, v, states if init is None else init, P, Tb, G, tail, ec, states, out, *saved, *v.stride(),
        p.H, p.T, TP, p.N, p.D, p.C, p.NC, slots, HAS_INIT=init is not None, STORE_ALL=store_all,
        BC=p.BC, BN=p.BN, BD=p.BD, ACC=c["ACC"], PRECISION=c["PRECISION"], WIDEN=p.widen, num_warps=NUM_WARPS,
    )  # fmt: skip
    return (None, states, *saved) if store_all else (out, states)


def _grad_scan(plan: _Plan, q, k, dO, dS, Y, TbT, G, tail, ec):
    """(dstates (B H, NC + 1, N, D), K dS' and dX (B H, NC C, D)): `grad_scan_kernel`."""
    from .delta_jit import grad_scan_kernel

    p = plan
    TP = p.NC * p.C
    dstates = q.new_empty(p.B * p.H, p.NC + 1, p.N, p.D, dtype=p.acc)
    kds, dX = (q.new_zeros(p.B * p.H, TP, p.D, dtype=p.acc) for _ in range(2))  # zero past T, as in `_scan`
    final = None if dS is None else dS.to(p.acc).reshape(p.B * p.H, p.N, p.D).contiguous()
    c = p.constants()
    grad_scan_kernel[(-(-p.D // p.BD), p.B * p.H)](
        q, k, dO, dstates if final is None else final, Y, TbT, G, tail, ec, dstates, kds, dX,
        p.T, TP, p.N, p.D, p.C, p.NC, HAS_FINAL=final is not None,
        BC=p.BC, BN=p.BN, BD=p.BD, ACC=c["ACC"], PRECISION=c["PRECISION"], WIDEN=p.widen, num_warps=NUM_WARPS,
    )  # fmt: skip
    return dstates, kds, dX


def _grad_keys(plan: _Plan, q, k, Fq, Fk, a1, a2, a3, states, dstates):
    """(dq, dk in q's dtype, <S, dS'> of every chunk (B H, NC)): `grad_keys_kernel`."""
    from .delta_jit import grad_keys_kernel

    p = plan
    dq, dk = torch.empty_like(q), torch.empty_like(q)
    blocks = -(-p.N // p.BN)
    dec = q.new_empty(p.B * p.H, p.NC, blocks, dtype=p.acc)
    c = p.constants()
    grad_keys_kernel[(p.NC, blocks, p.B * p.H)](
        q, k, Fq, Fk, a1, a2, a3, states, dstates, dq, dk, dec, p.T, p.NC * p.C, p.N, p.D, p.C, p.NC,
        BC=p.BC, BN=p.BN, BD=p.BD, ACC=c["ACC"], PRECISION=c["PRECISION"], WIDEN=p.widen, num_warps=NUM_WARPS,
    )  # fmt: skip
    return dq, dk, dec.sum(-1)


def _heads(x: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """(B H, NC C, ...) -> (B, H, T, ...): the padding past T dropped."""
    p = plan
    return x[:, : p.T].reshape(p.B, p.H, p.T, *x.shape[2:])


def _host():
    """The C x C and C x D algebra in its own dtypes, never autocast's (the solve has no bf16 path)."""
    return torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False)


class TritonDeltaRule(torch.autograd.Function):
    """(a, S after the block) = f(q, k, v, log_g, beta, S0): the kernels and the backward of the module docstring."""

    @staticmethod
    def forward(ctx, q, k, v, log_g, beta, S0, chunk_size: int):
        q, k = q.contiguous(), k.contiguous()
        B, H, T, N = q.shape
        plan = _plan(q, v, chunk_size)
        ctx.set_materialize_grads(False)  # an unused output (often the state) has no gradient to read
        gpu, cpu = _host()
        with _on(q), gpu, cpu:
            qk, kk = _gram(plan, q, k)
            mats = chunk_matrices(qk, kk, _chunks(log_g, plan), _chunks(beta, plan))
            out, states = _scan(plan, q, k, v.expand(B, H, T, plan.D), S0, [m.contiguous() for m in mats], False)
        ctx.save_for_backward(q, k, v, log_g, beta, S0, qk, kk)
        ctx.plan = plan
        return _heads(out, plan), states[:, plan.NC % 2].view(B, H, N, plan.D)

    @staticmethod
    def backward(ctx, d_out, d_S):
        q, k, v, log_g, beta, S0, qk, kk = ctx.saved_tensors
        p = ctx.plan
        gpu, cpu = _host()
        with _on(q), gpu, cpu:
            dq, dk, dv, dlog_g, dbeta, dS0 = _backward(p, q, k, v, log_g, beta, S0, qk, kk, d_out, d_S)
        if v.shape[1] == 1:
            dv = dv.sum(dim=1, keepdim=True)  # the values are shared by the heads
        need = ctx.needs_input_grad
        return (
            dq,
            dk,
            dv.to(v.dtype),
            dlog_g.to(log_g.dtype) if need[3] else None,
            dbeta.to(beta.dtype) if need[4] else None,
            dS0.to(S0.dtype) if S0 is not None and need[5] else None,
            None,
        )


def _backward(p: _Plan, q, k, v, log_g, beta, S0, qk, kk, d_out, d_S):
    """(dq, dk, dv per head, dlog_g, dbeta, dS0) of the module docstring's backward."""
    BH, TP = p.B * p.H, p.NC * p.C
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_() for x in (qk, kk, _chunks(log_g, p), _chunks(beta, p))]
        mats = chunk_matrices(*leaves)
    P, Tb, G, tail, ec = (m.detach().contiguous() for m in mats[:5])
    dO = _chunks(d_out, p) if d_out is not None else q.new_zeros(BH, p.NC, p.C, p.D, dtype=p.acc)
    Y = P.mT @ dO
    vh = v.expand(p.B, p.H, p.T, p.D)
    _, states, KS, QS = _scan(p, q, k, vh, S0, [P, Tb, G, tail, ec], True)
    dstates, kds, dX = _grad_scan(p, q, k, dO.contiguous(), d_S, Y.contiguous(), Tb.mT.contiguous(), G, tail, ec)
    KS, QS, kds, dX = (x.view(BH, p.NC, p.C, p.D) for x in (KS, QS, kds, dX))
    G4 = G.unsqueeze(-1)
    X = _chunks(vh, p) - G4 * KS
    W = Tb @ X  # as the kernel computed it, up to the order of the sums
    dW = Y + tail.unsqueeze(-1) * kds
    dP, dTb = dO @ W.mT, dW @ X.mT
    de = (G4 * (dO * QS - dX * KS)).sum(-1).double()  # G dG: the gradient of e = log G
    dqk, dkk, dlg, dbeta = torch.autograd.grad(
        (mats[0], mats[1], mats[5], mats[3]), leaves, (dP, dTb, de, (W * kds).sum(-1))
    )
    G, tail = G.unsqueeze(-1), tail.unsqueeze(-1)
    wide = [x.reshape(BH, TP, p.D).contiguous() for x in (G * dO, -G * dX, tail * W)]
    dq, dk, dec = _grad_keys(p, q, k, dqk.contiguous(), (dkk + dkk.mT).contiguous(), *wide, states, dstates)
    dlg = dlg + (dec * ec).unsqueeze(-1)  # ec = e^c, c the sum of the chunk's l: each of its tokens gets dec e^c
    dS0 = dstates[:, 0].reshape(p.B, p.H, p.N, p.D)
    dv, dlg, dbeta = dX.reshape(BH, TP, p.D), dlg.reshape(BH, TP), dbeta.reshape(BH, TP)
    return dq, dk, _heads(dv, p), _heads(dlg, p), _heads(dbeta, p), dS0


def delta_chunked_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int,
    log_g: torch.Tensor | None = None,
    beta: torch.Tensor,
    state: torch.Tensor | None = None,
    need_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The delta rule with the signature and values of `pytorch.state_rules.chunked`: q, k (B, H, T, N), v (B, 1 or
    H, T, D), log_g and beta (B, H, T), state (B, H, N, D) or None -> (a in q's dtype, the state after the block in
    fp32 when ``need_state``); under autocast q, k, v are cast here, log_g and beta kept in fp32."""
    check_call("delta_chunked_triton", q, k, v, state, chunk_size)
    B, H, T, _ = q.shape
    for name, x in (("beta", beta), ("log_g", log_g)):
        if (x is not None or name == "beta") and (not torch.is_tensor(x) or tuple(x.shape) != (B, H, T)):
            got = tuple(x.shape) if torch.is_tensor(x) else x
            raise UserError(f"delta_chunked_triton: {name} must be (B, H, T) = {(B, H, T)}, got {got}")
    q, k, v = autocast_inputs("delta_chunked_triton", q, k, v)
    small = torch.float64 if q.dtype == torch.float64 else torch.float32
    log_g = q.new_zeros(B, H, T, dtype=small) if log_g is None else log_g.to(small)
    out, S = TritonDeltaRule.apply(q, k, v, log_g, beta.to(small), state, chunk_size)
    return out, (S if need_state else None)
