"""Statistics of the brain view: symmetric/skew split, noise scale, degree-distribution fits."""

import math

import numpy as np

from bdh.analysis import stats


def test_symmetric_noise_has_no_skew_and_no_tail_onset():
    v = np.random.default_rng(0).normal(0.0, 1.0, 200_000)
    split = stats.symmetric_split(v, n_bins=101, limit=6.0)
    right, left = split.skew_mass()
    assert right < 0.02 and left < 0.02
    assert np.array_equal(split.symmetric, split.symmetric[::-1])
    assert (split.symmetric + split.skew == split.counts).all()
    assert stats.tail_onset(split) is None


def test_planted_right_tail_is_found_beyond_the_noise():
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, 1.0, 200_000)
    tail = rng.uniform(5.0, 9.0, 4_000)
    split = stats.symmetric_split(np.concatenate([noise, tail]), n_bins=101, limit=10.0)
    right, left = split.skew_mass()
    assert right > 5 * left
    onset = stats.tail_onset(split)
    assert onset is not None and 3.0 < onset <= 5.5


def test_noise_scale_is_robust_to_a_small_tail():
    rng = np.random.default_rng(2)
    v = np.concatenate([rng.normal(0.0, 0.3, 100_000), rng.uniform(3.0, 10.0, 1_000)])
    assert abs(stats.noise_scale(v) - 0.3) < 0.02
    assert np.std(v) > 0.5  # while the plain standard deviation is pulled up


def test_pareto_degrees_prefer_power_law_over_exponential():
    rng = np.random.default_rng(3)
    k = np.floor((rng.pareto(1.5, 4000) + 1.0) * 2.0)
    fit = stats.fit_degrees(k)
    assert fit is not None
    assert fit.R_exponential > 0 and fit.p_exponential < 0.05
    assert 2.0 < fit.alpha < 3.2  # the generating exponent is 2.5


def test_poisson_degrees_are_not_called_power_law():
    k = np.random.default_rng(4).poisson(10, 4000)
    fit = stats.fit_degrees(k)
    assert fit is not None
    assert fit.preferred not in ("power_law", "heavy_tailed")
    assert fit.R_exponential < 0 or fit.p_exponential > 0.1
    s = stats.degree_summary(k)
    assert abs(s["cv"] - s["cv_poisson"]) < 0.05


def test_too_few_degrees_give_no_fit():
    assert stats.fit_degrees(np.array([1, 2, 3, 0, 0])) is None


def test_spearman_sign():
    a = np.arange(100.0)
    assert math.isclose(stats.spearman(a, a**3), 1.0)
    assert math.isclose(stats.spearman(a, -a), -1.0)
    assert math.isnan(stats.spearman(a, np.ones(100)))


def test_above_chance_is_the_wilson_interval_above_chance():
    """`above_chance`: the lower end of the Wilson 95% interval above chance (12 of 100 reach down to 0.070, 20 of
    100 to 0.133); a measured chance (a control) given as the top of its interval."""
    from bdh.analysis.stats import above_chance
    from bdh.tasks.lengths import wilson_interval

    assert above_chance(12, 100, 0.05) and not above_chance(12, 100, 0.08)
    assert not above_chance(0, 100, 0.0) and above_chance(100, 100, 0.9)
    control_top = wilson_interval(5, 100)[1]  # 0.112
    assert above_chance(20, 100, control_top) and not above_chance(12, 100, control_top)
