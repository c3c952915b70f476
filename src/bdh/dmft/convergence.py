"""Finite-size network against the mean field, exact as N -> infinity (section 3): the error falls like N^(-1/2)."""

from __future__ import annotations

import numpy as np

from .experiments import initial_window
from .meanfield import MeanField
from .network import FiniteNetwork
from .weights import DMFTParams, NetworkWeights


def finite_size_errors(
    weights: NetworkWeights,
    params: DMFTParams | None,
    beta: float,
    sizes: list[int],
    *,
    n_seeds: int = 8,
    n_steps: int = 2000,
    n_keep: int = 1000,
    init: str = "token",
    seed: int = 0,
    sampler: str = "binomial",
) -> dict:
    """RMS distance of finite-network and mean-field m^o over the last ``n_keep`` steps, (len(sizes), n_seeds), and the
    slope of log(mean error) against log N."""
    mf = MeanField(weights, params)
    window, t0 = (None, 0)
    if init == "continue":
        window, t0 = initial_window(mf, 3.0, n_steps)
    ref = mf.simulate(beta, n_steps, n_keep, window=window, t0=t0).mo_se[0]
    errs = np.empty((len(sizes), n_seeds))
    for i, n in enumerate(sizes):
        net = FiniteNetwork(weights, n, mf.params, sampler=sampler, seed=seed + 1000 * i)
        tr = net.simulate(np.full(n_seeds, float(beta)), n_steps, n_keep, window=window, t0=t0)
        errs[i] = np.sqrt(((tr.mo_se - ref[None]) ** 2).mean(axis=(1, 2)))
    slope = float(np.polyfit(np.log(sizes), np.log(errs.mean(1)), 1)[0])
    return {
        "beta": float(beta),
        "sizes": list(map(int, sizes)),
        "n_seeds": n_seeds,
        "errors": errs,
        "slope": slope,
        "n_steps": n_steps,
        "n_keep": n_keep,
        "init": init,
        "sampler": sampler,
    }
