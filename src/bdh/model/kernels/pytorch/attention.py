"""BDH's linear attention in three interchangeable forms (paper Eq. 4 and Eq. 8).

For one head, with queries q_t = keys k_t (the rotated x), values v_tau and an optional retention u (U's damping):

    a_t = sum_{tau < t} u^(t - tau) (q_t . k_tau) v_tau                                   (Eq. 4)
    a_t = q_t^T S_{t-1},        S_t = u (S_{t-1} + k_t v_t^T),        S_{-1} = 0          (Eq. 8; S = rho^T, N x D)

No softmax, scaling or normaliser; strictly causal. Each form starts from a carried state S0 and returns the
state after:

* ``parallel``: the masked T x T form, O(T^2 N) per head (the official code's);
* ``chunked``: the parallel form in chunks of C tokens, the state carried between them (training: `chunked_lean`);
* ``recurrent``: token by token, O(N D) per token (generation).

``causal=False`` (parallel only) attends over the whole block, damped by u^|t - tau|; ``mask`` (T, T) keeps the pairs a
query may read (ours: a board's peers, `BDHConfig.attend`)."""

from __future__ import annotations

import torch

from bdh.errors import UserError


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: torch.Tensor | None) -> None:
    if q.dim() != 4 or k.shape != q.shape:
        raise UserError(
            f"linear attention: q and k must both be (B, H, T, N), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    B, H, T, N = q.shape
    if v.dim() != 4 or v.shape[0] != B or v.shape[2] != T or v.shape[1] not in (1, H):
        raise UserError(
            f"linear attention: v must be (B, 1 or H, T, D) matching q {tuple(q.shape)}, got {tuple(v.shape)}"
        )
    if state is not None and (state.dim() != 4 or state.shape[:3] != (B, H, N) or state.shape[3] != v.shape[3]):
        raise UserError(
            f"linear attention: state must be (B, H, N, D) = {(B, H, N, v.shape[3])}, got {tuple(state.shape)}"
        )


def decay_matrix(log_u: torch.Tensor, T: int, causal: bool = True) -> torch.Tensor:
    """Weights u^(t - tau) on the strictly lower triangle (causal) or u^|t - tau| everywhere, (H, T, T)."""
    t = torch.arange(T, device=log_u.device)
    gap = (t.view(-1, 1) - t.view(1, -1)).to(log_u.dtype)
    if causal:
        w = torch.exp(log_u.view(-1, 1, 1) * gap.clamp(min=0))
        return w * (gap > 0).to(w.dtype)
    return torch.exp(log_u.view(-1, 1, 1) * gap.abs())


def causal_weights(
    log_u: torch.Tensor | None, T: int, causal: bool, device, dtype, mask: torch.Tensor | None = None
) -> torch.Tensor | None:
    """The weights W of the T x T scores: the strict lower triangle (damped by ``log_u``), u^|t - tau| bidirectional, or
    None; zero outside ``mask``."""
    if log_u is not None:
        W = decay_matrix(log_u, T, causal).to(dtype)
    elif causal:
        W = torch.ones(T, T, device=device, dtype=dtype).tril_(-1).unsqueeze(0)
    else:
        W = None
    if mask is None:
        return W
    allowed = mask.to(device=device, dtype=dtype).unsqueeze(0)
    return allowed if W is None else W * allowed


def scores(
    q: torch.Tensor,
    k: torch.Tensor,
    log_u: torch.Tensor | None = None,
    causal: bool = True,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The scores (B, H, T, T): u^(t - tau) (q_t . k_tau) strictly below the diagonal (Eq. 4), zero outside ``mask``."""
    s = q @ k.mT
    if log_u is None:
        s = s.tril(diagonal=-1) if causal else s
    else:
        s = s * decay_matrix(log_u, q.shape[2], causal).to(s.dtype)
    return s if mask is None else s.masked_fill(~mask, 0)


def _block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_u: torch.Tensor | None,
    state: torch.Tensor | None,
    need_state: bool,
    causal: bool,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Parallel form on one block, optionally starting from and returning a carried state."""
    T = q.shape[2]
    out = scores(q, k, log_u, causal, mask) @ v
    if state is not None:
        # a_t += u^t q_t^T S0 for local t = 0 .. T-1 (S0 is the state after the previous token)
        if log_u is None:
            out = out + q @ state.to(q.dtype)
        else:
            w = torch.exp(log_u.view(-1, 1, 1) * torch.arange(T, device=q.device, dtype=log_u.dtype).view(1, -1, 1))
            out = out + w.to(q.dtype) * (q @ state.to(q.dtype))  # w per (head, t): scale the D-wide product
    new_state = None
    if need_state:
        if log_u is None:
            kv = k.mT @ v  # B, H, N, D
            new_state = kv if state is None else state + kv
        else:
            # S_T = u^T S0 + sum_j u^(T - j) k_j v_j^T
            j = torch.arange(T, device=q.device, dtype=log_u.dtype)
            w = torch.exp(log_u.view(-1, 1) * (T - j).view(1, -1))  # H, T
            new_state = k.mT @ (v * w.view(1, -1, T, 1).to(v.dtype))  # the weight on v (D wide), not k (N wide)
            if state is not None:
                new_state = new_state + state * torch.exp(log_u * T).view(1, -1, 1, 1).to(state.dtype)
    return out, new_state


def parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    log_u: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    need_state: bool = False,
    causal: bool = True,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quadratic masked form: (a (B, H, T, D), the state after or None); ``mask`` (T, T, bool): bidirectional only."""
    _check(q, k, v, state)
    if not causal and (state is not None or need_state):
        raise UserError("linear attention: bidirectional attention has no recurrent state")
    T = q.shape[2]
    if mask is not None and (causal or mask.shape != (T, T) or mask.dtype != torch.bool):
        raise UserError(f"linear attention: a mask is a ({T}, {T}) bool tensor of bidirectional attention")
    return _block(q, k, v, log_u, state, need_state, causal, mask)


def chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int,
    log_u: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    need_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked form: parallel inside chunks of ``chunk_size`` tokens, the state carried between them."""
    _check(q, k, v, state)
    T = q.shape[2]
    outs = []
    for s in range(0, T, chunk_size):
        e = min(s + chunk_size, T)
        last = e == T
        out, state = _block(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], log_u, state, need_state or not last, True)
        outs.append(out)
    return torch.cat(outs, dim=2), (state if need_state else None)


def recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    log_u: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    need_state: bool = False,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Recurrent form (Eq. 8): a_t = q_t^T S, then S = u (S + k_t v_t^T), token by token; ``inplace``:
    update ``state``."""
    _check(q, k, v, state)
    B, H, T, N = q.shape
    D = v.shape[3]
    if inplace and (state is None or torch.is_grad_enabled()):
        raise UserError("linear attention: an in-place update needs a state tensor and torch.no_grad()")
    S = state if state is not None else q.new_zeros(B, H, N, D)
    u = None if log_u is None else torch.exp(log_u).view(1, H, 1, 1)
    outs = []
    for t in range(T):
        qt = q[:, :, t : t + 1]  # B, H, 1, N
        outs.append(qt @ S.to(q.dtype))
        if inplace:
            _add_outer_(S, k[:, :, t : t + 1], v[:, :, t : t + 1])
            if u is not None:
                S.mul_(u.to(S.dtype))
        else:
            S = S + k[:, :, t : t + 1].mT @ v[:, :, t : t + 1]  # B, H, N, D
            if u is not None:
                S = S * u.to(S.dtype)
    out = outs[0] if T == 1 else torch.cat(outs, dim=2)
    return out, (S if need_state else None)


def _add_outer_(S: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """S += k^T v in place, S (B, H, N, D), k (B, H, 1, N), v (B, 1 or H, 1, D), without a (B, H, N, D) temporary."""
    B, H, N, D = S.shape
    if not S.is_contiguous():
        S.add_(k.mT @ v)
        return
    kk = k.reshape(B * H, N, 1).to(S.dtype)
    vv = v.expand(B, H, 1, D).reshape(B * H, 1, D).to(S.dtype)
    S.view(B * H, N, D).baddbmm_(kk, vv)
