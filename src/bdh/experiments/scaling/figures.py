"""The figures of the scaling experiment: loss against parameters (with the fits, as paper Fig. 7),
loss against training FLOPs, the validation curves of every run, and the learning-rate sweep. Losses are
drawn in bits per byte, with nats per byte (the unit of the report's tables) on the right-hand axis."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bdh.experiments.common import save_figure
from bdh.plotting import MIN_WIDTH, bits, nats_axis, pyplot

from .fits import PowerLawFit
from .ladder import MODELS

COLORS = {"bdh": "tab:blue", "gpt": "tab:orange"}
NAMES = {"bdh": "BDH-GPU", "gpt": "GPT-2-style"}
#: the axis label of a loss: bits per byte on the left (nats per byte, the tables' unit, on the right: `nats_axis`)
LOSS = "validation loss (bits per byte)"


def _points(ax: Any, sizes: list[dict[str, Any]], model: str, x_of: Any) -> None:
    """Each seed's final loss (bits per byte) as a dot, and the mean over seeds as a line."""
    xs, means = [], []
    for s in sizes:
        vals = [bits(v) for v in s[model]["final"] if math.isfinite(v)]
        x = x_of(s)
        ax.scatter([x] * len(vals), vals, color=COLORS[model], s=20, alpha=0.6)
        if vals:
            xs.append(x)
            means.append(sum(vals) / len(vals))
    ax.plot(xs, means, "o-", color=COLORS[model], label=f"{NAMES[model]} (mean over seeds; dots: each seed)")


def _finish(ax: Any, xlabel: str, title: str) -> None:
    """Log x axis, labels in bits per byte with nats per byte beside, grid and legend."""
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(LOSS)
    nats_axis(ax, "validation loss (nats per byte)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend()


def loss_vs_params(sizes: list[dict[str, Any]], fits: dict[str, PowerLawFit], stem: Path) -> str:
    """Final loss against parameters, each seed a point, with the determined fits (paper Fig. 7)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH + 1.5, 6))
    for m in MODELS:
        _points(ax, sizes, m, lambda s, m=m: s["params"][m])
        if fits[m].usable:
            grid = np.geomspace(min(s["params"][m] for s in sizes), max(s["params"][m] for s in sizes), 100)
            label = rf"fit $a\,(N / 1\mathrm{{M}})^{{-b}} + c$, b = {fits[m].b:.2f}"
            ax.plot(grid, bits(fits[m].predict(grid)), "--", color=COLORS[m], label=label)
    _finish(ax, "parameters", "final validation loss against parameters (cf. Fig. 7)")
    fig.tight_layout()
    return save_figure(fig, stem)


def loss_vs_flops(sizes: list[dict[str, Any]], stem: Path) -> str:
    """Final loss against the training FLOPs of a run (equal parameters are not equal compute)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH + 1.5, 6))
    for m in MODELS:
        _points(ax, sizes, m, lambda s, m=m: s[m]["train_flops"])
    _finish(ax, "training FLOPs per run", "final validation loss against training compute")
    fig.tight_layout()
    return save_figure(fig, stem)


def _size_and_seed_legend(ax: Any, labels: list[str], colors: list[Any], styles: list[str], seeds: list[int]) -> None:
    """One legend entry per size (its colour) and one per seed (its line style), not one per run."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=f"{label} parameters") for label, c in zip(labels, colors)]
    handles += [Line2D([], [], color="black", ls=styles[s % len(styles)], label=f"seed {s}") for s in seeds]
    ax.legend(handles=handles, ncol=2)


def curves(runs: dict[str, list[dict[str, Any]]], labels: list[str], stem: Path) -> str:
    """Validation loss against step of every kept run: one panel per model, a colour per size, a line
    style per seed (a run that gets worse late shows it here)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(MODELS), figsize=(16, 6.5), sharey=True)
    cmap = plt.get_cmap("viridis")
    colors = [cmap(i / max(len(labels) - 1, 1)) for i in range(len(labels))]
    styles = ["-", "--", ":", "-."]
    for ax, m in zip(np.atleast_1d(axes), MODELS, strict=True):
        for r in runs[m]:
            val = r.get("curve", {}).get("val", [])
            if val:
                ax.plot([p[0] for p in val], [bits(p[2]) for p in val], styles[r["seed"] % 4], color=colors[r["size"]])
        ax.set_title(NAMES[m])
        ax.set_xlabel("step")
        ax.set_ylabel(LOSS)
        ax.grid(alpha=0.3)
        seeds = sorted({r["seed"] for r in runs[m]})
        _size_and_seed_legend(ax, labels, colors, styles, seeds)
    nats_axis(np.atleast_1d(axes)[-1], "validation loss (nats per byte)")
    fig.suptitle("validation loss against step, every run kept")
    fig.tight_layout()
    return save_figure(fig, stem)


def lr_sweep(means: dict[str, dict[float, float]], chosen: dict[str, float], stem: Path) -> str:
    """Mean final loss against the peak learning rate at the smallest size."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH, 5.5))
    for m in MODELS:
        lrs = sorted(means[m])
        vals = [bits(means[m][lr]) if math.isfinite(means[m][lr]) else np.nan for lr in lrs]
        ax.plot(lrs, vals, "o-", color=COLORS[m], label=f"{NAMES[m]} (chosen {chosen[m]:g})")
    _finish(ax, "peak learning rate", "learning-rate sweep at the smallest size (mean over seeds)")
    fig.tight_layout()
    return save_figure(fig, stem)
