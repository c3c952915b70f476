"""Figures of the mean-field lab (matplotlib is imported lazily by `bdh.plotting`, only when a figure is drawn)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from bdh.plotting import pyplot, save_file

REGIME_COLOURS = {"periodic": "black", "quasi-periodic": "tab:orange", "chaotic": "tab:purple"}


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 90) -> Path:
    """Save a figure as PNG atomically (temporary file in the same folder, then rename) and close it."""
    return save_file(fig, path, fmt="png", dpi=dpi)


def _points_per_beta(x: np.ndarray, cap: int) -> np.ndarray:
    u = np.unique(np.round(x, 5))
    if u.size > cap:
        u = u[np.linspace(0, u.size - 1, cap).astype(int)]
    return u


def bifurcation_figure(
    beta,
    mo_se,
    regime,
    lyap=None,
    *,
    feature: int = 0,
    section_feature: int = 1,
    tol: float = 1e-3,
    cap: int = 400,
    title: str = "",
):
    """Fig. 3 of the paper: all values of m^o_1 per beta (black periodic, yellow otherwise), points on the
    Poincare section m^o_2 = 0 (orange quasi-periodic, purple chaotic), and lambda_1 below."""
    plt = pyplot()
    rows = 2 if lyap is not None else 1
    fig, axes = plt.subplots(
        rows, 1, figsize=(7.5, 5.5 if rows == 2 else 3.6), sharex=True, gridspec_kw={"height_ratios": [3, 1.3][:rows]}
    )
    axes = np.atleast_1d(axes)
    ax = axes[0]
    for i, b in enumerate(beta):
        per = regime[i] == "periodic"
        pts = _points_per_beta(mo_se[i, :, feature], cap)
        ax.plot(np.full(pts.size, b), pts, ",", color="black" if per else "gold", rasterized=True)
        if not per:
            sec = mo_se[i, np.abs(mo_se[i, :, section_feature]) < tol, feature]
            sec = _points_per_beta(sec, cap) if sec.size else sec
            ax.plot(np.full(sec.size, b), sec, ",", color=REGIME_COLOURS[regime[i]], rasterized=True)
    ax.set_ylabel(r"$m^o_1$ (semantic)")
    ax.set_title(title or r"Bifurcation diagram ($\gamma$=220, $\epsilon$=0.02, L=4, M=3)", fontsize=10)
    if lyap is not None:
        axl = axes[1]
        axl.plot(beta, lyap, "-", lw=0.6, color="tab:blue")
        axl.axhline(0, color="grey", lw=0.5)
        finite = np.asarray(lyap)[np.isfinite(lyap)]
        if finite.size:
            axl.set_ylim(max(finite.min(), -0.3) - 0.02, finite.max() + 0.02)
        axl.set_ylabel(r"$\lambda_1$")
    axes[-1].set_xlabel(r"$\beta$")
    fig.tight_layout()
    return fig


def trajectory_figure(res, *, title: str = ""):
    """Figs. 4-5 of the paper for one beta: phase portrait m^o_1 vs m^o_2, time series, spectrum and ACF."""
    plt = pyplot()
    mo = res.traj.mo_se[0]
    fig, axes = plt.subplots(2, 2, figsize=(8, 6))
    ax = axes[0, 0]
    big = res.n_distinct < 100
    ax.plot(mo[:, 0], mo[:, 1], "o" if big else ",", ms=3 if big else 1, color="black", rasterized=True)
    ax.set_xlabel(r"$m^o_1$")
    ax.set_ylabel(r"$m^o_2$")
    ax.set_title(f"phase portrait, {res.regime}", fontsize=9)
    ax = axes[0, 1]
    n = min(400, mo.shape[0])
    ax.plot(res.traj.t[-n:], mo[-n:, 0], "-", lw=0.6, color="tab:blue")
    ax.set_xlabel("t")
    ax.set_ylabel(r"$m^o_1$")
    ax.set_title("last steps", fontsize=9)
    ax = axes[1, 0]
    ax.plot(res.freq, res.spectrum, lw=0.6, color="tab:green")
    ax.axvline(0.25, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("frequency f (1/step)")
    ax.set_ylabel(r"$|\mathcal{F}_f(m^o_1)|/T$")
    ax = axes[1, 1]
    ax.plot(np.arange(res.acf.size), res.acf, lw=0.7, color="tab:red")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("lag l")
    ax.set_ylabel(r"$R_l$ (normalised)")
    fig.suptitle(title or rf"$\beta$ = {res.beta:g}, $\lambda_1$ = {res.lyap[0]:+.4f}", fontsize=10)
    fig.tight_layout()
    return fig


def portraits_figure(results, *, title: str = ""):
    """Fig. 4 of the paper: phase portraits m^o_1 vs m^o_2 for several betas."""
    plt = pyplot()
    n = len(results)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, res in zip(axes.flat, results, strict=False):  # the grid may have spare axes
        mo = res.traj.mo_se[0]
        big = res.n_distinct < 100
        ax.plot(mo[:, 0], mo[:, 1], "o" if big else ",", ms=3 if big else 1, color="black", rasterized=True)
        ax.set_title(rf"$\beta$={res.beta:g}: {res.regime}, $\lambda_1$={res.lyap[0]:+.3f}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def convergence_figure(n_values, errors, slope: float, *, title: str = ""):
    """Finite-size error against N on log-log axes, with the fitted slope."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    n_values = np.asarray(n_values, float)
    err = np.asarray(errors)
    ax.loglog(n_values, err.mean(1), "o-", color="black", label=f"mean over seeds, slope {slope:.3f}")
    for j in range(err.shape[1]):
        ax.loglog(n_values, err[:, j], ".", color="grey", ms=3)
    ax.loglog(
        n_values, err.mean(1)[0] * (n_values / n_values[0]) ** -0.5, "--", color="tab:red", lw=0.8, label=r"$N^{-1/2}$"
    )
    ax.set_xlabel("N (semantic neurons)")
    ax.set_ylabel(r"RMS($m^o_{N}$ - $m^o_{MF}$)")
    ax.legend(fontsize=8)
    ax.set_title(title or r"finite N vs mean field, $\beta$=1", fontsize=9)
    fig.tight_layout()
    return fig


