"""Small model builders shared by the model tests."""

from __future__ import annotations

import torch

from bdh import BDH, BDHConfig


def tiny_config(**overrides) -> BDHConfig:
    fields = dict(n_layer=2, n_embd=16, n_head=2, n_neurons=64, dropout=0.0, chunk_size=5)
    fields.update(overrides)
    return BDHConfig(**fields)


def tiny_model(seed: int = 0, **overrides) -> BDH:
    torch.manual_seed(seed)
    return BDH(tiny_config(**overrides)).eval()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (0 when both vanish)."""
    denom = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff if denom == 0 else diff / denom
