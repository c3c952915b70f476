"""Pieces shared by the baseline models: the typed-config mixin and the parameter count helper.

Every baseline config is a dataclass with `ModelConfig` mixed in: ``to_dict`` / ``from_dict`` (refusing
unknown keys) as `PretrainedMixin` needs, and checks that raise one-line
``ValueError("GPTConfig.n_head: ...")``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn


class ModelConfig:
    """Mixin for model config dataclasses: validation helpers and dict round trip."""

    def _fail(self, field: str, message: str) -> None:
        raise ValueError(f"{type(self).__name__}.{field}: {message}")

    def _check_int(self, field: str, minimum: int = 1) -> None:
        value = getattr(self, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self._fail(field, f"must be an integer >= {minimum}, got {value!r}")

    def _check_bool(self, field: str) -> None:
        if not isinstance(getattr(self, field), bool):
            self._fail(field, f"must be true or false, got {getattr(self, field)!r}")

    def _check_number(self, field: str, low: float, high: float, *, low_open: bool = False, high_open: bool = True) -> None:
        value = getattr(self, field)
        bad = isinstance(value, bool) or not isinstance(value, (int, float))
        if not bad:
            bad = value < low or value > high or (low_open and value == low) or (high_open and value == high)
        if bad:
            lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
            self._fail(field, f"must be a number in {lo}{low}, {high}{hi}, got {value!r}")

    def _check_choice(self, field: str, choices: tuple[str, ...]) -> None:
        if getattr(self, field) not in choices:
            self._fail(field, f"must be one of {', '.join(choices)}; got {getattr(self, field)!r}")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: expected a mapping of fields, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")
        return cls(**data)

    def replace(self, **changes: Any):
        """A copy with some fields changed (validated again)."""
        data = self.to_dict()
        data.update(changes)
        return type(self).from_dict(data)


def count_params(module: nn.Module) -> int:
    """Trainable parameters of a module (shared tensors counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def check_tokens(name: str, idx, vocab_size: int, seq_len: int | None) -> None:
    """One-line errors for token batches a model cannot read."""
    import torch

    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise ValueError(f"{name}: tokens must be a (batch, time) tensor, got {getattr(idx, 'shape', type(idx).__name__)}")
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise ValueError(f"{name}: tokens must be integers, got {idx.dtype}")
    if idx.shape[1] == 0:
        raise ValueError(f"{name}: got an empty sequence (T = 0)")
    if seq_len is not None and idx.shape[1] > seq_len:
        raise ValueError(f"{name}: sequence of {idx.shape[1]} tokens is longer than seq_len = {seq_len}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size}), got {int(idx.min())}..{int(idx.max())}")
