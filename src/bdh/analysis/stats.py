"""Statistics of the neuron-graph analyses: the symmetric/skew split (Fig. 9a), a robust noise scale, heavy-tailed
degree fits (Figs. 10, 11; Clauset, Shalizi, Newman 2009, with Vuong's test), and `above_chance`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, special

from bdh.errors import UserError
from bdh.tasks.lengths import wilson_interval


def above_chance(right: int, n: int, chance: float) -> bool:
    """Whether ``right`` of ``n`` is above ``chance``: the Wilson 95% interval lies above it (a measured chance:
    its top)."""
    return wilson_interval(right, n)[0] > chance


# ---------------------------------------------------------------------- entry histograms (Fig. 9a)


@dataclass
class SymmetricSplit:
    """A histogram split as in Fig. 9a: ``symmetric[i] = min(freq(x_i), freq(-x_i))``, ``skew = freq - symmetric``."""

    edges: np.ndarray
    counts: np.ndarray
    symmetric: np.ndarray
    skew: np.ndarray

    @property
    def centers(self) -> np.ndarray:
        return 0.5 * (self.edges[1:] + self.edges[:-1])

    def skew_mass(self) -> tuple[float, float]:
        """Share of all entries in the right skew (x > 0) and in the left skew (x < 0)."""
        total = max(float(self.counts.sum()), 1.0)
        c = self.centers
        return float(self.skew[c > 0].sum()) / total, float(self.skew[c < 0].sum()) / total


def symmetric_split(values: np.ndarray, n_bins: int = 201, limit: float | None = None) -> SymmetricSplit:
    """Histogram of ``values`` on ``n_bins`` (odd) bins over [-limit, limit], split as in Fig. 9a."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise UserError("symmetric_split: no values")
    if n_bins < 3 or n_bins % 2 == 0:
        raise UserError(f"symmetric_split: n_bins must be odd and >= 3, got {n_bins}")
    lim = float(np.abs(v).max()) if limit is None else float(limit)
    lim = lim if lim > 0 else 1.0
    edges = np.linspace(-lim, lim, n_bins + 1)
    counts, _ = np.histogram(np.clip(v, -lim, lim), bins=edges)
    mirrored = counts[::-1]
    sym = np.minimum(counts, mirrored)
    return SymmetricSplit(edges, counts.astype(np.int64), sym.astype(np.int64), (counts - sym).astype(np.int64))


