"""Causal linear attention with the second-order Taylor feature map (Based: Arora et al. 2024, section 3.1, eq. 2-3).

    phi(x) = [1, x / f^(1/4), (x_i x_j c_ij)_{i <= j}],  so  phi(q) . phi(k) = 1 + q.k / sqrt(f) + (q.k)^2 / (2 f)
    y_t = sum_{s<=t} (phi(q_t) . phi(k_s)) v_s / sum_{s<=t} phi(q_t) . phi(k_s)                            (eq. 2)

The kernel is >= 1/2, so the normaliser never vanishes; both forms run in fp32 at least."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def expanded_size(f: int) -> int:
    """E = 1 + f + f (f + 1) / 2, the size of phi(x) for x in R^f."""
    return 1 + f + f * (f + 1) // 2


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """phi(x) (..., f) -> (..., E) (module docstring)."""
    f = x.shape[-1]
    i, j = torch.triu_indices(f, f, device=x.device)
    coef = torch.full(i.shape, 1 / math.sqrt(f), dtype=x.dtype, device=x.device)  # in x's precision (fp64 tests)
    coef[i == j] = 1 / math.sqrt(2 * f)
    return torch.cat([torch.ones_like(x[..., :1]), x / f**0.25, x[..., i] * x[..., j] * coef], dim=-1)


def _wide(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    dtype = torch.promote_types(xs[0].dtype, torch.float32)
    return tuple(x.to(dtype) for x in xs)


def _prefix_sums(x: torch.Tensor) -> torch.Tensor:
    """0, x_0, x_0 + x_1, ... along dimension 2: from the sums of chunks 0..n-2, the sums before each of n chunks."""
    return F.pad(x.cumsum(2), (0, 0) * (x.dim() - 3) + (1, 0))


def linear_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The quadratic form (module docstring). q, k: (B, H, T, f); v: (B, H, T, d_v) -> (B, H, T, d_v)."""
    out_dtype = v.dtype
    q, k, v = _wide(q, k, v)
    T = q.shape[-2]
    a = taylor_features(q) @ taylor_features(k).transpose(-1, -2)
    a = a * torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return ((a @ v) / a.sum(-1, keepdim=True)).to(out_dtype)


#: the sums carried between chunks: S = sum_s phi(k_s)^T v_s (B, H, E, d_v) and z = sum_s phi(k_s) (B, H, E)
Sums = tuple[torch.Tensor, torch.Tensor]


def linear_attention_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunk: int,
    state: Sums | None = None,
    *,
    final: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, Sums]:
    """The chunked recurrent form of `linear_attention_reference`, any T; ``state``: the sums (S, z) before (None:
    none); with ``final``, (y, the sums after)."""
    out_dtype = v.dtype
    q, k, v = _wide(q, k, v)
    if state is not None:
        state = _wide(*state)
    B, H, T, _ = q.shape
    chunk = min(chunk, T)  # no padding beyond the sequence
    pad = -T % chunk
    n = (T + pad) // chunk
    if pad:  # zeros after the end: causal masking keeps them out of every real row; phi(0) keeps A 1 > 0 there
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    fq, fk = taylor_features(q), taylor_features(k)
    fq, fk, v = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (fq, fk, v))
    a = (fq @ fk.transpose(-1, -2)) * torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    num, den = a @ v, a.sum(-1, keepdim=True)  # within the chunk
    if n > 1:  # plus the sums over the chunks before (the last chunk's own sums are never needed)
        kv = fk[:, :, :-1].transpose(-1, -2) @ v[:, :, :-1]  # (B, H, n-1, E, d_v): sum of phi(k)^T v per chunk
        z = fk[:, :, :-1].sum(-2, keepdim=True).transpose(-1, -2)  # (B, H, n-1, E, 1)
        num = num + fq @ _prefix_sums(kv)
        den = den + fq @ _prefix_sums(z)
    if state is not None:  # the sums before the first token, seen by every row
        num = num + fq @ state[0][:, :, None]
        den = den + fq @ state[1][:, :, None, :, None]
    y = (num / den).reshape(B, H, n * chunk, -1)[:, :, :T].to(out_dtype)
    if not final:
        return y
    fk, v = fk.reshape(B, H, n * chunk, -1)[:, :, :T], v.reshape(B, H, n * chunk, -1)[:, :, :T]  # no padding
    S, z = fk.transpose(-1, -2) @ v, fk.sum(-2)
    if state is not None:
        S, z = state[0] + S, state[1] + z
    return y, (S, z)
