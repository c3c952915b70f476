"""Time-series diagnostics of section 4 (Figs. 3-5): regimes, Poincare section, autocorrelation, spectrum; time last."""

from __future__ import annotations

import numpy as np


def count_distinct(x: np.ndarray, decimals: int = 7) -> np.ndarray:
    """Number of distinct points visited (rounded to ``decimals``); x is (..., T, M) -> (...)."""
    x = np.asarray(x, dtype=np.float64)
    lead = x.shape[:-2]
    T, M = x.shape[-2:]
    f = np.ascontiguousarray(np.round(x.reshape((-1, T, M)), decimals) + 0.0)  # + 0.0 maps -0.0 to 0.0
    rows = f.view(np.dtype((np.void, f.dtype.itemsize * M))).reshape(f.shape[0], T)
    rows = np.sort(rows, axis=1)
    return (1 + (rows[:, 1:] != rows[:, :-1]).sum(1)).reshape(lead)


def classify(n_distinct: np.ndarray, lyap: np.ndarray, n_points: int, *, tol: float = 2e-3) -> np.ndarray:
    """'periodic' (few points, or lambda_1 < -tol), 'chaotic' (lambda_1 > tol), else 'quasi-periodic' (section 4.1)."""
    n_distinct = np.asarray(n_distinct)
    lyap = np.asarray(lyap)
    lab = np.where(lyap > tol, "chaotic", "quasi-periodic").astype(object)
    lab = np.where((n_distinct < n_points / 4) | (lyap < -tol), "periodic", lab)
    return lab.astype(str)


def poincare_section(x: np.ndarray, y: np.ndarray, tol: float = 1e-3) -> np.ndarray:
    """Values of x at the steps where |y| < tol (the section y = 0 of Fig. 3: m^o_1 where m^o_2 = 0)."""
    x = np.asarray(x)
    y = np.asarray(y)
    return x[np.abs(y) < tol]


def autocorrelation(x: np.ndarray, max_lag: int | None = None, *, centre: bool = True) -> np.ndarray:
    """R_l = (1/T) sum_t x_t x_{t-l}, l = 0..max_lag (section 4.2), by FFT; ``centre``: mean removed, divided by R_0."""
    x = np.asarray(x, dtype=np.float64)
    T = x.shape[-1]
    max_lag = T - 1 if max_lag is None else min(int(max_lag), T - 1)
    if centre:
        x = x - x.mean(axis=-1, keepdims=True)
    n = 1 << int(np.ceil(np.log2(2 * T)))
    f = np.fft.rfft(x, n=n, axis=-1)
    r = np.fft.irfft(f * np.conj(f), n=n, axis=-1)[..., : max_lag + 1] / T
    if centre:
        r0 = r[..., :1]
        r = np.divide(r, r0, out=np.zeros_like(r), where=r0 > 1e-24)  # a constant signal has R = 0
    return r


def power_spectrum(x: np.ndarray, *, centre: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies f in [0, 1/2] and |F_f(x)| / T of the DFT F_f = sum_t x_t e^{-2 pi i f t} (section 4.2)."""
    x = np.asarray(x, dtype=np.float64)
    if centre:
        x = x - x.mean(axis=-1, keepdims=True)
    T = x.shape[-1]
    return np.fft.rfftfreq(T), np.abs(np.fft.rfft(x, axis=-1)) / T
