"""Our Clauset-Shalizi-Newman degree fits (`bdh.analysis.stats.fit_degrees`) against the field's library,
``powerlaw`` (Alstott, Bullmore and Plenz 2014), on the same data.

Both fit the discrete power law p(k) = k^-alpha / zeta(alpha, k_min) by maximum likelihood, pick k_min by
the smallest Kolmogorov-Smirnov distance, and compare with other distributions by the log-likelihood ratio
R with Vuong's p-value (the same formula: erfc(|R| / (sqrt(2 n) sd))). Where the numbers may differ, and why:

* ``powerlaw.Fit(..., discrete=True)`` replaces the exact discrete MLE by the approximation
  alpha = 1 + n / sum(ln(k / (k_min - 1/2))) when k_min >= 10 (``estimate_discrete``); we always use the
  exact one, so the tests pass ``estimate_discrete=False``.
* powerlaw bounds alpha to [0, 3] by default, we to [1.01, 8]: on data that is no power law (Poisson
  degrees) both fits end at their bound and the k_min searches then differ; the tests compare only the
  exponential test's verdict there.
* our k_min search tries at most 60 distinct values leaving >= 50 points in the tail, powerlaw every
  distinct value but the largest; on the data below both choose the same k_min.
* the discrete lognormal: we normalise k^-1 exp(-(ln k - mu)^2 / 2 sigma^2) by its sum over the support,
  powerlaw integrates the continuous lognormal over [k - 1/2, k + 1/2]; the two likelihoods (and R) differ
  a little, the verdict (p) is what `fit_degrees` uses.
* powerlaw evaluates likelihoods outside log space and clamps one that underflows (exp(-lambda k) for a
  far tail value) to 1e-307; with k_min = 1 on Zipf data that raises its exponential log-likelihood by
  hundreds of nats, so its lambda is not the maximum-likelihood one and its R is smaller. Ours is computed
  in log space (tested below: our lambda has the higher exact likelihood).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from bdh.analysis import stats

powerlaw = pytest.importorskip("powerlaw")


def _zipf() -> np.ndarray:
    """An exact discrete power law, alpha = 2.5, k_min = 1 (numpy's Zipf sampler), fixed seed."""
    return np.random.default_rng(0).zipf(2.5, 5000)


def _barabasi_albert() -> np.ndarray:
    """The degree sequence of a preferential-attachment random graph (tail exponent about 3), fixed seed."""
    import networkx as nx

    graph = nx.barabasi_albert_graph(5000, 3, seed=0)
    return np.array([d for _, d in graph.degree()])


def _pareto() -> np.ndarray:
    """Floored continuous Pareto samples (the data of test_stats), exponent 2.5 in the tail."""
    return np.floor((np.random.default_rng(3).pareto(1.5, 4000) + 1.0) * 2.0)


def _fit(k: np.ndarray, **kwargs) -> powerlaw.Fit:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = powerlaw.Fit(k[k > 0].astype(float), discrete=True, estimate_discrete=False, verbose=0, **kwargs)
        _ = fit.power_law  # fitted on first access: here, where its optimiser's warnings are silenced
        return fit


def _compare(fit: powerlaw.Fit, other: str) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        R, p = fit.distribution_compare("power_law", other)
    return float(R), float(p)


DATA = {"zipf": _zipf, "barabasi-albert": _barabasi_albert, "pareto": _pareto}


@pytest.mark.parametrize("name", DATA)
def test_alpha_and_ks_at_the_same_k_min(name):
    """The same likelihood maximised by two optimisers: ours stops at xatol 1e-4 in alpha, powerlaw's
    scipy minimiser at a similar tolerance, so 1e-3 in alpha is ten times the optimisers' slack and still
    far below the statistical error (alpha - 1) / sqrt(n) of about 0.02-0.04 here. The KS distance moves by
    at most a few times the alpha difference (dD/dalpha is O(1)), hence 1e-3 too."""
    k = DATA[name]()
    ours = stats.fit_degrees(k)
    theirs = _fit(k, xmin=ours.k_min).power_law
    assert ours.alpha == pytest.approx(theirs.alpha, abs=1e-3)
    assert ours.ks == pytest.approx(theirs.D, abs=1e-3)
    assert ours.n_tail == int(np.sum(k >= ours.k_min))


@pytest.mark.parametrize("name", DATA)
def test_k_min_search_agrees(name):
    """Both pick the KS-minimising k_min; our candidate grid (at most 60 values, >= 50 tail points) holds
    powerlaw's choice on these data sets, so the choice is the same value, with the same alpha as above."""
    k = DATA[name]()
    ours = stats.fit_degrees(k)
    theirs = _fit(k)
    assert ours.k_min == int(theirs.xmin)
    assert ours.alpha == pytest.approx(theirs.power_law.alpha, abs=1e-3)
    assert ours.ks == pytest.approx(theirs.power_law.D, abs=1e-3)


@pytest.mark.parametrize("name", ["barabasi-albert", "pareto"])
def test_likelihood_ratio_tests_agree(name):
    """Power law vs exponential: the same geometric pmf (1 - e^-lambda) e^-lambda (k - k_min); our lambda is
    the closed-form MLE, powerlaw's a numerical one (they agree to 1e-3 relative), so R agrees to 1e-3
    relative and Vuong's p to 5% relative (p is exponentially sensitive to R / sd, tiny p here).
    Power law vs lognormal: the two discretisations differ (see the module docstring), so R may differ by a
    few tenths of a nat on these tails; both find the test not significant (p > 0.1), which is the verdict."""
    k = DATA[name]()
    ours = stats.fit_degrees(k)
    fit = _fit(k, xmin=ours.k_min)
    R, p = _compare(fit, "exponential")
    assert ours.exponential_lambda == pytest.approx(fit.exponential.Lambda, rel=1e-3)
    assert ours.R_exponential == pytest.approx(R, rel=1e-3) and ours.R_exponential > 0
    assert ours.p_exponential == pytest.approx(p, rel=0.05) and p < 1e-4
    R, p = _compare(fit, "lognormal")
    assert abs(ours.R_lognormal - R) < 0.5
    assert ours.p_lognormal > 0.1 and p > 0.1


def test_exponential_on_zipf_data_ours_is_the_exact_likelihood():
    """k_min = 1 on Zipf data: the far tail (k in the thousands) makes exp(-lambda k) underflow, which
    powerlaw clamps (module docstring). Both still prefer the power law with significance; our lambda has the
    higher exact log-likelihood, so it is the MLE and powerlaw's is not."""
    k = _zipf()
    ours = stats.fit_degrees(k)
    fit = _fit(k, xmin=ours.k_min)
    R, p = _compare(fit, "exponential")
    assert ours.R_exponential > 0 and R > 0 and ours.p_exponential < 0.05 and p < 0.05
    tail = k[k >= ours.k_min].astype(float)
    exact = stats._exponential_terms(tail, ours.exponential_lambda, ours.k_min).sum()
    theirs_exact = stats._exponential_terms(tail, float(fit.exponential.Lambda), ours.k_min).sum()
    assert exact > theirs_exact
    clamped = np.maximum(stats._exponential_terms(tail, float(fit.exponential.Lambda), ours.k_min), math.log(1e-307))
    assert np.log(fit.exponential.pdf(tail)).sum() == pytest.approx(clamped.sum(), rel=1e-6)  # the clamp, reproduced


def test_poisson_degrees_both_prefer_the_exponential():
    """Degrees of an Erdos-Renyi-like graph (Poisson): no power law. Both alpha fits end at their bounds
    (ours 8, powerlaw's 3), so only the verdict is compared: the exponential wins, significantly."""
    k = np.random.default_rng(4).poisson(10, 4000)
    ours = stats.fit_degrees(k)
    R, p = _compare(_fit(k, xmin=ours.k_min), "exponential")
    assert ours.R_exponential < 0 and R < 0 and ours.p_exponential < 0.01 and p < 0.01
