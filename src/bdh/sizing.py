"""Sizing a model config to a parameter budget (``bdh bench`` matches BDH's count at each width): the protocol
`BudgetSized.for_budget`, implemented by each model's config class, and `closest_by_params`, a search over one
width field that most of them use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from bdh.errors import UserError

C = TypeVar("C")


def closest_by_params(
    budget: int, make: Callable[[int], C], step: int, start: int | None = None, limit: int | None = 4096
) -> C:
    """The config ``make(d)`` whose ``num_params()`` is closest to ``budget``, d running over ``start``,
    ``start + step``, ... (``start`` defaults to ``step``) up to ``limit`` (None: no limit). The count is taken
    to grow with d (the search stops above the budget); of two equally close widths the smaller is kept."""
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
        """The config whose ``num_params()`` is closest to ``params``, varying only its width. ``n_layer``: the
        depth as the model reads it; ``n_head`` ignored by a model without heads; a model with one form refuses the
        other ``causal``; ``extra``: model-specific fields, passed on (Hyper-SET's ``time_freq``)."""
        ...
