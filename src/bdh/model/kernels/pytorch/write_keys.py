"""The delta rule's write keys before their unit norm (ours; docs/model.md, "Write keys"), shaped once for every form: S
+= b_t k_t (v_t - S^T k_t)^T with k_t = x_t / |x_t|, and first

* ``write_keys: centred``: k_t - mean(k_t) over the head's neurons (unrelated keys overlap 0 on average, not
about 1/pi);
* ``write_topk: m``: the m largest neurons of k_t kept (m = 1: the one-hot of the key's neuron), in the heads of
  ``write_topk_heads`` only where it is set.

The reference is `naive_write_key`."""

from __future__ import annotations

import torch


def shape_write_keys(
    k: torch.Tensor, *, centred: bool = False, topk: int | None = None, heads: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Keys (B, H, T, N) centred and/or cut to their ``topk`` largest (gradients through the kept entries) in the
    heads ``heads`` (None: every head); else ``k``."""
    if centred:
        k = k - k.mean(dim=-1, keepdim=True)
    if topk is not None:
        top = k.topk(topk, dim=-1)
        cut = torch.zeros_like(k).scatter(-1, top.indices, top.values)
        k = cut if heads is None else torch.where(head_mask(k, heads), cut, k)
    return k


def head_mask(k: torch.Tensor, heads: tuple[int, ...]) -> torch.Tensor:
    """(H, 1, 1) True at ``heads`` of keys (..., H, T, N)."""
    mask = torch.zeros(k.shape[-3], 1, 1, dtype=torch.bool, device=k.device)
    mask[list(heads)] = True
    return mask
