"""Scores over seeds: means, the table cell (`spread_cell`), and the one "better beyond the seeds"
rule (`beyond_seeds`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def mean(values: Sequence[float]) -> float:
    """The mean, NaN for no values (a NaN value makes it NaN)."""
    return sum(values) / len(values) if values else math.nan


def finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite values (a diverged seed left out), NaN when none is."""
    return mean([v for v in values if math.isfinite(v)])


def goodness(v: Any, higher_is_better: bool = True) -> float:
    """A score as a number larger when better (a loss negated); missing, non-numeric or NaN is -inf. For
    comparing only."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return -math.inf
    if not math.isfinite(f):
        return -math.inf
    return f if higher_is_better else -f


def beyond_seeds(a: Sequence[Any], b: Sequence[Any], higher_is_better: bool) -> bool:
    """Whether ``a`` beats ``b`` beyond the seeds: two seeds or more each, ``a``'s worst better than ``b``'s best."""
    if len(a) < 2 or len(b) < 2:
        return False
    return min(goodness(x, higher_is_better) for x in a) > max(goodness(x, higher_is_better) for x in b)


def spread_cell(mean: float, lo: float | None, hi: float | None, seeds: int) -> str:
    """A table cell ``mean (min–max)`` with three decimals; the mean alone for one seed."""
    return f"{mean:.3f}" if seeds < 2 else f"{mean:.3f} ({lo:.3f}–{hi:.3f})"
