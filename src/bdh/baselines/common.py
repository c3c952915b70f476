"""Pieces shared by the baseline models: the typed-config mixin and the parameter count helper.

Every baseline config is a dataclass with `ModelConfig` mixed in: ``to_dict`` / ``from_dict`` (refusing
unknown keys) as `PretrainedMixin` needs, ranges declared on the fields (`bdh.typed_config.bounded`,
`bdh.typed_config.one_of`) and checks, all raising one-line ``ValueError("GPTConfig.n_head: ...")``.
"""

from __future__ import annotations

from torch import nn

from ..model.tokens import check_tokens
from ..typed_config import TypedConfig

#: every baseline config mixes in the package's typed-config base
ModelConfig = TypedConfig

__all__ = ["ModelConfig", "check_tokens", "count_params"]


def count_params(module: nn.Module) -> int:
    """Trainable parameters of a module (shared tensors counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
