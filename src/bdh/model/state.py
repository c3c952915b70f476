"""The recurrent state of BDH-GPU: one attention state rho per layer and head (paper Eq. 8).

Per layer and head, S = sum_tau u^(t-tau) (R_tau x_tau) v_tau^T, N x D (the transpose of rho on the head's neurons; keys
rotated by absolute position): L * n * D scalars whatever the context."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdh.errors import UserError


@dataclass
class BDHState:
    """Recurrent state of a batch of sequences."""

    rho: torch.Tensor  # (L, B, H, N, D) attention state of every layer.
    pos: int = 0  # number of tokens consumed so far (the absolute position of the next token, used by RoPE).

    @classmethod
    def zeros(
        cls, n_layer: int, batch_size: int, n_head: int, N: int, D: int, *, device=None, dtype=torch.float32
    ) -> BDHState:
        if batch_size < 1:
            raise UserError(f"BDHState: batch_size must be a positive integer, got {batch_size}")
        return cls(torch.zeros(n_layer, batch_size, n_head, N, D, device=device, dtype=dtype), 0)

    @property
    def batch_size(self) -> int:
        return self.rho.shape[1]

    def detach(self) -> BDHState:
        """The same state cut from the autograd graph (truncated backprop through time)."""
        return BDHState(self.rho.detach(), self.pos)

    def to(self, *args, **kwargs) -> BDHState:
        return BDHState(self.rho.to(*args, **kwargs), self.pos)

    def clone(self) -> BDHState:
        return BDHState(self.rho.clone(), self.pos)

    def nbytes(self) -> int:
        return self.rho.numel() * self.rho.element_size()
