"""Static figures of a run (matplotlib, lazily): training curves, sparsity, degrees, bench plots, heatmaps. Each takes
plain data and an output stem and returns the files written (PNG and SVG, atomic, `READABLE`); losses in bits."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bdh.errors import UserError, one_line
from bdh.outputs import input_file
from bdh.plotting import MIN_WIDTH, READABLE, bits, pyplot, save


def _titles(fig: Any, title: str, subtitle: str = "") -> None:
    """The figure's title, with the input it shows (``subtitle``) on a second, smaller line."""
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=13)


#: axes of the ``bdh bench`` suites (columns of their results.csv): suite -> [(x, y, facet or None), ...];
#: one figure ``bench-<suite>-<x>`` per entry. ``width`` is BDH's n_embd at which every model is
#: parameter-matched; ``state_size`` is each model's own ``state_size()``.
SUITE_AXES: dict[str, list[tuple[str, str, str | None]]] = {
    "recall": [("width", "accuracy", "setting"), ("state_size", "accuracy", "setting")],
    "boardpath": [("width", "path_validity", "setting"), ("state_size", "path_validity", "setting")],
    "sudoku": [("width", "cell_accuracy", None), ("state_size", "cell_accuracy", None)],
}


#: what the columns of ``bdh bench`` results measure, with their units, for the axes of `suite_plot`
COLUMN_LABELS: dict[str, str] = {
    "width": "width (BDH's d; the other models matched in parameters)",
    "state_size": "recurrent state per layer (scalars)",
    "accuracy": "accuracy (share of queries answered)",
    "accuracy_longer": "accuracy at 2N (share of queries answered)",
    "path_validity": "path validity (share of boards)",
    "board_accuracy": "board accuracy (share of boards solved)",
    "cell_accuracy": "cell accuracy (share of predicted cells right)",
    "passes": "layer passes at test time",
}
#: how the legends name the models of ``bdh bench`` (the ``model`` column)
MODEL_NAMES: dict[str, str] = {
    "bdh": "BDH",
    "gpt": "GPT",
    "baseconv": "BaseConv",
    "hyperset": "Hyper-SET",
    "based": "Based",
    "gla": "GLA",
    "mamba": "Mamba",
    "hyena": "Hyena",
    "rwkv": "RWKV",
    "deltanet": "DeltaNet",
    "gated-deltanet": "Gated DeltaNet",
    "bdh-qk": "BDH, Q != K",
    "bdh-nogate": "BDH, no gate",
    "bdh-noexpand": "BDH, no expansion",
    "bdh-unshared": "BDH, unshared layers",
}


def _words(column: str) -> str:
    """A results column's name in words (``state_size`` -> ``state size``)."""
    return column.replace("_", " ")


def column_label(column: str) -> str:
    """The axis label of a results column: `COLUMN_LABELS`, else the column's name in words."""
    return COLUMN_LABELS.get(column, _words(column))


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(float(v)) else None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# ---------------------------------------------------------------------- training curves


