"""The finite-size network approaches the mean field as N grows, with errors ~ N^(-1/2)."""

import numpy as np
import pytest

from bdh.dmft.convergence import finite_size_errors
from bdh.dmft.meanfield import MeanField
from bdh.dmft.network import FiniteNetwork
from bdh.dmft.weights import paper_weights


def test_error_falls_like_inverse_sqrt_n_at_beta_1():
    res = finite_size_errors(
        paper_weights(), None, 1.0, [990, 9_900, 99_000, 990_000], n_seeds=6, n_steps=600, n_keep=300
    )
    assert -0.6 < res["slope"] < -0.4
    # every size is closer to the mean field than the previous one, for the seed average
    assert np.all(np.diff(res["errors"].mean(1)) < 0)


def test_bit_sampler_matches_binomial_sampler():
    """Both samplers draw from the same factorised output distribution (Eq. 6): same error statistics."""
    w = paper_weights()
    ref = MeanField(w).simulate(1.0, 300, 200).mo_se[0]
    errs = {}
    for sampler in ("bits", "binomial"):
        net = FiniteNetwork(w, 3_000, sampler=sampler, seed=5)
        tr = net.simulate(np.full(16, 1.0), 300, 200)
        errs[sampler] = np.sqrt(((tr.mo_se - ref) ** 2).mean(axis=(1, 2)))
    m_bits, m_bin = errs["bits"].mean(), errs["binomial"].mean()
    se = np.hypot(errs["bits"].std(), errs["binomial"].std()) / 4
    assert abs(m_bits - m_bin) < 4 * se + 1e-4
    assert m_bits == pytest.approx(m_bin, rel=0.3)


def test_bit_sampler_probabilities():
    """One step of the bit sampler: P(x_i = +1) = (1 + tanh h_i) / 2 with h_i = beta W^o_i . Ahat."""
    w = paper_weights()
    net = FiniteNetwork(w, 300_000, sampler="bits", seed=0)
    att = np.array([[0.3, -0.2, 0.1]])
    u = net.next_token(att, np.array([1.5]))
    expect = np.tanh(1.5 * att @ w.W["o"].T)
    np.testing.assert_allclose(u, expect, atol=5 * np.sqrt(1 / 100_000))


def test_finite_network_is_seeded():
    w = paper_weights()
    a = FiniteNetwork(w, 990, seed=3).simulate(np.full(2, 1.3), 200, 50).mo_se
    b = FiniteNetwork(w, 990, seed=3).simulate(np.full(2, 1.3), 200, 50).mo_se
    np.testing.assert_array_equal(a, b)


def test_group_sizes_must_divide():
    with pytest.raises(ValueError):
        FiniteNetwork(paper_weights(), 100)
