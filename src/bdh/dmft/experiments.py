"""The paper's experiments (section 4), vectorised over beta: the sweep (Fig. 3), trajectories (Figs. 4-5), lambda_1."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bdh.errors import UserError
from bdh.typed_config import TypedConfig, bounded

from .diagnostics import autocorrelation, classify, count_distinct, power_spectrum
from .lyapunov import lyapunov_spectrum
from .meanfield import MeanField, MFTrajectory
from .weights import DMFTParams, NetworkWeights, paper_weights

INIT_MODES = ("token", "continue")

#: most values a START:STOP:NUM range may give (25 times the paper's 4,001-value sweep)
MAX_RANGE_VALUES = 100_000
_LONG = "8 times the paper's 1.2e6"
_KEPT = "5 times the paper's 2e5 kept"


@dataclass
class RunLength(TypedConfig):
    """The counts of a mean-field run (``bdh dmft`` flags), bounded above so a typo is refused, not run for days."""

    steps: int = bounded(120_000, ge=1, le=10_000_000, why=_LONG)  # steps simulated per beta.
    keep: int = bounded(20_000, ge=1, le=1_000_000, why=_KEPT)  # steps kept at the end.
    # further steps over which the Lyapunov exponents are averaged.
    lyap_steps: int = bounded(5_000, ge=1, le=1_000_000)
    max_lag: int = bounded(200, ge=1, le=1_000_000)  # largest lag of the autocorrelation.
    seeds: int = bounded(8, ge=1, le=1_000)  # independent finite networks per size (convergence).


def parse_range(text: str, name: str = "range") -> np.ndarray:
    """``"start:stop:num"`` (inclusive, at most `MAX_RANGE_VALUES`) or ``"a,b,c"`` as values; ``name``: the flag."""
    text = str(text).strip()
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
            if num < 1 or not np.isfinite([start, stop]).all():
                raise ValueError
            if num > MAX_RANGE_VALUES:  # before numpy tries to allocate them
                raise UserError(f"{name} {text}: at most {MAX_RANGE_VALUES:,} values, got {num:,}")
            if num > 1 and not stop > start:
                raise ValueError
            vals = np.linspace(start, stop, num)
        else:
            vals = np.array([float(v) for v in text.split(",") if v.strip() != ""])
            if vals.size == 0 or not np.isfinite(vals).all():
                raise ValueError
    except UserError:
        raise
    except ValueError:
        raise UserError(
            f"bad range {text!r}: expected START:STOP:NUM with STOP > START and NUM >= 1, or a comma list of numbers"
        ) from None
    if (vals < 0).any():
        raise UserError(f"bad range {text!r}: values must be >= 0")
    return vals


@dataclass
class SweepResult:
    """A beta sweep: recorded m^o (semantic) and diagnostics per beta."""

    beta: np.ndarray  # (B,)
    mo_se: np.ndarray  # (B, T, M)
    lyap: np.ndarray  # (B, K) largest exponents
    n_distinct: np.ndarray  # (B,)
    regime: np.ndarray  # (B,) str
    seconds: dict
    config: dict


def initial_window(mf: MeanField, beta_top: float, n_steps: int, init_feature: int = 0) -> tuple[np.ndarray, int]:
    """The paper's continuation protocol: run the largest beta from x_0 = W^o_1 and return its final window."""
    tr = mf.simulate(beta_top, n_steps, 1, init_feature=init_feature)
    return tr.window[0], tr.t_next


