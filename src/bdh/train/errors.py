"""The error the training engine raises when a run cannot go on (kept apart so that every module of
`bdh.train` can raise it without importing the trainer)."""

from __future__ import annotations

from bdh.errors import UserError


class TrainingError(UserError):
    """Training cannot go on (NaN loss, a batch that does not fit, a task and model that do not match)."""


__all__ = ["TrainingError"]
