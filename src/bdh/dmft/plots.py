"""Figures of the mean-field lab, readable at 100 % zoom: m^o_a (Eq. 15), beta (Eq. 6), lambda_1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bdh.plotting import MIN_WIDTH, pyplot

REGIME_COLOURS = {"periodic": "black", "quasi-periodic": "tab:orange", "chaotic": "tab:purple"}
#: the colour of every value of a non-periodic run in the bifurcation diagram
OTHER_COLOUR = "gold"


def _label_all(ax: Any) -> None:
    """Tick labels on an axis whose x axis is shared (matplotlib hides them on the upper panels)."""
    ax.xaxis.set_tick_params(labelbottom=True)


def _points_per_beta(x: np.ndarray, cap: int) -> np.ndarray:
    u = np.unique(np.round(x, 5))
    if u.size > cap:
        u = u[np.linspace(0, u.size - 1, cap).astype(int)]
    return u


def _regime_legend(ax: Any) -> None:
    """The bifurcation diagram's colours, said in words (its dots are too small to stand for themselves)."""
    from matplotlib.lines import Line2D

    entries = [
        ("black", "every value, periodic run"),
        (OTHER_COLOUR, "every value, other runs"),
        (REGIME_COLOURS["quasi-periodic"], "Poincare section, quasi-periodic"),
        (REGIME_COLOURS["chaotic"], "Poincare section, chaotic"),
    ]
    handles = [Line2D([], [], ls="none", marker="s", ms=8, color=c, label=label) for c, label in entries]
    ax.legend(handles=handles, loc="upper left", framealpha=0.9)


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
    """Fig. 3: m^o_1 per beta, the Poincare section m^o_2 = 0 by regime, and lambda_1 below."""
    plt = pyplot()
    rows = 2 if lyap is not None else 1
    fig, axes = plt.subplots(
        rows, 1, figsize=(12, 8.5 if rows == 2 else 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3][:rows]}
    )
    axes = np.atleast_1d(axes)
    ax = axes[0]
    for i, b in enumerate(beta):
        per = regime[i] == "periodic"
        pts = _points_per_beta(mo_se[i, :, feature], cap)
        ax.plot(np.full(pts.size, b), pts, ",", color="black" if per else OTHER_COLOUR, rasterized=True)
        if not per:
            sec = mo_se[i, np.abs(mo_se[i, :, section_feature]) < tol, feature]
            sec = _points_per_beta(sec, cap) if sec.size else sec
            ax.plot(np.full(sec.size, b), sec, ",", color=REGIME_COLOURS[regime[i]], rasterized=True)
    ax.set_ylabel(rf"$m^o_{feature + 1}$ (semantic part)")
    ax.set_xlabel(r"inverse temperature $\beta$")
    ax.set_title(
        rf"values of $m^o_{feature + 1}$ kept per $\beta$; Poincare section $|m^o_{section_feature + 1}| < {tol:g}$"
    )
    _regime_legend(ax)
    if lyap is not None:
        axl = axes[1]
        axl.plot(beta, lyap, "-", lw=0.8, color="tab:blue")
        axl.axhline(0, color="grey", lw=0.6)
        finite = np.asarray(lyap)[np.isfinite(lyap)]
        if finite.size:
            axl.set_ylim(max(finite.min(), -0.3) - 0.02, finite.max() + 0.02)
        axl.set_ylabel(r"$\lambda_1$ (per step)")
        axl.set_xlabel(r"inverse temperature $\beta$")
        axl.set_title(r"largest Lyapunov exponent ($\lambda_1 > 0$: chaos)")
        _label_all(ax)
    fig.suptitle(title or r"Bifurcation diagram ($\gamma$ = 220, $\epsilon$ = 0.02, L = 4, M = 3), cf. Fig. 3")
    fig.tight_layout()
    return fig


def _portrait(ax: Any, res: Any, title: str) -> None:
    """The phase portrait m^o_1 against m^o_2 of one trajectory: dots when it visits few points."""
    mo = res.traj.mo_se[0]
    few = res.n_distinct < 100
    ax.plot(mo[:, 0], mo[:, 1], "o" if few else ",", ms=4 if few else 1, color="black", rasterized=True)
    ax.set_xlabel(r"$m^o_1$")
    ax.set_ylabel(r"$m^o_2$")
    ax.set_title(title)