def training_curves(records: Sequence[dict[str, Any]], stem: Path | str, title: str = "") -> list[Path]:
    """Training and validation loss in bits (per byte with ``val_bpb``) against the step, other ``val_*`` in a
    second panel."""
    train = [(r["step"], _num(r.get("loss"))) for r in records if r.get("kind") == "train" and "step" in r]
    train = [(s, bits(v)) for s, v in train if v is not None]
    evals = [r for r in records if r.get("kind") == "eval" and "step" in r]
    val = [(r["step"], _num(r.get("val_loss"))) for r in evals]
    val = [(s, bits(v)) for s, v in val if v is not None]
    unit = "bits per byte" if any("val_bpb" in r for r in evals) else "bits per token"
    if not train and not val:
        raise UserError("training_curves: no training or validation loss in the records")
    others = sorted(
        {
            k
            for r in evals
            for k in r
            if k.startswith("val_")
            and k not in ("val_loss", "val_bpb")
            and not k.endswith("_se")  # a standard error goes with its metric, not in a panel of its own
            and _num(r[k]) is not None
        }
    )
    plt = pyplot()
    panels = 2 if others else 1  # one step axis for both panels, whole steps only (one evaluation read 187.5..207.5)
    fig, axes = plt.subplots(1, panels, figsize=(13 if others else MIN_WIDTH, 4.8), squeeze=False, sharex=True)
    for a in axes[0]:
        a.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax = axes[0][0]
    if train:
        ax.plot(*zip(*train, strict=True), lw=1, color="C0", label="training")
    if val:
        ax.plot(*zip(*val, strict=True), "o-", ms=4, lw=1.6, color="C3", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel(f"loss ({unit})")
    ax.set_title("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    if others:
        ax2 = axes[0][1]
        for i, k in enumerate(others):
            pts = [(r["step"], _num(r.get(k))) for r in evals]
            pts = [(s, v) for s, v in pts if v is not None]
            if pts:
                ax2.plot(*zip(*pts, strict=True), "o-", ms=3, lw=1.2, color=f"C{i % 10}", label=k)
        ax2.set_xlabel("step")
        ax2.set_ylabel("validation metric")
        ax2.set_title("validation metrics")
        ax2.grid(alpha=0.3)
        ax2.legend()
    _titles(fig, title or "training")
    fig.tight_layout()
    return save(fig, stem, **READABLE)


# ---------------------------------------------------------------------- sparsity


def sparsity_by_layer(
    x: Sequence[float], y: Sequence[float], stem: Path | str, title: str = "", subtitle: str = ""
) -> list[Path]:
    """Bars of the fraction of non-zero x and y per layer (values in [0, 1], one per layer), each labelled."""
    if len(x) == 0 or len(x) != len(y):
        raise UserError("sparsity_by_layer: x and y need one value per layer, and the same number")
    plt = pyplot()
    L = len(x)
    pos = np.arange(L)
    fig, ax = plt.subplots(figsize=(max(MIN_WIDTH, 0.9 * L + 3), 4.8))
    for shift, values, name, color in (
        (-0.2, x, "x", "#1f6feb"),
        (0.2, y, "y", "#e8590c"),
    ):
        bars = ax.bar(pos + shift, np.asarray(values) * 100, 0.4, label=name, color=color)
        ax.bar_label(bars, fmt="%.1f", padding=2)
    ax.set_xticks(pos, [str(i) for i in range(L)])
    ax.set_xlabel("layer")
    ax.set_ylabel("non-zero activations (%)")
    ax.set_ylim(0, max(max(x), max(y), 1e-9) * 100 * 1.3)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper center", ncol=2)
    ax.set_title("fraction of neurons active, per layer")
    _titles(fig, title or "sparsity of x and y", subtitle)
    fig.tight_layout()
    return save(fig, stem, **READABLE)


# ---------------------------------------------------------------------- degree distribution


def _pmf(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = k[k > 0]
    values, counts = np.unique(k, return_counts=True)
    return values, counts / max(1, k.size)


def degree_distribution(
    degrees: dict[str, np.ndarray],
    fits: dict[str, dict[str, Any] | None],
    stem: Path | str,
    title: str = "",
    reference: dict[str, np.ndarray] | None = None,
) -> list[Path]:
    """P(k) of in- and out-degrees (log-log) with the tail fit ``fits[d]``; ``reference``: a control's degrees
    in grey."""
    from scipy import special

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.4))
    for ax, d in zip(axes, ("in", "out"), strict=True):
        k = np.asarray(degrees[d]).ravel()
        kv, p = _pmf(k)
        if kv.size:
            ax.loglog(kv, p, "o", ms=3, color="C0", alpha=0.75, label=f"{d}-degree")
        if reference is not None and d in reference:
            rv, rp = _pmf(np.asarray(reference[d]).ravel())
            if rv.size:
                ax.loglog(rv, rp, ".", ms=2, color="0.6", alpha=0.7, label="random low-rank")
        fit = fits.get(d)
        if fit and fit.get("alpha") and kv.size:
            alpha, kmin = float(fit["alpha"]), int(fit["k_min"])
            share = float(fit["n_tail"]) / max(1.0, float(fit["n"]))
            ks = np.unique(np.geomspace(kmin, max(kmin + 1, kv.max()), 60).round())
            line = share * ks**-alpha / special.zeta(alpha, kmin)
            shown = line >= p.min()  # the line ends where it falls below the rarest degree measured (one node)
            ax.loglog(
                ks[shown],
                line[shown],
                "-",
                color="C3",
                lw=1.5,
                label=f"power-law fit, alpha={alpha:.2f} on k >= {kmin}",
            )
        best = _TAIL_MODELS.get(str((fit or {}).get("preferred", "")), "") if fit and fit.get("alpha") else ""
        ax.set_xlabel(f"{d}-degree k")
        ax.set_ylabel("P(k)")
        ax.set_title(f"{d}-degrees")
        ax.grid(alpha=0.3, which="both")
        ax.legend(  # below the panel, where it hides no point (inside, a low-rank reference or a tail met it)
            loc="upper center",
            bbox_to_anchor=(0.5, -0.14),
            frameon=False,
            title=f"tail best described by: {best}" if best else None,
        )
    _titles(fig, title or "degree distribution")
    fig.tight_layout()
    return save(fig, stem, **READABLE)


#: how the degree plot names the model `bdh.analysis.stats.fit_degrees` prefers for the tail
_TAIL_MODELS = {
    "power_law": "a power law",
    "lognormal": "a lognormal",
    "exponential": "an exponential (not scale-free)",
    "heavy_tailed": "heavy-tailed (power law or lognormal)",
    "undecided": "undecided",
}


# ---------------------------------------------------------------------- bench suites


def _x_axis(ax: Any, xs: list[float], log: bool = False) -> None:
    """A log-2 x axis for positive values spread 8x or more (or ``log``), else linear with the values ticked."""
    if xs and xs[0] > 0 and (log or (len(xs) > 2 and xs[-1] / xs[0] >= 8)):
        ax.set_xscale("log", base=2)
    elif len(xs) <= 8 and all(b - a >= 0.1 * (xs[-1] - xs[0]) for a, b in zip(xs, xs[1:])):
        ax.set_xticks(xs, [f"{v:g}" for v in xs])


def suite_plot(
    rows: Iterable[dict[str, Any]],
    stem: Path | str,
    x: str,
    y: str,
    series: str = "model",
    facet: str | None = None,
    title: str = "",
    reference: str | None = None,
    log_x: bool = False,
    x_marks: Sequence[float] = (),
) -> list[Path]:
    """``y`` against ``x``, a line per ``series``, a panel per ``facet``; seeds averaged with a min-max band. The
    ``reference`` series is a dashed line; ``x_marks`` dotted verticals."""
    groups, levels = _suite_points(rows, x, y, series, facet, reference)
    plt = pyplot()
    facets = sorted(groups, key=lambda v: (_num(v) is None, _num(v) or 0.0, str(v)))
    width = max(MIN_WIDTH, 4.6 * len(facets) + 1)
    fig, axes = plt.subplots(1, len(facets), figsize=(width, 4.6), squeeze=False, sharey=True)  # panels compared
    shared_legend = max((len(groups[f]) for f in facets), default=0) > LEGEND_INSIDE
    for ax, f in zip(axes[0], facets, strict=True):
        for i, (name, pts) in enumerate(sorted(groups[f].items())):
            style = f"{SERIES_MARKERS[i % 10]}{'-' if i < 10 else '--'}"  # ten colours, then dashed lines
            ms = max(3.0, 10.0 - 2.5 * i)  # smaller over larger: series at the same point (at chance) stay visible
            _mean_and_range(ax, pts, f"C{i % 10}", MODEL_NAMES.get(name, name), style, ms)
        _x_axis(ax, sorted({v for s in groups[f].values() for v in s}), log_x)
        if levels.get(f):
            ax.axhline(float(np.mean(levels[f])), ls="--", lw=1.2, color="0.35", label=f"{reference} answer")
        for i, v in enumerate(x_marks):
            ax.axvline(float(v), ls=":", lw=1.2, color="0.2", label="trained" if i == 0 else None)
        ax.set_xlabel(column_label(x))
        ax.set_ylabel(column_label(y))
        ax.grid(alpha=0.3)
        ax.set_title(f"{facet} = {f}" if facet else f"{_words(y)} against {_words(x)}")
        if not shared_legend:
            ax.legend()
    _titles(fig, title or f"{_words(y)} against {_words(x)}")
    fig.tight_layout()
    if shared_legend:  # one legend beside the panels, where it hides no line (the saved figure is cropped to it)
        named = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
        fig.legend(named.values(), named.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return save(fig, stem, **READABLE)


#: series in a panel beyond which `suite_plot` draws one legend beside the panels instead of one inside each
LEGEND_INSIDE = 6
#: the marker of each series of `suite_plot`, one shape per colour
SERIES_MARKERS = "osD^v<>ph*"


def _suite_points(
    rows: Iterable[dict[str, Any]], x: str, y: str, series: str, facet: str | None, reference: str | None
) -> tuple[dict[Any, dict[str, dict[float, list[float]]]], dict[Any, list[float]]]:
    """`suite_plot`'s points: facet -> series -> x -> y values, and facet -> the ``reference`` y values."""
    groups: dict[Any, dict[str, dict[float, list[float]]]] = {}
    levels: dict[Any, list[float]] = {}
    for r in rows:
        f = r.get(facet) if facet else None
        xv, yv = _num(r.get(x)), _num(r.get(y))
        if reference is not None and str(r.get(series, "")) == reference:
            if yv is not None:
                levels.setdefault(f, []).append(yv)
            continue
        if xv is None or yv is None:
            continue
        groups.setdefault(f, {}).setdefault(str(r.get(series, "")), {}).setdefault(xv, []).append(yv)
    if not groups:
        raise UserError(f"suite_plot: no rows with numeric {x!r} and {y!r}")
    return groups, levels


def _mean_and_range(
    ax: Any, pts: dict[float, list[float]], color: str, name: str, style: str = "o-", ms: float = 5.0
) -> None:
    """One series: the mean line, the min-max band and bars."""
    xs = np.array(sorted(pts))
    mean = np.array([np.mean(pts[v]) for v in xs])
    lo = np.array([np.min(pts[v]) for v in xs])
    hi = np.array([np.max(pts[v]) for v in xs])
    ax.plot(xs, mean, style, ms=ms, color=color, label=name)
    if np.any(hi > lo):
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15)
        ax.errorbar(xs, mean, yerr=[mean - lo, hi - mean], fmt="none", ecolor=color, elinewidth=0.8, capsize=2)


def bench_plots(
    rows: Iterable[dict[str, Any]],
    folder: Path | str,
    axes: dict[str, Sequence[tuple[str, str, str | None]]] | None = None,
    reference: str | None = "trivial",
) -> tuple[list[Path], list[str]]:
    """One `suite_plot` per suite and axes entry, as ``bench-<suite>-<x>``; returns (files, skipped reasons)."""
    axes = SUITE_AXES if axes is None else axes
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_suite.setdefault(str(r.get("suite", "")), []).append(r)
    files: list[Path] = []
    skipped: list[str] = []
    for suite, rs in sorted(by_suite.items()):
        if suite not in axes:
            skipped.append(f"bench suite {suite!r}: no axes known (known: {', '.join(sorted(axes))})")
            continue
        for x, y, facet in axes[suite]:
            if facet and not any(facet in r for r in rs):
                facet = None
            try:
                files += suite_plot(
                    rs,
                    Path(folder) / f"bench-{suite}-{x}",
                    x,
                    y,
                    facet=facet,
                    title=f"{suite}: {_words(y)} against {_words(x)} (mean over seeds, min-max band)",
                    reference=reference,
                )
            except ValueError as exc:
                skipped.append(f"bench suite {suite!r} ({y} against {x}): {exc}")
    return files, skipped


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    """Rows of a CSV file with a header (``bdh bench`` results)."""
    import csv

    p = input_file(path, "--bench", missing="no such results file")
    try:
        with open(p, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows, columns = list(reader), reader.fieldnames or []
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"--bench {p}: not a CSV file ({one_line(exc)})") from None
    if "suite" not in columns:
        raise UserError(
            f"--bench {p}: not bdh bench results (no 'suite' column; give the results.csv that bdh bench wrote)"
        )
    if not rows:
        raise UserError(f"--bench {p}: holds no result rows")
    return rows


# ---------------------------------------------------------------------- activation heatmap


def activation_heatmap(
    x: np.ndarray,
    y: np.ndarray,
    labels: Sequence[str],
    stem: Path | str,
    top: int = 64,
    title: str = "",
    subtitle: str = "",
) -> list[Path]:
    """Heatmaps of one layer's x and y (T, n), tokens by the ``top`` most active neurons of each."""
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
    if x.ndim != 2 or x.shape != y.shape or x.shape[0] != len(labels):
        raise UserError("activation_heatmap: x and y must be (tokens, neurons) with one label per token")
    plt = pyplot()
    T = x.shape[0]
    step = max(1, math.ceil(T / 64))  # at most 64 labelled rows: each label keeps its line
    rows = math.ceil(T / step)
    fig, axes = plt.subplots(1, 2, figsize=(14, max(4.5, min(18.0, 0.22 * rows + 2.5))), layout="constrained")
    for ax, a, name, cmap in ((axes[0], x, "x", "Blues"), (axes[1], y, "y", "Oranges")):
        k = min(top, a.shape[1])
        cols = np.sort(np.argsort(-a.sum(axis=0))[:k])
        im = ax.imshow(a[:, cols], aspect="auto", interpolation="nearest", cmap=cmap)
        ax.set_xlabel(f"neuron index (the {k} most active)")
        ax.set_ylabel("token")
        ax.set_yticks(range(0, T, step), [labels[i] for i in range(0, T, step)], family="monospace")
        tick = max(1, k // 8)
        ax.set_xticks(range(0, k, tick), [str(c) for c in cols[::tick]], rotation=90)
        ax.set_title(f"{name} activations")
        fig.colorbar(im, ax=ax, fraction=0.04, label="activation")
    _titles(fig, title or "activations", subtitle)
    return save(fig, stem, **READABLE)
