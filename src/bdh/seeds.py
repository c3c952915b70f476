"""Scores over seeds: their means, their table cell (`spread_cell`), and the one rule that says when one set is
better than another beyond the spread of the seeds (`beyond_seeds`). Every verdict of ``bdh bench`` and
``bdh experiment`` calls it."""

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
    """A score as a number that is larger when it is better: the value itself when higher is better, its
    negative when lower is (a loss); a missing, non-numeric or NaN value is -inf, the worst, either way. Only for
    comparing: every table and file keeps the values as measured."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return -math.inf
    if not math.isfinite(f):
        return -math.inf
    return f if higher_is_better else -f


def beyond_seeds(a: Sequence[Any], b: Sequence[Any], higher_is_better: bool) -> bool:
    """Whether ``a`` is better than ``b`` beyond the seed spread: both have two seeds or more and the ranges do not
    overlap (``a``'s worst seed is better than ``b``'s best; a missing or non-finite score is the worst)."""
    if len(a) < 2 or len(b) < 2:
        return False
    return min(goodness(x, higher_is_better) for x in a) > max(goodness(x, higher_is_better) for x in b)


def spread_cell(mean: float, lo: float | None, hi: float | None, seeds: int) -> str:
    """A table cell of a score over seeds: ``mean (min–max)``, three decimals; the mean alone for one seed (or no
    range)."""
    return f"{mean:.3f}" if seeds < 2 else f"{mean:.3f} ({lo:.3f}–{hi:.3f})"