def noise_scale(values: np.ndarray) -> float:
    """sigma_Q of Eq. 13: 1.4826 * median |v - median(v)|, barely moved by a heavy tail."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise UserError("noise_scale: no values")
    med = np.median(v)
    return float(1.4826 * np.median(np.abs(v - med)))


def tail_onset(split: SymmetricSplit, min_count: int = 20) -> float | None:
    """beta_1 (section 5.5): the smallest x > 0 from which freq(x) > 2 freq(-x) in every full bin; None if never."""
    c = split.centers
    right = np.where(c > 0)[0]
    onset = None
    for i in right[::-1]:
        if split.counts[i] < min_count:
            continue
        if split.skew[i] > split.symmetric[i]:
            onset = float(split.edges[i])
        else:
            break
    return onset


# ---------------------------------------------------------------------- degree distributions (Figs. 10, 11)


@dataclass
class TailFit:
    """Maximum-likelihood fits on the tail k >= k_min of a discrete distribution."""

    k_min: int  # lower cut-off chosen by the KS criterion.
    n_tail: int  # data points in the tail; n: all positive data points.
    n: int
    alpha: float  # power-law exponent p(k) ~ k^-alpha; ks: its Kolmogorov-Smirnov distance on the tail.
    ks: float
    lognormal_mu: float
    lognormal_sigma: float
    exponential_lambda: float
    # R_lognormal, p_lognormal: log-likelihood ratio power law vs lognormal and Vuong's p-value.
    R_lognormal: float
    p_lognormal: float
    # R_exponential, p_exponential: the same against the exponential.
    R_exponential: float
    p_exponential: float
    preferred: str  # "power_law", "lognormal", "exponential" or "undecided" (p >= 0.1 for every test).

    def to_dict(self) -> dict[str, float | int | str]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def _powerlaw_loglik_terms(k: np.ndarray, alpha: float, k_min: int) -> np.ndarray:
    return -alpha * np.log(k) - math.log(special.zeta(alpha, k_min))


def _fit_powerlaw(k: np.ndarray, k_min: int) -> float:
    n = k.size
    s = float(np.log(k).sum())

    def nll(a: float) -> float:
        return a * s + n * math.log(special.zeta(a, k_min))

    res = optimize.minimize_scalar(nll, bounds=(1.01, 8.0), method="bounded", options={"xatol": 1e-4})
    return float(res.x)


def _powerlaw_cdf(support: np.ndarray, alpha: float, k_min: int) -> np.ndarray:
    pmf = support.astype(np.float64) ** (-alpha) / special.zeta(alpha, k_min)
    return np.cumsum(pmf)


def _ks(k: np.ndarray, alpha: float, k_min: int) -> float:
    support = np.arange(k_min, int(k.max()) + 1)
    emp = np.searchsorted(np.sort(k), support, side="right") / k.size
    return float(np.abs(emp - _powerlaw_cdf(support, alpha, k_min)).max())


def _lognormal_terms(k: np.ndarray, mu: float, sigma: float, k_min: int) -> np.ndarray:
    hi = max(int(k.max()) * 20, k_min + 1000)
    support = np.arange(k_min, hi + 1, dtype=np.float64)
    logp = -np.log(support) - (np.log(support) - mu) ** 2 / (2 * sigma**2)
    lz = special.logsumexp(logp)
    lk = np.log(k)
    return -lk - (lk - mu) ** 2 / (2 * sigma**2) - lz


def _fit_lognormal(k: np.ndarray, k_min: int) -> tuple[float, float]:
    lk = np.log(k)
    x0 = np.array([lk.mean(), max(lk.std(), 0.1)])

    def nll(p: np.ndarray) -> float:
        return -float(_lognormal_terms(k, p[0], abs(p[1]) + 1e-3, k_min).sum())

    res = optimize.minimize(nll, x0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-4, "maxiter": 400})
    return float(res.x[0]), float(abs(res.x[1]) + 1e-3)


def _exponential_terms(k: np.ndarray, lam: float, k_min: int) -> np.ndarray:
    return math.log(-math.expm1(-lam)) - lam * (k - k_min)


def _vuong(l1: np.ndarray, l2: np.ndarray) -> tuple[float, float]:
    d = l1 - l2
    R = float(d.sum())
    sd = float(d.std())
    if sd == 0 or d.size < 2:
        return R, 1.0
    p = math.erfc(abs(R) / (math.sqrt(2.0 * d.size) * sd))
    return R, float(p)


def fit_degrees(degrees: np.ndarray, min_tail: int = 50, max_candidates: int = 60) -> TailFit | None:
    """Fit the degree tail (zeros dropped); None with fewer than ``min_tail`` positive degrees or all equal."""
    k = np.asarray(degrees).astype(np.int64).ravel()
    k = k[k > 0].astype(np.float64)
    if k.size < min_tail or np.unique(k).size < 3:
        return None
    ks_sorted = np.sort(k)
    uniq = np.unique(k)
    # a cut-off must leave min_tail points
    limit = ks_sorted[-min_tail]
    cands = uniq[uniq <= limit]
    if cands.size > max_candidates:
        cands = np.unique(np.quantile(cands, np.linspace(0, 1, max_candidates)).round())
    best: tuple[float, int, float] | None = None
    for c in cands:
        c = int(c)
        tail = k[k >= c]
        if np.unique(tail).size < 2:
            continue
        a = _fit_powerlaw(tail, c)
        d = _ks(tail, a, c)
        if best is None or d < best[0]:
            best = (d, c, a)
    if best is None:
        return None
    d, k_min, alpha = best
    tail = k[k >= k_min]
    mu, sg = _fit_lognormal(tail, k_min)
    mean_excess = float(tail.mean() - k_min)
    lam = math.log1p(1.0 / mean_excess) if mean_excess > 0 else 10.0
    lp = _powerlaw_loglik_terms(tail, alpha, k_min)
    R_ln, p_ln = _vuong(lp, _lognormal_terms(tail, mu, sg, k_min))
    R_ex, p_ex = _vuong(lp, _exponential_terms(tail, lam, k_min))
    if p_ex < 0.1 and R_ex < 0:
        preferred = "exponential"
    elif p_ln < 0.1 and R_ln > 0 and (R_ex > 0 or p_ex >= 0.1):
        preferred = "power_law"
    elif p_ln < 0.1 and R_ln < 0:
        preferred = "lognormal"
    elif p_ex < 0.1 and R_ex > 0:
        preferred = "heavy_tailed"  # beats the exponential; power law and lognormal not distinguished
    else:
        preferred = "undecided"
    return TailFit(k_min, int(tail.size), int(k.size), alpha, d, mu, sg, lam, R_ln, p_ln, R_ex, p_ex, preferred)


def degree_summary(degrees: np.ndarray) -> dict[str, float]:
    """Mean, max, coefficient of variation, share of degree 0 and the top 1 %'s share of edges of a degree sequence."""
    k = np.asarray(degrees, dtype=np.float64).ravel()
    if k.size == 0:
        raise UserError("degree_summary: empty degree sequence")
    mean = float(k.mean())
    total = float(k.sum())
    top = max(1, int(math.ceil(0.01 * k.size)))
    return {
        "mean": mean,
        "max": float(k.max()),
        "cv": float(k.std() / mean) if mean > 0 else float("nan"),
        "cv_poisson": float(1.0 / math.sqrt(mean)) if mean > 0 else float("nan"),
        "zero_share": float((k == 0).mean()),
        "top1pct_edge_share": float(np.sort(k)[-top:].sum() / total) if total > 0 else 0.0,
    }


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); nan if either side is constant."""
    from scipy.stats import spearmanr

    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.size < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return float(spearmanr(a, b).statistic)
