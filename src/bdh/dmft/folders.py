"""The mean-field lab's results in a folder, one writer per ``bdh dmft`` command, atomic; ``summary()`` is printed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bdh.errors import UserError

from .convergence import finite_size_errors
from .experiments import SweepResult, TrajectoryResult, initial_window, run_sweep, run_trajectory
from .meanfield import MeanField
from .output import OutputDir
from .weights import DMFTParams, NetworkWeights, paper_weights

if TYPE_CHECKING:
    from .probe import ProbeConfig

#: the regimes of `bdh.dmft.diagnostics.classify`, in the order a sweep's counts are listed
REGIMES = ("periodic", "quasi-periodic", "chaotic")
#: the most betas `write_trajectories` takes at once (one figure and one file each; sweeps are `write_sweep`'s)
MAX_TRAJECTORIES = 12


@dataclass(frozen=True)
class WrittenSweep:
    """A beta sweep written by `write_sweep`: the `SweepResult`, how many betas fell in each regime, the folder."""

    result: SweepResult
    regime_counts: dict[str, int]
    path: Path

    def summary(self) -> str:
        """The betas, the seconds spent and the regime counts: the line ``bdh dmft bifurcation`` prints."""
        s = self.result.seconds
        return (
            f"{self.result.beta.size} betas in {s['total']:.1f} s (simulate {s['simulate']:.1f} s, "
            f"Lyapunov {s['lyapunov']:.1f} s); regimes {self.regime_counts}; wrote {self.path}"
        )


def write_sweep(
    beta: np.ndarray,
    out: str | Path,
    *,
    n_steps: int = 120_000,
    n_keep: int = 20_000,
    n_lyap: int = 5_000,
    init: str = "continue",
    weights: NetworkWeights | None = None,
    params: DMFTParams | None = None,
    chunk: int | None = None,
) -> WrittenSweep:
    """The beta sweep (Fig. 3) into ``out``: ``bifurcation.npz``, ``bifurcation.png``, ``summary.json``."""
    from .plots import bifurcation_figure

    res = run_sweep(
        beta, n_steps=n_steps, n_keep=n_keep, n_lyap=n_lyap, init=init, weights=weights, params=params, chunk=chunk
    )
    counts = {r: int((res.regime == r).sum()) for r in REGIMES}
    with OutputDir.create(out) as o:
        o.npz(
            "bifurcation.npz",
            beta=res.beta,
            mo_se=res.mo_se.astype(np.float32),
            lyap=res.lyap[:, 0],
            n_distinct=res.n_distinct,
            regime=res.regime,
        )
        o.figure("bifurcation.png", bifurcation_figure(res.beta, res.mo_se, res.regime, res.lyap[:, 0]))
        o.json(
            "summary.json",
            {
                "n_beta": int(res.beta.size),
                "beta_range": [float(res.beta.min()), float(res.beta.max())],
                "regime_counts": counts,
                "seconds": res.seconds,
                "config": res.config,
            },
        )
    return WrittenSweep(res, counts, Path(out))


@dataclass(frozen=True)
class WrittenTrajectories:
    """One `TrajectoryResult` per beta, their ``summary.json`` entries and the folder."""

    results: tuple[TrajectoryResult, ...]
    entries: tuple[dict[str, Any], ...]
    path: Path

    def summary(self) -> str:
        """A line per beta (regime, lambda_1) and the folder: what ``bdh dmft trajectory`` prints."""
        lines = [
            f"beta={e['beta']:g}: {e['regime']} ({e['n_distinct']} distinct points), lambda_1 = {e['lyapunov'][0]:+.4f}"
            for e in self.entries
        ]
        return "\n".join([*lines, f"wrote {self.path}"])


def check_trajectory_count(betas: np.ndarray) -> None:
    """Refuse more than `MAX_TRAJECTORIES` betas (a sweep is `write_sweep`'s job) in one line."""
    if betas.size > MAX_TRAJECTORIES:
        raise UserError(
            f"trajectory: at most {MAX_TRAJECTORIES} betas at a time, got {betas.size} "
            "(use 'bdh dmft bifurcation' for sweeps)"
        )


def write_trajectories(
    betas: np.ndarray,
    out: str | Path,
    *,
    n_steps: int = 120_000,
    n_keep: int = 20_000,
    n_lyap: int = 5_000,
    max_lag: int = 200,
    init: str = "continue",
    weights: NetworkWeights | None = None,
    params: DMFTParams | None = None,
) -> WrittenTrajectories:
    """Each beta (Figs. 4-5) into ``out``: npz, png, ``portraits.png``, ``summary.json``; ``init="continue"`` starts
    from beta = 3's final window; at most `MAX_TRAJECTORIES`."""
    from .plots import portraits_figure

    betas = np.asarray(betas, dtype=np.float64)
    check_trajectory_count(betas)
    weights = weights or paper_weights()
    params = params or DMFTParams()
    t0 = time.perf_counter()
    start = initial_window(MeanField(weights, params), 3.0, n_steps) if init == "continue" else None
    run = dict(n_steps=n_steps, n_keep=n_keep, n_lyap=n_lyap, max_lag=max_lag, init=init, start=start)
    results = tuple(run_trajectory(float(b), weights=weights, params=params, **run) for b in betas)
    with OutputDir.create(out) as o:
        entries = tuple(_write_trajectory(o, r) for r in results)
        if len(results) > 1:
            o.figure("portraits.png", portraits_figure(list(results)))
        config = dict(steps=n_steps, keep=n_keep, lyap_steps=n_lyap, init=init, gamma=params.gamma)
        config |= dict(epsilon=params.epsilon, seed=weights.meta.get("seed"))
        o.json("summary.json", {"trajectories": list(entries), "seconds": time.perf_counter() - t0, "config": config})
    return WrittenTrajectories(results, entries, Path(out))


def _write_trajectory(out: OutputDir, r: TrajectoryResult) -> dict[str, Any]:
    """trajectory-beta<B>.npz and .png of one trajectory result ``r``; its entry of summary.json."""
    from .plots import trajectory_figure

    tag = f"beta{r.beta:g}"
    m = r.traj.m
    out.npz(
        f"trajectory-{tag}.npz",
        beta=r.beta,
        t=r.traj.t,
        mo_se=r.traj.mo_se[0],
        att=r.traj.att[0],
        mq=m["q"][0],
        mk=m["k"][0],
        mv=m["v"][0],
        mo=m["o"][0],
        lyapunov=r.lyap,
        acf=r.acf,
        freq=r.freq,
        spectrum=r.spectrum,
    )
    out.figure(f"trajectory-{tag}.png", trajectory_figure(r))
    return {"beta": r.beta, "regime": r.regime, "n_distinct": r.n_distinct, "lyapunov": [float(v) for v in r.lyap]}


@dataclass(frozen=True)
class WrittenConvergence:
    """`finite_size_errors`' dict (errors per size and seed, the slope) and the folder."""

    result: dict[str, Any]
    path: Path

    def summary(self) -> str:
        """The fitted slope against the theory's -1/2: the line ``bdh dmft convergence`` prints."""
        return f"slope of log error vs log N: {self.result['slope']:.3f} (theory -0.5); wrote {self.path}"


def check_sizes(sizes: list[int], name: str = "sizes") -> None:
    """Refuse fewer than two sizes, or a size below 3, in one line naming ``name``."""
    if len(sizes) < 2 or min(sizes) < 3:
        raise UserError(f"{name} needs at least two sizes >= 3")


def write_convergence(
    beta: float,
    sizes: list[int],
    out: str | Path,
    *,
    n_seeds: int = 8,
    n_steps: int = 2000,
    n_keep: int = 1000,
    init: str = "continue",
    weights: NetworkWeights | None = None,
    params: DMFTParams | None = None,
) -> WrittenConvergence:
    """The finite network against the mean field at one beta into ``out``; ``sizes``: at least two N_se >= 3."""
    from .plots import convergence_figure

    check_sizes(sizes)
    res = finite_size_errors(
        weights or paper_weights(), params, beta, sizes, n_seeds=n_seeds, n_steps=n_steps, n_keep=n_keep, init=init
    )
    with OutputDir.create(out) as o:
        o.npz("convergence.npz", n=np.array(sizes), errors=res["errors"], slope=res["slope"])
        title = rf"finite N vs mean field, $\beta$={beta:g}"
        o.figure("convergence.png", convergence_figure(sizes, res["errors"], res["slope"], title=title))
        o.json(
            "summary.json",
            {k: v for k, v in res.items() if k != "errors"} | {"mean_errors": res["errors"].mean(1).tolist()},
        )
    return WrittenConvergence(res, Path(out))


@dataclass(frozen=True)
class WrittenProbe:
    """A probe written by `write_probe`: the report (``probe.json``), the series (``probe.npz``) and the folder."""

    report: dict[str, Any]
    series: dict[str, np.ndarray]
    path: Path

    def summary(self) -> str:
        """A line per temperature (lambda_1, token flips, free pair, ACF decay) and the folder."""
        lines = []
        for r in self.report["per_temperature"]:
            smooth = r["lyapunov_same_tokens"]
            lines.append(
                f"T={r['temperature']:g}: lambda_1 = {r['lyapunov']:+.5f} per token "
                f"({'n/a' if smooth is None else f'{smooth:+.5f}'} on agreeing tokens), "
                f"token flips {r['token_divergence_rate']:.3f}, "
                f"free pair first differs at {r['free_pair']['first_token_divergence']}, "
                f"ACF decay lag {r['acf_decay_lag']}"
            )
        return "\n".join([*lines, f"wrote {self.path}"])


def write_probe(
    model: Any, cfg: ProbeConfig, out: str | Path, *, model_dir: Path, run_dir: Path | None = None
) -> WrittenProbe:
    """A trained BDH as a dynamical system into ``out`` (json, npz, png); a stateless model is one `UserError`."""
    from bdh.model import BDH

    from .plots import probe_figure
    from .probe import run_probe

    if not isinstance(model, BDH):
        raise UserError(
            f"{model_dir}: a {type(model).__name__} model; the probe runs BDH models (it needs the recurrent state)"
        )
    report, series = run_probe(model, cfg)
    inside = run_dir is not None and model_dir != Path(run_dir)
    report["model_dir"] = str(model_dir.relative_to(run_dir)) if inside else model_dir.name
    with OutputDir.create(out) as o:
        o.json("probe.json", report)
        o.npz("probe.npz", **series)
        o.figure("probe.png", probe_figure(report, series))
    return WrittenProbe(report, series, Path(out))


__all__ = [
    "MAX_TRAJECTORIES",
    "REGIMES",
    "WrittenConvergence",
    "WrittenProbe",
    "WrittenSweep",
    "WrittenTrajectories",
    "check_sizes",
    "check_trajectory_count",
    "write_convergence",
    "write_probe",
    "write_sweep",
    "write_trajectories",
]
