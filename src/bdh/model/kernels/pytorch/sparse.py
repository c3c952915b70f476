"""A recurrent step that touches only the neurons that fire (inference, one sequence, one token).

With a fraction f of active neurons (section 6.4), the state read a = q^T S, the write S += k v^T and E y touch only the
non-zero rows, so the state traffic drops by about 1 / f; same values as the dense kernels. A head denser than `DENSITY`
goes dense."""

from __future__ import annotations

import torch

from bdh.errors import UserError

#: a head's share of non-zero rotated x above which the dense read and write are used instead
DENSITY = 0.3


def sparse_attention(q: torch.Tensor, v: torch.Tensor, S: torch.Tensor, k: torch.Tensor | None = None) -> torch.Tensor:
    """a = q^T S, then S += k v^T in place, on the rows where q (read) and k (write) are non-zero.

    q, k: (1, H, 1, N) (k defaults to q; ``separate_keys`` has its own); v: (1, 1, 1, D); S: (1, H, N, D). Returns a (1,
    H, 1, D)."""
    if q.shape[0] != 1 or q.shape[2] != 1:
        raise UserError(
            f"BDH: mode 'sparse' runs one token of one sequence in place, got (B, T) = {q.shape[0], q.shape[2]}"
        )
    H, D = q.shape[1], v.shape[-1]
    qh, vv, Sh = q[0, :, 0], v.reshape(D), S[0]
    kh = qh if k is None else k[0, :, 0]
    if float((qh != 0).sum() + (kh != 0).sum()) > 2 * DENSITY * qh.numel():
        a = torch.bmm(qh.unsqueeze(1), Sh)  # H, 1, D
        Sh.add_(kh.unsqueeze(-1) * vv.view(1, 1, D))
        return a.view(1, H, 1, D)
    a = q.new_zeros(H, D)
    for h in range(H):
        rows = torch.nonzero(qh[h], as_tuple=True)[0]
        if rows.numel():
            a[h] = qh[h, rows] @ Sh[h, rows]
        rows = torch.nonzero(kh[h], as_tuple=True)[0]  # after the read: a_t sees only earlier tokens
        if rows.numel():
            Sh[h, rows] += kh[h, rows].unsqueeze(-1) * vv.view(1, D)
    return a.view(1, H, 1, D)


def sparse_read_in(y: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """E y for one token, y (1, H, 1, N), from the rows of E (n x D) where y is non-zero. Returns (1, 1, 1, D)."""
    flat = y[0, :, 0].reshape(-1)  # n, neuron j of head h at h * N + j
    active = torch.nonzero(flat, as_tuple=True)[0]
    return (flat[active] @ E[active]).view(1, 1, 1, -1)
