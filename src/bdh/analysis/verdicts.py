"""The verdict column of ``bdh inspect``'s short table: each row held against the paper's claim as ``holds``,
``partly``, ``not seen`` or ``-``. Each function takes the trained (``t``) and control (``c``) values and says how
it judges."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

HOLDS, PARTLY, NOT_SEEN, NONE = "holds", "partly", "not seen", "-"
#: the fit verdicts of `bdh.analysis.stats.fit_degrees` that call a tail heavier than an exponential's
HEAVY_FITS = ("power_law", "lognormal", "heavy_tailed")


def _numbers(values: Any) -> list[float]:
    """The finite numbers of a value or a list of them (None and NaN left out)."""
    items = values if isinstance(values, (list, tuple)) else [values]
    return [float(v) for v in items if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _share(flags: Sequence[bool]) -> str:
    """``holds`` when every flag is set, ``partly`` when some are, ``not seen`` when none is, ``-`` without flags."""
    if not flags:
        return NONE
    return HOLDS if all(flags) else PARTLY if any(flags) else NOT_SEEN


def about(t: Any, target: float) -> str:
    """A share "about ``target``" (the paper's ~5% active): per layer, within a factor of two of it."""
    return _share([target / 2 <= v <= target * 2 for v in _numbers(t)])


def positive(t: Any, c: Any = None) -> str:
    """A correlation the paper calls positive: per layer, above 0."""
    return _share([v > 0 for v in _numbers(t)])


def ratio_at(t: Any, layer: int, low: float) -> str:
    """Fact / repeat activity in ``layer``: ``holds`` at ``low`` or more, ``partly`` above 1, ``-`` without it."""
    values = t if isinstance(t, (list, tuple)) else []
    v = _numbers(values[layer : layer + 1])
    if not v:
        return NONE
    return HOLDS if v[0] >= low else PARTLY if v[0] > 1 else NOT_SEEN


def greater(t: Any, c: Any = None) -> str:
    """Two numbers ``[a, b]`` the paper orders a > b."""
    v = _numbers(t)
    return NONE if len(v) != 2 else HOLDS if v[0] > v[1] else NOT_SEEN


def above_control(t: Any, c: Any) -> str:
    """A statistic the paper finds beyond noise: the model's above its untrained control's."""
    v, w = _numbers(t), _numbers(c)
    return NONE if not v or not w else HOLDS if v[0] > w[0] else NOT_SEEN


def any_head(t: Any, c: Any = None) -> str:
    """The heads of a kind the paper finds one of (an inhibitory-looking G_x head): ``holds`` when there is one."""
    return NONE if t is None else HOLDS if isinstance(t, (list, tuple)) and t else NOT_SEEN


def gaps(t: Any, c: Any = None) -> str:
    """Modularity above the random graphs of the same size: both gaps (Q - Q_ER, Q - Q_lowrank) above 0."""
    return _share([v > 0 for v in _numbers(t)])


def heavy(cv: Any, reference: Any, fit: Any) -> str:
    """Heavy tails: ``holds`` when ``cv`` beats the ``reference``'s and ``fit`` is heavier than exponential, ``partly``
    for one."""
    v, w = _numbers(cv), _numbers(reference)
    if not v or not w:
        return NONE
    return _share([v[0] > w[0], str(fit) in HEAVY_FITS])


__all__ = [
    "HOLDS",
    "NONE",
    "NOT_SEEN",
    "PARTLY",
    "about",
    "above_control",
    "any_head",
    "gaps",
    "greater",
    "heavy",
    "positive",
    "ratio_at",
]
