"""Fixed test sets per length, and accuracy with its binomial interval: what a length-generalisation test reads.

Sequence i of length L (gap G) comes from ``SeedSequence(seed, 0, TEST_STREAM, L, G + 1 or 0, i)``, apart from the
training batches'. `wilson_interval` is Wilson's (1927); positions of one sequence are not independent."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from bdh.errors import UserError

from .base import IGNORE_INDEX
from .common import check_seed, rng

#: the third key of a test sequence's seed: never the seed of a task's training or validation batch
TEST_STREAM = 7
#: the normal quantile of a two-sided 95 % interval
Z95 = 1.959963984540054


@runtime_checkable
class LengthTask(Protocol):
    """A task with ``generate(gen, n, length, gap)`` -> (inputs, targets) and ``test_gap(length)`` (None: no gap)."""

    def generate(self, gen: np.random.Generator, n: int, length: int, gap: int | None = None): ...

    def test_gap(self, length: int) -> int | None: ...


def fixed_test_set(
    task: LengthTask, length: int, *, n: int = 64, seed: int = 0, rows: Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``rows`` (default all) of the fixed ``length``-token test set: (inputs, targets), (len(rows),
    length) int64."""
    if not isinstance(task, LengthTask):
        raise UserError(f"task {getattr(task, 'name', task)!r} cannot make sequences of any length")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise UserError(f"test length must be a positive integer, got {length!r}")
    if n < 1:
        raise UserError(f"a test set needs at least one sequence, got n={n}")
    rows = range(n) if rows is None else rows
    if any(not 0 <= int(i) < n for i in rows):
        raise UserError(f"test set rows must be in [0, {n}), got {list(rows)!r}")
    gap = task.test_gap(int(length))
    code = 0 if gap is None else int(gap) + 1
    xs, ys = [], []
    for i in rows:
        x, y = task.generate(rng(check_seed(seed), 0, TEST_STREAM, int(length), code, int(i)), 1, int(length), gap)
        xs.append(x)
        ys.append(y)
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def answers(logits: torch.Tensor, targets: torch.Tensor) -> tuple[int, int]:
    """(right, scored): the scored positions of ``targets`` whose argmax of ``logits`` (..., V) is the target."""
    mask = targets != IGNORE_INDEX
    right = (logits.argmax(dim=-1) == targets) & mask
    return int(right.sum()), int(mask.sum())


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (low, high) of a proportion of ``k`` successes in ``n`` trials (module docstring)."""
    if n < 1 or not 0 <= k <= n:
        raise UserError(f"wilson_interval: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    # the interval holds p itself: at k = 0 or n its rounding could leave p a hair outside (1 - 2e-16 at 512 of 512)
    return max(0.0, min(p, (centre - half) / scale)), min(1.0, max(p, (centre + half) / scale))
