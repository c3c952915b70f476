"""Pieces shared by the baseline models: the typed-config mixin and the parameter count helper.

Every baseline config is a dataclass with `ModelConfig` mixed in: ``to_dict`` / ``from_dict`` (refusing
unknown keys) as `PretrainedMixin` needs, and checks that raise one-line
``ValueError("GPTConfig.n_head: ...")``.
"""

from __future__ import annotations

from torch import nn

from bdh.errors import UserError

from ..typed_config import TypedConfig

#: every baseline config mixes in the package's typed-config base
ModelConfig = TypedConfig


def count_params(module: nn.Module) -> int:
    """Trainable parameters of a module (shared tensors counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def check_tokens(name: str, idx, vocab_size: int, seq_len: int | None) -> None:
    """One-line errors for token batches a model cannot read."""
    import torch

    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise UserError(f"{name}: tokens must be a (batch, time) tensor, got {getattr(idx, 'shape', type(idx).__name__)}")
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise UserError(f"{name}: tokens must be integers, got {idx.dtype}")
    if idx.shape[1] == 0:
        raise UserError(f"{name}: got an empty sequence (T = 0)")
    if seq_len is not None and idx.shape[1] > seq_len:
        raise UserError(f"{name}: sequence of {idx.shape[1]} tokens is longer than seq_len = {seq_len}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise UserError(f"{name}: token ids must lie in [0, {vocab_size}), got {int(idx.min())}..{int(idx.max())}")
