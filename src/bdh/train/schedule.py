"""The learning-rate schedule (paper appendix B.2): linear warmup, then linear or cosine decay to a floor; a pure
function of the step, so a resumed run needs no scheduler state.
"""

from __future__ import annotations

import math

from bdh.errors import UserError


def learning_rate(
    step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int, decay: str = "linear"
) -> float:
    """The learning rate of optimiser step ``step`` (0-based) of ``total_steps``.

    Steps ``0 .. warmup_steps - 1`` ramp linearly up to ``lr`` (step 0 uses ``lr / warmup_steps``, never 0);
    then ``linear`` or ``cosine`` decay reaches ``min_lr`` at the last step; ``constant`` stays at ``lr``.
    """
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
