"""The kernels of the state rules beyond Eq. 8 (`bdh.model.state_rules`): a retention per token and, optionally, a
delta-rule write (ours).

Per head, with l_t = log u_t (B, H, T) (``decay_gate``, or U's u_h) and b_t in (0, 1) the delta rule's write strength:

    a_t = q_t^T S_{t-1},        S_t = u_t (S_{t-1} + k_t w_t^T)
    w_t = v_t                                   (add: Eq. 8 with U per token)
    w_t = b_t (v_t - S_{t-1}^T k_t)             (delta: DeltaNet's correction, unit keys k)

Within a block from S0, with e_i = sum_{j<i} l_j and c = sum_j l_j:

    a_i = e^{e_i} q_i^T S0 + sum_{j<i} e^{e_i - e_j} (q_i . k_j) w_j,    S_after = e^c S0 + sum_j e^{c - e_j} k_j w_j^T

and the delta rule's W solves (I + A) W = diag(b) (V - diag(e^e) K S0), A_ij = b_i e^{e_i - e_j} (k_i . k_j) for j
< i (the UT transform, Yang et al. 2024). Forms: ``parallel`` (one block), ``chunked`` (chunks of C),
``recurrent`` (`naive_state_rule`, the reference). A new write rule: its w_t in the loop, in `_block`, and its
names in `dispatch.ATTENTION`."""

from __future__ import annotations

import torch

from ..naive import KEY_EPS, naive_state_rule


def unit_keys(k: torch.Tensor) -> torch.Tensor:
    """k / |k| over the neurons of each head (the delta rule's keys)."""
    return k / k.norm(dim=-1, keepdim=True).clamp_min(KEY_EPS)


def _decay(q, log_g):
    """(M, e, c): M[i, j] = e^{e_i - e_j} for j < i (else 0), (B, H, C, C) in q's dtype; e and c in fp64."""
    B, H, C, _ = q.shape
    # the cumulative log-retention in fp64: differences of long sums keep their digits (a (B, H, C) vector)
    lg = log_g.double() if log_g is not None else q.new_zeros(B, H, C, dtype=torch.float64)
    c = lg.cumsum(-1)
    e = c - lg  # e_i = sum_{j<i} l_j
    i = torch.arange(C, device=q.device)
    below = (i.view(-1, 1) > i.view(1, -1)).expand(B, H, C, C)
    # e^{e_i - e_j} on j < i; masked before exp, so no overflow above the diagonal (and no NaN in its gradient)
    M = torch.exp((e.unsqueeze(-1) - e.unsqueeze(-2)).masked_fill(~below, float("-inf"))).to(q.dtype)
    return M, e, c


def scores(q, k, log_g=None, beta=None):
    """The weight of v_tau in a_t from an empty state, (B, H, T, T): (q k^T * M), times (I + A)^{-1} diag(b)
    for delta."""
    M, _, _ = _decay(q, log_g)
    P = q @ k.mT * M
    if beta is None:
        return P
    A = (k @ k.mT) * M * beta.unsqueeze(-1).to(q.dtype)
    acc = torch.promote_types(q.dtype, torch.float32)
    eye_b = torch.diag_embed(beta.to(acc))
    return P @ torch.linalg.solve_triangular(A.to(acc), eye_b, upper=False, unitriangular=True).to(q.dtype)


def _block(q, k, v, log_g, beta, S):
    """a of one block (B, H, C, D) and the state after it, from the state S before it (None: zero)."""
    B, H, C, _ = q.shape
    v = v.expand(B, H, C, v.shape[-1])
    M, e, c = _decay(q, log_g)
    head = torch.exp(e).to(q.dtype).unsqueeze(-1)  # e^{e_i}, (B, H, C, 1)
    w = v
    if beta is not None:
        rhs = beta.unsqueeze(-1).to(q.dtype) * (v if S is None else v - head * (k @ S.to(q.dtype)))
        A = (k @ k.mT) * M * beta.unsqueeze(-1).to(q.dtype)
        acc = torch.promote_types(q.dtype, torch.float32)  # the solve in fp32 at least (no bf16 solver)
        w = torch.linalg.solve_triangular(A.to(acc), rhs.to(acc), upper=False, unitriangular=True).to(q.dtype)
    out = (q @ k.mT * M) @ w
    if S is not None:
        out = out + head * (q @ S.to(q.dtype))
    tail = torch.exp(c[..., -1:] - e).to(q.dtype).unsqueeze(-1)  # e^{c - e_j}
    after = k.mT @ (tail * w)
    if S is not None:
        after = after + torch.exp(c[..., -1]).view(B, H, 1, 1).to(S.dtype) * S
    return out, after


def parallel(q, k, v, *, log_g=None, beta=None, state=None, need_state=False):
    """The block formula over the whole sequence (shapes as `naive_state_rule`'s); (a (B, H, T, D), the state
    or None)."""
    out, after = _block(q, k, v, log_g, beta, state)
    return out, (after if need_state else None)


def chunked(q, k, v, *, chunk_size, log_g=None, beta=None, state=None, need_state=False):
    """The block formula inside chunks of ``chunk_size`` tokens, the state carried between them."""
    outs = []
    for s in range(0, q.shape[2], chunk_size):
        part = slice(s, s + chunk_size)
        lg = None if log_g is None else log_g[:, :, part]
        b = None if beta is None else beta[:, :, part]
        out, state = _block(q[:, :, part], k[:, :, part], v[:, :, part], lg, b, state)
        outs.append(out)
    return torch.cat(outs, dim=2), (state if need_state else None)


#: the forms by the attention mode they compute; token by token, the reference loop itself (the definition)
FORMS = {"parallel": parallel, "chunked": chunked, "recurrent": naive_state_rule}
