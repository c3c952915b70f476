"""Mean-field lab: the dynamical mean-field theory of self-attention networks (Poc-López & Aguilera,
"Dynamical Mean-Field Theory of Self-Attention Neural Networks", 2024), simulated and reproduced,
and a bridge that runs a trained BDH as a dynamical system with the same diagnostics.

Modules (one concept each):
    weights      parameters (M, L, N_P, epsilon, gamma) and the 1-bit segment weights of appendix C
    meanfield    the mean-field equations (Eqs. 13-16), vectorised over beta, and the window map
    network      the finite-size network (bit-by-bit output sampling), converging to the mean field
    lyapunov     Lyapunov exponents (QR / tangent map, and two nearby runs)
    diagnostics  point counts, regime labels, Poincare section, autocorrelation, spectrum
    experiments  the paper's beta sweep and single-beta trajectories
    convergence  finite-size error against N
    probe        a trained BDH under temperature sweeps (readout, ACF, spectrum, lambda_1)
    plots        figures (matplotlib, imported only when drawing)
    output       atomic writing of results
    folders      each ``bdh dmft`` command's experiment written to a folder, with the lines it prints

Quick start::

    >>> import numpy as np
    >>> from bdh.dmft import MeanField, paper_weights
    >>> traj = MeanField(paper_weights()).simulate(np.array([1.0, 1.4]), n_steps=2000, n_keep=500)
    >>> traj.mo_se.shape
    (2, 500, 3)
"""

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
