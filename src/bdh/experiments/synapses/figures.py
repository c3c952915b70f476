"""Figures of the synapse analysis: the analogues of the paper's Fig. 12 (a synapse's value along example
segments) and Fig. 13 (the y and x behind its Hebbian increments), and the search AUC of every candidate.
The per-byte figures are wide so that each byte has room for its character (`bdh.plotting.READABLE`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bdh.plotting import MIN_WIDTH, READABLE, pyplot, save

from .options import SynapseOptions
from .sentences import Example

Trace = dict[str, np.ndarray]


def _chars(data: bytes) -> list[str]:
    """One label per byte: the character starting there ('' on UTF-8 continuation bytes)."""
    out = []
    for k, b in enumerate(data):
        if 0x80 <= b < 0xC0:
            out.append("")
            continue
        width = 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
        out.append(data[k : k + width].decode("utf-8", errors="replace"))
    return out


def _shade(ax: Any, e: Example) -> None:
    """Source (blue) and target (green) spans, concept words (orange)."""
    ax.axvspan(e.source[0] - 0.5, e.source[1] - 0.5, color="#dbe9ff", zorder=0)
    ax.axvspan(e.target[0] - 0.5, e.target[1] - 0.5, color="#ddf4dd", zorder=0)
    for a, b in e.concept_spans:
        ax.axvspan(a - 0.5, b - 0.5, color="#ffc870", alpha=0.8, zorder=0)


#: what each sentence statistic (`bdh.experiments.synapses.options.STATISTICS`) scores a synapse by
SCORED_BY = {"end": "sigma at the sentence end", "max": "its largest increment in the sentence"}
#: inches per byte of the per-byte figures: one character at `bdh.plotting.MIN_FONT` points fits
INCH_PER_BYTE = 0.12


def _width(ex: Sequence[Example]) -> float:
    """Figure width in inches for the longest example (at most 48 inches, 400 bytes at `INCH_PER_BYTE`)."""
    return min(48.0, max(MIN_WIDTH, INCH_PER_BYTE * max(len(e.data) for e in ex)))


def _byte_axis(ax: Any, e: Example, labels: bool) -> None:
    """One tick per byte labelled with its character (no ticks where ``labels`` is false: hundreds of empty ticks
    cost most of a figure's drawing time), the x range of the example, and the axis label."""
    if labels:
        ax.set_xticks(np.arange(len(e.data)), _chars(e.data))
    else:
        ax.set_xticks([])
    ax.tick_params(axis="x", length=0, pad=1)
    ax.set_xlim(-0.5, len(e.data) - 0.5)
    ax.set_xlabel("byte of the example (source shaded blue, target green, concept words orange)" if labels else "byte")


def plot_synapse_traces(
    ex: Sequence[Example], traces: Sequence[Trace], pair: tuple[int, int], layer: int, opts: SynapseOptions, stem: Path
) -> list[Path]:
    """Fig. 12 analogue: sigma_t[i, j] along the bytes of each example; steps above
    ``star_fraction`` of the largest step (over all examples) marked ``*``."""
    plt = pyplot()
    steps = [np.diff(np.r_[0.0, t["sigma"]]) for t in traces]
    peak = max(float(np.abs(s).max()) for s in steps) or 1.0
    thr = opts.star_fraction * peak
    fig, axes = plt.subplots(len(ex), 1, figsize=(_width(ex), 2.8 * len(ex)), squeeze=False)
    top = max(float(t["sigma"].max()) for t in traces)
    for ax, e, tr, s in zip(axes[:, 0], ex, traces, steps, strict=True):
        _shade(ax, e)
        pos = np.arange(len(e.data))
        ax.step(pos, tr["sigma"], where="post", color="C3", lw=1.3)
        mark = np.abs(s) > thr
        ax.plot(pos[mark], tr["sigma"][mark] + 0.04 * (top or 1.0), "k*", ms=7, ls="none")
        _byte_axis(ax, e, labels=True)
        ax.set_ylim(min(0.0, float(tr["sigma"].min())), 1.15 * top if top > 0 else 1.0)
        ax.set_ylabel("sigma")
        ax.set_title(e.title, loc="left")
    fig.suptitle(
        f"{opts.concept} synapse: sigma[{pair[0]}, {pair[1]}] (y of layer {layer - 1} -> x of layer {layer}, "
        f"head {opts.head}); * = step > {opts.star_fraction:g} x largest step (cf. Fig. 12)"
    )
    fig.tight_layout()
    return save(fig, stem, **READABLE)


def plot_mechanism(
    ex: Sequence[Example], traces: Sequence[Trace], pair: tuple[int, int], layer: int, opts: SynapseOptions, stem: Path
) -> list[Path]:
    """Fig. 13 analogue: per byte, y_{l-1}[i], x_l[j] and their product (the Hebbian increment of sigma[i, j])."""
    plt = pyplot()
    fig, axes = plt.subplots(3 * len(ex), 1, figsize=(_width(ex), 2.3 * 3 * len(ex)), squeeze=False)
    names = [
        ("y", f"y{layer - 1}[{pair[0]}]", "C0", "presynaptic y"),
        ("x", f"x{layer}[{pair[1]}]", "C2", "postsynaptic x"),
        ("increment", "y * x", "C3", "their product, the increment of sigma"),
    ]
    for k, (e, tr) in enumerate(zip(ex, traces, strict=True)):
        pos = np.arange(len(e.data))
        for r, (key, label, color, what) in enumerate(names):
            ax = axes[3 * k + r, 0]
            _shade(ax, e)
            ax.bar(pos, tr[key], width=0.85, color=color)
            ax.set_ylabel(label)
            _byte_axis(ax, e, labels=r == 2)
            ax.set_title(f"{e.title}: {what}", loc="left")
    fig.suptitle(
        f"the {opts.concept} synapse's Hebbian increment y{layer - 1}[{pair[0]}] x{layer}[{pair[1]}] per byte "
        "(cf. Fig. 13)"
    )
    fig.tight_layout()
    return save(fig, stem, **READABLE)


def plot_search_auc(aucs: dict[str, np.ndarray], statistic: str, stem: Path) -> list[Path]:
    """Histogram (log counts) of the search-set AUC of every candidate, per model (the trained one and its
    nulls)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH + 1, 5.5))
    bins = np.linspace(0, 1, 51)
    for k, (name, a) in enumerate(aucs.items()):
        ax.hist(a, bins=bins, histtype="step", lw=1.6, color=f"C{k}", label=name, log=True)
    ax.axvline(0.5, color="grey", ls=":", lw=1, label="0.5: no separation")
    scored = SCORED_BY.get(statistic, statistic)
    ax.set_xlabel(f"search-set AUC of the synapse (scored by {scored})")
    ax.set_ylabel("candidate synapses (log scale)")
    ax.set_title("how well each candidate separates concept sentences from the others")
    ax.grid(alpha=0.3)
    ax.legend(title="model")
    fig.suptitle("search AUC of every candidate synapse, trained model and nulls")
    fig.tight_layout()
    return save(fig, stem, **READABLE)
