"""Mean-field lab: the dynamical mean-field theory of self-attention networks (Poc-López & Aguilera 2024), reproduced,
and a trained BDH run as a dynamical system with the same diagnostics (docs/dmft.md).

    >>> import numpy as np
    >>> from bdh.dmft import MeanField, paper_weights
    >>> MeanField(paper_weights()).simulate(np.array([1.0, 1.4]), n_steps=2000, n_keep=500).mo_se.shape
    (2, 500, 3)"""

from .diagnostics import autocorrelation, classify, count_distinct, poincare_section, power_spectrum
from .experiments import parse_range, run_sweep, run_trajectory
from .folders import write_convergence, write_probe, write_sweep, write_trajectories
from .lyapunov import largest_lyapunov_two_runs, lyapunov_spectrum
from .meanfield import MeanField, MFTrajectory
from .network import FiniteNetwork
from .weights import DMFTParams, NetworkWeights, paper_weights, position_bits, random_segment_weights

__all__ = [
    "DMFTParams",
    "FiniteNetwork",
    "MFTrajectory",
    "MeanField",
    "NetworkWeights",
    "autocorrelation",
    "classify",
    "count_distinct",
    "largest_lyapunov_two_runs",
    "lyapunov_spectrum",
    "paper_weights",
    "parse_range",
    "poincare_section",
    "position_bits",
    "power_spectrum",
    "random_segment_weights",
    "run_sweep",
    "run_trajectory",
    "write_convergence",
    "write_probe",
    "write_sweep",
    "write_trajectories",
]
