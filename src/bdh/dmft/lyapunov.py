"""Lyapunov exponents of a batched map (Benettin et al.): Q R = qr(J_t Q), lambda_k = (1/T) sum_t log |R_kk|."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bdh.errors import UserError

#: ``jvp(state (B, *S), t, tangents (B, K, *S)) -> (new_state, new_tangents)``
JVPStep = Callable[[np.ndarray, int, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _orthonormalise(V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batched QR of the K columns V (B, D, K): returns (Q (B, D, K), |diag R| (B, K))."""
    Q, R = np.linalg.qr(V)
    return Q, np.abs(np.diagonal(R, axis1=-2, axis2=-1))


def lyapunov_spectrum(
    jvp: JVPStep,
    state: np.ndarray,
    t0: int,
    n_steps: int,
    n_exponents: int = 1,
    *,
    seed: int = 0,
    renorm_every: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``n_exponents`` largest exponents (per step) of ``jvp`` from ``state`` (B, *S), ``t0`` the first step's time;
    (exponents (B, K) decreasing, final state)."""
    B = state.shape[0]
    shape = state.shape[1:]
    D = int(np.prod(shape))
    K = int(n_exponents)
    if not 1 <= K <= D:
        raise UserError(f"lyapunov_spectrum: n_exponents must be in [1, {D}], got {K}")
    if n_steps < 1:
        raise UserError("lyapunov_spectrum: n_steps must be >= 1")
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((D, K))
    Q, _ = np.linalg.qr(V)
    tang = np.broadcast_to(Q.T.reshape((1, K) + shape), (B, K) + shape).copy()
    logsum = np.zeros((B, K))
    x = np.array(state, dtype=np.float64, copy=True)
    for s in range(n_steps):
        x, tang = jvp(x, t0 + s, tang)
        if (s + 1) % renorm_every == 0 or s == n_steps - 1:
            Qb, r = _orthonormalise(tang.reshape(B, K, D).transpose(0, 2, 1))
            with np.errstate(divide="ignore"):
                logsum += np.log(r)
            tang = Qb.transpose(0, 2, 1).reshape((B, K) + shape)
    return logsum / n_steps, x


def largest_lyapunov_two_runs(
    step: Callable[[np.ndarray, int], np.ndarray],
    state: np.ndarray,
    t0: int,
    n_steps: int,
    *,
    delta: float = 1e-8,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """lambda_1 (B,) from two nearby trajectories (Benettin), and the log-separation growth (B, n_steps)."""
    x = np.array(state, dtype=np.float64, copy=True)
    B = x.shape[0]
    rng = np.random.default_rng(seed)
    d = rng.standard_normal(x.shape)
    d *= delta / np.sqrt((d.reshape(B, -1) ** 2).sum(1)).reshape((B,) + (1,) * (x.ndim - 1))
    y = x + d
    logs = np.empty((B, n_steps))
    for s in range(n_steps):
        x = step(x, t0 + s)
        y = step(y, t0 + s)
        diff = (y - x).reshape(B, -1)
        dist = np.sqrt((diff**2).sum(1))
        dist = np.where(dist > 0, dist, np.finfo(float).tiny)
        logs[:, s] = np.log(dist / delta)
        y = x + (y - x) * (delta / dist).reshape((B,) + (1,) * (x.ndim - 1))
    return logs.mean(1), logs
