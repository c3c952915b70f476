"""The one check of token batches (BDH and baselines): one line for a non-(B, T) integer, empty, long or
bad-id batch."""

from __future__ import annotations

import torch

from bdh.errors import UserError


def check_tokens(name: str, idx: object, vocab_size: int, seq_len: int | None = None) -> None:
    """Raise `bdh.errors.UserError` naming ``name`` unless ``idx`` is a (B, T) integer tensor of ids in [0, V)."""
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        got = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise UserError(f"{name}: tokens must be a (batch, time) tensor, got {got}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise UserError(f"{name}: tokens must be integers, got {idx.dtype}")
    if idx.shape[1] == 0:
        raise UserError(f"{name}: got an empty sequence (T = 0)")
    if seq_len is not None and idx.shape[1] > seq_len:
        raise UserError(f"{name}: sequence of {idx.shape[1]} tokens is longer than seq_len = {seq_len}")
    if idx.numel():
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise UserError(f"{name}: token {bad} is outside the vocabulary [0, {vocab_size})")
