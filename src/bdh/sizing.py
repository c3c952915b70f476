"""Sizing a model config to a parameter budget: the protocol `BudgetSized.for_budget` and the
search `closest_by_params`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from bdh.errors import UserError

C = TypeVar("C")


def closest_by_params(
    budget: int, make: Callable[[int], C], step: int, start: int | None = None, limit: int | None = 4096
) -> C:
    """The ``make(d)`` with ``num_params()`` closest to ``budget``, d = ``start``, ``start + step``, ... up to ``limit``
    (the count taken to grow with d; the smaller of two ties)."""
    best, err = None, math.inf
    d = start or step
    while limit is None or d <= limit:
        cfg = make(d)
        n = cfg.num_params()  # type: ignore[attr-defined]
        if abs(n - budget) < err:
            best, err = cfg, abs(n - budget)
        if n > budget:
            break
        d += step
    if best is None:
        raise UserError(f"no width fits a budget of {budget} parameters")
    return best


class BudgetSized(Protocol):
    """A model config class that can be built to a parameter budget (what ``bdh bench`` needs of a model)."""

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> Any:
        """The config with ``num_params()`` closest to ``params``, varying only its width; ``extra``:
        model-specific fields."""
        ...
