"""The delta rule's write keys before their unit norm (ours; docs/model.md, "Write keys"): BDH reads with its
positive keys R x_t and the delta rule writes S += b_t k_t (v_t - S^T k_t)^T with unit keys k_t = x_t / |x_t|
(`bdh.model.state_rules`). Two options shape k_t first, for every form at once (the forms take the keys as given):

* ``write_keys: centred`` -- k_t - mean(k_t) over the head's neurons: signed keys, whose overlaps (q . k) between
  unrelated positive keys average 0 instead of about 1/pi for rectified ones.
* ``write_topk: m`` -- the m largest neurons of k_t kept, the rest 0: a write corrects only those m rows of S
  (m = 1: the one-hot of the key's neuron, the read-time probe of docs/long-context.md, trained so).

The reference is `bdh.model.kernels.naive.naive_write_key`, applied token by token in `naive_state_rule`."""

from __future__ import annotations

import torch


def shape_write_keys(k: torch.Tensor, *, centred: bool = False, topk: int | None = None) -> torch.Tensor:
    """Keys (..., N) centred over their neurons and/or cut to their ``topk`` largest (gradients through the kept
    entries only); ``k`` itself when neither is asked."""
    if centred:
        k = k - k.mean(dim=-1, keepdim=True)
    if topk is not None:
        top = k.topk(topk, dim=-1)
        k = torch.zeros_like(k).scatter(-1, top.indices, top.values)
    return k
