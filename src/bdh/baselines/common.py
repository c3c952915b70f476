"""Pieces shared by the baseline models: the model-config mixin and the parameter count helper."""

from __future__ import annotations

from torch import nn

from ..model.tokens import check_tokens
from ..model_api import ModelConfig

__all__ = ["ModelConfig", "check_tokens", "count_params", "normal_init"]


def count_params(module: nn.Module) -> int:
    """Trainable parameters of a module (shared tensors counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def normal_init(m: nn.Module) -> None:
    """GPT-2's and Zoology's init of one module: linear and embedding weights N(0, 0.02), linear biases 0."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)
