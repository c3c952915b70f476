"""The error the training engine raises when a run cannot go on (apart, so any module of `bdh.train` can raise it)."""

from __future__ import annotations

from bdh.errors import UserError


class TrainingError(UserError):
    """Training cannot go on (NaN loss, a batch that does not fit, a task and model that do not match)."""


__all__ = ["TrainingError"]
