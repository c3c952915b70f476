"""The learning-rate schedule (paper appendix B.2), a pure function of the step (no scheduler state to resume)."""

from __future__ import annotations

import math

from bdh.errors import UserError


def learning_rate(
    step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int, decay: str = "linear"
) -> float:
    """The learning rate of step ``step`` (0-based): linear warmup from ``lr / warmup_steps``, then ``linear`` or
    ``cosine`` decay to ``min_lr`` at the last step, or ``constant``."""
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if decay == "constant":
        return lr
    span = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    if decay == "linear":
        return lr + (min_lr - lr) * progress
    if decay == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))
    raise UserError(f"optim.decay: unknown schedule {decay!r}; use linear, cosine or constant")
