"""Sizing a model config to a parameter budget: the closest-width search and the protocol of ``for_budget``.

A model that ``bdh bench`` compares with BDH is sized to BDH's parameter count at each width of a sweep. The
knowledge of how to do that lives with the model's config class, as the classmethod `BudgetSized.for_budget`
(the bench reaches it through `bdh.registry.get_model(name).config_class`); most implement it with
`closest_by_params`, a search over one width field. This module knows nothing of the bench or of any model.
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
    ``start + step``, ... (``start`` defaults to ``step``) up to ``limit`` (None: no limit).

    The parameter count is taken to grow with d: the search stops at the first d above the budget, and of
    two equally close widths keeps the smaller. A one-line `UserError` when no width up to ``limit`` is built.
    """
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
        """The config whose ``num_params()`` is closest to ``params``, varying only its width.

        Args:
            params: the parameter budget (in the bench: BDH's count at the sweep's width).
            vocab_size, seq_len: the task's vocabulary and the longest sequence the model sees.
            n_layer: the depth (layers, blocks or iterations, as the model reads it).
            n_head: heads (a model without heads ignores it).
            causal: causal or bidirectional (a model with only one form refuses the other).
            extra: model-specific fields, passed to the config unchanged (e.g. Hyper-SET's ``time_freq``).
        """
        ...
