"""Power-law fits of loss against parameters, L(N) = a (N / N0)^-b + c, and where two fitted curves cross
(paper section 4.2: "scaling laws for loss versus parameter count").

Fewer than four distinct sizes do not determine three parameters (``under-determined``, no numbers); a covariance
that is not finite, or an interval of b that reaches 0, is ``loose``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: N is measured in millions of parameters in the fit (a is then the excess loss at 1M parameters)
N0 = 1e6
MIN_SIZES = 4


@dataclass
class PowerLawFit:
    """A fit of L(N) = a (N / N0)^-b + c; ``ci`` maps each parameter to its (low, high) interval."""

    status: str
    note: str
    points: int
    sizes: int
    a: float = math.nan
    b: float = math.nan
    c: float = math.nan
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    level: float = 0.95

    @property
    def usable(self) -> bool:
        """Whether the fit is determined (``ok``): only then is it drawn, compared and crossed."""
        return self.status == "ok"

    def predict(self, n: Any) -> Any:
        return self.a * (np.asarray(n, dtype=float) / N0) ** (-self.b) + self.c

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """The parameters with their intervals, or why there are none (a loose fit's numbers are not shown:
        they are in ``to_dict``)."""
        if not self.usable:
            return f"not determined: {self.note}"
        return ", ".join(f"{k} = {getattr(self, k):.3g} [{lo:.3g}, {hi:.3g}]" for k, (lo, hi) in self.ci.items())


def _law(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a * (n / N0) ** (-b) + c


def fit_power_law(params: Sequence[float], losses: Sequence[float], level: float = 0.95) -> PowerLawFit:
    """Fit L(N) = a (N / N0)^-b + c to (parameters, loss) points (several seeds per size are separate points;
    non-finite losses are left out)."""
    from scipy import stats
    from scipy.optimize import curve_fit

    pts = [(float(n), float(v)) for n, v in zip(params, losses, strict=True) if math.isfinite(v)]
    n = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    sizes = len(set(n.tolist()))
    if sizes < MIN_SIZES:
        note = f"under-determined: 3 parameters need at least {MIN_SIZES} sizes, got {sizes}"
        return PowerLawFit("under-determined", note, len(pts), sizes, level=level)
    p0 = [max(float(y.max() - y.min()), 1e-3), 0.3, max(float(y.min()) * 0.9, 0.0)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            popt, pcov = curve_fit(_law, n, y, p0=p0, bounds=([0, 0, 0], [np.inf, 5, np.inf]), maxfev=20000)
    except (RuntimeError, ValueError) as e:
        return PowerLawFit("failed", f"the fit did not converge ({e})", len(pts), sizes, level=level)
    a, b, c = (float(v) for v in popt)
    dof = len(pts) - 3
    sd = np.sqrt(np.diag(pcov)) if np.all(np.isfinite(pcov)) else np.full(3, np.inf)
    if dof < 1 or not np.all(np.isfinite(sd)):
        return PowerLawFit("loose", "covariance not estimable: no interval", len(pts), sizes, a, b, c, level=level)
    t = float(stats.t.ppf(0.5 + level / 2, dof))
    ci = {k: (v - t * s, v + t * s) for k, v, s in zip("abc", (a, b, c), sd, strict=True)}
    status, note = "ok", f"{int(level * 100)}% intervals from the covariance, {dof} degrees of freedom"
    if ci["b"][0] <= 0:
        status, note = "loose", "the interval of the exponent b reaches 0: the points do not determine it"
    return PowerLawFit(status, note, len(pts), sizes, a, b, c, ci, level)


def crossovers(first: PowerLawFit, second: PowerLawFit, lo: float, hi: float) -> list[float]:
    """The parameter counts in [lo, hi] where the two fitted curves cross (none unless both are usable)."""
    from scipy.optimize import brentq

    if not (first.usable and second.usable) or not 0 < lo < hi:
        return []
    grid = np.geomspace(lo, hi, 400)
    diff = first.predict(grid) - second.predict(grid)
    out = []
    for i in np.nonzero(np.sign(diff[:-1]) * np.sign(diff[1:]) < 0)[0]:
        out.append(float(brentq(lambda x: float(first.predict(x) - second.predict(x)), grid[i], grid[i + 1])))
    return out