def trajectory_figure(res, *, title: str = ""):
    """Figs. 4-5 of the paper for one beta: phase portrait m^o_1 vs m^o_2, time series, spectrum and ACF."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    mo = res.traj.mo_se[0]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    _portrait(axes[0, 0], res, f"phase portrait ({res.regime}, {res.n_distinct:,} distinct points)")
    ax = axes[0, 1]
    n = min(400, mo.shape[0])
    ax.plot(res.traj.t[-n:], mo[-n:, 0], "-", lw=0.8, color="tab:blue")
    ax.xaxis.set_major_locator(MaxNLocator(5))  # six-digit step numbers: few ticks, so they do not overlap
    ax.set_xlabel("step t")
    ax.set_ylabel(r"$m^o_1$")
    ax.set_title(f"the last {n} steps")
    ax = axes[1, 0]
    ax.plot(res.freq, res.spectrum, lw=0.8, color="tab:green")
    ax.axvline(0.25, color="grey", lw=0.8, ls=":", label="f = 1/L (the context window)")
    ax.set_xlabel("frequency f (1/step)")
    ax.set_ylabel(r"$|\mathcal{F}_f(m^o_1)|\,/\,T$")
    ax.set_title(r"spectrum of $m^o_1$")
    ax.legend(loc="upper center")
    ax = axes[1, 1]
    ax.plot(np.arange(res.acf.size), res.acf, lw=0.8, color="tab:red")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("lag l (steps)")
    ax.set_ylabel(r"$R_l$ (normalised)")
    ax.set_title(r"autocorrelation of $m^o_1$")
    fig.suptitle(title or rf"$\beta$ = {res.beta:g}, $\lambda_1$ = {res.lyap[0]:+.4f} per step (cf. Figs. 4-5)")
    fig.tight_layout()
    return fig


def portraits_figure(results, *, title: str = ""):
    """Fig. 4 of the paper: phase portraits m^o_1 vs m^o_2 for several betas."""
    plt = pyplot()
    n = len(results)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(max(MIN_WIDTH, 5.0 * cols), 4.6 * rows), squeeze=False)
    for ax, res in zip(axes.flat, results, strict=False):  # the grid may have spare axes
        _portrait(ax, res, rf"$\beta$ = {res.beta:g}: {res.regime}, $\lambda_1$ = {res.lyap[0]:+.3f}")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(title or r"phase portraits, $m^o_1$ against $m^o_2$ (cf. Fig. 4)")
    fig.tight_layout()
    return fig


def convergence_figure(n_values, errors, slope: float, *, title: str = ""):
    """Finite-size error against N on log-log axes, with the fitted slope."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH, 6))
    n_values = np.asarray(n_values, float)
    err = np.asarray(errors)
    ax.loglog(n_values, err.mean(1), "o-", color="black", label=f"mean over {err.shape[1]} seeds, slope {slope:.3f}")
    for j in range(err.shape[1]):
        ax.loglog(n_values, err[:, j], ".", color="grey", ms=4, label="one seed" if j == 0 else None)
    ax.loglog(
        n_values,
        err.mean(1)[0] * (n_values / n_values[0]) ** -0.5,
        "--",
        color="tab:red",
        lw=1,
        label=r"$N^{-1/2}$ (theory)",
    )
    ax.set_xlabel(r"$N_{se}$ (semantic neurons)")
    ax.set_ylabel(r"RMS($m^o_N - m^o_{MF}$) over the steps")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    ax.set_title("distance of the finite network from the mean field")
    fig.suptitle(title or r"finite N against the mean field, $\beta$ = 1")
    fig.tight_layout()
    return fig


def _probe_series(axes: Any, series: dict, temps: Sequence[float], cmap: Any) -> None:
    """Readout trajectory, ACF and spectrum of each temperature, one colour per temperature."""
    for i, T in enumerate(temps):
        c = cmap(i / max(len(temps) - 1, 1))
        r = series["readout"][i]
        axes[0, 0].plot(r[:, 0], r[:, 1], ".", ms=2, color=c, label=f"T = {T:g}")
        axes[1, 0].plot(series["acf"][i], lw=1, color=c, label=f"T = {T:g}")
        axes[1, 1].semilogy(series["freq"][1:], series["spectrum"][i][1:] + 1e-12, lw=0.6, color=c)
    for ax, xlabel, ylabel, title in (
        (axes[0, 0], "readout 1", "readout 2", "readout trajectory (first two features)"),
        (axes[1, 0], "lag (tokens)", "ACF of readout 1", "autocorrelation of readout 1"),
        (axes[1, 1], "frequency (1/token)", "|DFT| / T", "spectrum of readout 1"),
    ):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    axes[0, 0].legend(markerscale=4, ncol=2)


def probe_figure(report: dict, series: dict, *, title: str = ""):
    """The BDH probe: readout trajectory, ACF, spectrum per temperature, lambda_1 against temperature."""
    plt = pyplot()
    temps = report["temperatures"]
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    _probe_series(axes, series, temps, plt.get_cmap("viridis"))
    per = report["per_temperature"]
    lam = [r["lyapunov"] for r in per]
    smooth = [np.nan if r.get("lyapunov_same_tokens") is None else r["lyapunov_same_tokens"] for r in per]
    ax = axes[0, 1]
    ax.plot(temps, lam, "o-", color="black", label=r"$\lambda_1$")
    ax.plot(temps, smooth, "s--", color="tab:blue", ms=5, label=r"$\lambda_1$ on agreeing tokens")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel(r"temperature T = 1/$\beta$")
    ax.set_ylabel(r"$\lambda_1$ (per token)")
    ax.set_title("Lyapunov exponent and token flips")
    ax2 = ax.twinx()
    ax2.plot(temps, [r["token_divergence_rate"] for r in per], "^:", color="tab:red", ms=5, label="token flips")
    ax2.set_ylabel("token flip rate (per token)", color="tab:red")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2)
    fig.suptitle(title or "BDH as a dynamical system: the sampling temperature as control parameter")
    fig.tight_layout()
    return fig