def probe_figure(report: dict, series: dict, *, title: str = ""):
    """The BDH probe: readout trajectory (first two components), ACF, spectrum per temperature, and
    lambda_1 against temperature."""
    plt = pyplot()
    temps = report["temperatures"]
    fig, axes = plt.subplots(2, 2, figsize=(8.5, 6))
    cmap = plt.get_cmap("viridis")
    for i, T in enumerate(temps):
        c = cmap(i / max(len(temps) - 1, 1))
        r = series["readout"][i]
        axes[0, 0].plot(r[:, 0], r[:, 1], ".", ms=1.5, color=c, label=f"T={T:g}")
        axes[1, 0].plot(series["acf"][i], lw=0.8, color=c)
        axes[1, 1].semilogy(series["freq"][1:], series["spectrum"][i][1:] + 1e-12, lw=0.5, color=c)
    axes[0, 0].set_xlabel("readout 1")
    axes[0, 0].set_ylabel("readout 2")
    axes[0, 0].legend(fontsize=7, markerscale=4)
    axes[1, 0].set_xlabel("lag")
    axes[1, 0].set_ylabel("ACF of readout 1")
    axes[1, 1].set_xlabel("frequency (1/token)")
    axes[1, 1].set_ylabel("|DFT| / T")
    per = report["per_temperature"]
    lam = [r["lyapunov"] for r in per]
    smooth = [np.nan if r.get("lyapunov_same_tokens") is None else r["lyapunov_same_tokens"] for r in per]
    ax = axes[0, 1]
    ax.plot(temps, lam, "o-", color="black", label=r"$\lambda_1$")
    ax.plot(temps, smooth, "s--", color="tab:blue", ms=4, label=r"$\lambda_1$ on agreeing tokens")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("temperature T = 1/beta")
    ax.set_ylabel(r"$\lambda_1$ (per token)")
    ax2 = ax.twinx()
    ax2.plot(temps, [r["token_divergence_rate"] for r in per], "^:", color="tab:red", ms=4, label="token flips")
    ax2.set_ylabel("token flip rate", color="tab:red")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7)
    fig.suptitle(title or "BDH as a dynamical system", fontsize=10)
    fig.tight_layout()
    return fig
