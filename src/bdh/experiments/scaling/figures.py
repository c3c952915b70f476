"""The figures of the scaling experiment: loss against parameters (with the fits, as paper Fig. 7),
loss against training FLOPs, the validation curves of every run, and the learning-rate sweep."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bdh.experiments.common import save_figure
from bdh.plotting import pyplot

from .fits import PowerLawFit
from .ladder import MODELS

COLORS = {"bdh": "tab:blue", "gpt": "tab:orange"}
NAMES = {"bdh": "BDH-GPU", "gpt": "GPT-2-style"}
LN2 = math.log(2.0)


def _bits_axis(ax: Any) -> None:
    """A right-hand axis in bits per byte beside the nats of the left one."""
    ax.secondary_yaxis("right", functions=(lambda x: x / LN2, lambda x: x * LN2)).set_ylabel("bits per byte")


def _points(ax: Any, sizes: list[dict[str, Any]], model: str, x_of: Any) -> None:
    xs, means = [], []
    for s in sizes:
        vals = [v for v in s[model]["final"] if math.isfinite(v)]
        x = x_of(s)
        ax.scatter([x] * len(vals), vals, color=COLORS[model], s=14, alpha=0.6)
        if vals:
            xs.append(x)
            means.append(sum(vals) / len(vals))
    ax.plot(xs, means, "o-", color=COLORS[model], label=f"{NAMES[model]} (mean over seeds)")


def loss_vs_params(sizes: list[dict[str, Any]], fits: dict[str, PowerLawFit], stem: Path) -> str:
    """Final loss against parameters, each seed a point, with the determined fits (paper Fig. 7)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for m in MODELS:
        _points(ax, sizes, m, lambda s, m=m: s["params"][m])
        if fits[m].usable:
            grid = np.geomspace(min(s["params"][m] for s in sizes), max(s["params"][m] for s in sizes), 100)
            ax.plot(grid, fits[m].predict(grid), "--", color=COLORS[m], label=f"fit a N^-b + c, b = {fits[m].b:.2f}")
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylabel("validation loss (nats per byte)")
    _bits_axis(ax)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, stem)


def loss_vs_flops(sizes: list[dict[str, Any]], stem: Path) -> str:
    """Final loss against the training FLOPs of a run (equal parameters are not equal compute)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for m in MODELS:
        _points(ax, sizes, m, lambda s, m=m: s[m]["train_flops"])
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs per run")
    ax.set_ylabel("validation loss (nats per byte)")
    _bits_axis(ax)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, stem)


def curves(runs: dict[str, list[dict[str, Any]]], labels: list[str], stem: Path) -> str:
    """Validation loss against step of every kept run: one panel per model, a colour per size, a line
    style per seed (a run that gets worse late shows it here)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(MODELS), figsize=(11, 4), sharey=True)
    cmap = plt.get_cmap("viridis")
    styles = ["-", "--", ":", "-."]
    for ax, m in zip(np.atleast_1d(axes), MODELS, strict=True):
        for r in runs[m]:
            val = r.get("curve", {}).get("val", [])
            if not val:
                continue
            color = cmap(r["size"] / max(len(labels) - 1, 1))
            label = f"{labels[r['size']]} seed {r['seed']}"
            ax.plot([p[0] for p in val], [p[2] for p in val], styles[r["seed"] % 4], color=color, label=label)
        ax.set_title(NAMES[m])
        ax.set_xlabel("step")
        ax.legend(fontsize=6, ncol=2)
    np.atleast_1d(axes)[0].set_ylabel("validation loss (nats per byte)")
    fig.tight_layout()
    return save_figure(fig, stem)


def lr_sweep(means: dict[str, dict[float, float]], chosen: dict[str, float], stem: Path) -> str:
    """Mean final loss against the peak learning rate at the smallest size."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for m in MODELS:
        lrs = sorted(means[m])
        vals = [means[m][lr] if math.isfinite(means[m][lr]) else np.nan for lr in lrs]
        ax.plot(lrs, vals, "o-", color=COLORS[m], label=f"{NAMES[m]} (chosen {chosen[m]:g})")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss, smallest size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, stem)