def _simulate_chunks(
    mf: MeanField,
    beta: np.ndarray,
    chunk: int,
    window: np.ndarray | None,
    tstart: int,
    *,
    n_steps: int,
    n_keep: int,
    n_lyap: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """`run_sweep` by ``chunk`` betas: (kept m^o, the ``k`` largest Lyapunov exponents, seconds spent)."""
    mo, lyap = [], []
    t_sim = t_lyap = 0.0
    for i in range(0, beta.shape[0], chunk):
        b = beta[i : i + chunk]
        t1 = time.perf_counter()
        tr = mf.simulate(b, n_steps, n_keep, window=window, t0=tstart)
        t2 = time.perf_counter()
        lam, _ = lyapunov_spectrum(lambda w, t, T, b=b: mf.window_map_jvp(w, b, t, T), tr.window, tr.t_next, n_lyap, k)
        t3 = time.perf_counter()
        t_sim += t2 - t1
        t_lyap += t3 - t2
        mo.append(tr.mo_se)
        lyap.append(lam)
    return np.concatenate(mo), np.concatenate(lyap), t_sim, t_lyap


def run_sweep(
    beta: np.ndarray,
    *,
    n_steps: int = 120_000,
    n_keep: int = 20_000,
    n_lyap: int = 5_000,
    n_exponents: int = 1,
    init: str = "continue",
    weights: NetworkWeights | None = None,
    params: DMFTParams | None = None,
    chunk: int | None = None,
) -> SweepResult:
    """Simulate every beta, keep the last ``n_keep`` steps and estimate ``n_exponents`` Lyapunov exponents.
    ``init="continue"`` (Fig. 3's caption) starts every beta from the largest's final window; ``"token"`` from W^o_1."""
    if init not in INIT_MODES:
        raise UserError(f"init must be one of {INIT_MODES}, got {init!r}")
    if n_keep > n_steps:
        raise UserError(f"n_keep ({n_keep}) must not exceed n_steps ({n_steps})")
    weights = weights or paper_weights()
    mf = MeanField(weights, params)
    beta = np.asarray(beta, dtype=np.float64)
    secs: dict = {}
    t0 = time.perf_counter()
    window, tstart = (None, 0)
    if init == "continue":
        window, tstart = initial_window(mf, float(beta.max()), n_steps)
    secs["initial_condition"] = time.perf_counter() - t0
    mo_se, lam, t_sim, t_lyap = _simulate_chunks(
        mf, beta, chunk or beta.shape[0], window, tstart, n_steps=n_steps, n_keep=n_keep, n_lyap=n_lyap, k=n_exponents
    )
    nd = count_distinct(mo_se)
    secs.update(simulate=t_sim, lyapunov=t_lyap, total=time.perf_counter() - t0)
    cfg = dict(
        n_steps=n_steps,
        n_keep=n_keep,
        n_lyap=n_lyap,
        init=init,
        params=vars(mf.params).copy(),
        gamma_eff=mf.params.gamma_eff,
        weights=dict(weights.meta),
    )
    return SweepResult(beta, mo_se, lam, nd, classify(nd, lam[:, 0], n_keep), secs, cfg)


@dataclass
class TrajectoryResult:
    beta: float
    traj: MFTrajectory
    lyap: np.ndarray  # (K,)
    acf: np.ndarray  # (n_lags,)
    freq: np.ndarray
    spectrum: np.ndarray
    n_distinct: int
    regime: str


def run_trajectory(
    beta: float,
    *,
    n_steps: int = 120_000,
    n_keep: int = 20_000,
    n_lyap: int = 5_000,
    max_lag: int = 200,
    init: str = "continue",
    beta_top: float = 3.0,
    weights: NetworkWeights | None = None,
    params: DMFTParams | None = None,
    start: tuple[np.ndarray, int] | None = None,
) -> TrajectoryResult:
    """One beta: m^o (Fig. 4), ACF and DFT of m^o_1 (Fig. 5), Lyapunov spectrum; ``start``: (window, t0)."""
    weights = weights or paper_weights()
    mf = MeanField(weights, params)
    window, tstart = (None, 0)
    if init == "continue":
        window, tstart = start if start is not None else initial_window(mf, beta_top, n_steps)
    elif init != "token":
        raise UserError(f"init must be one of {INIT_MODES}, got {init!r}")
    tr = mf.simulate(beta, n_steps, n_keep, window=window, t0=tstart, record=("o", "v", "q", "k"))
    b = np.array([beta], dtype=np.float64)
    K = mf.params.context * mf.params.n_features
    lam, _ = lyapunov_spectrum(lambda w, t, T: mf.window_map_jvp(w, b, t, T), tr.window, tr.t_next, n_lyap, K)
    x = tr.mo_se[0, :, 0]
    freq, spec = power_spectrum(x)
    nd = int(count_distinct(tr.mo_se)[0])
    return TrajectoryResult(
        float(beta),
        tr,
        lam[0],
        autocorrelation(x, max_lag),
        freq,
        spec,
        nd,
        str(classify(np.array([nd]), lam[:, 0], n_keep)[0]),
    )
