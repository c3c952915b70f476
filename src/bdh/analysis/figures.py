"""Figures of the brain-view report, after paper Figs. 9a, 9b, 10, 11 and 14 (docs/inspect.md lists the files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..plotting import MIN_WIDTH, READABLE, pyplot, save_file
from ..tasks.repeat import describe_phases


def _finish(fig, path: Path, title: str, source: str = "") -> Path:
    """The figure's title (with the input it shows on a second line), laid out and written readable."""
    fig.suptitle(title + (f"\n{source}" if source else ""), fontsize=13)
    fig.tight_layout()
    return save_file(fig, path, **READABLE)


def _ccdf(ax, k: np.ndarray, label: str, **kw) -> None:
    k = np.asarray(k)
    k = np.sort(k[k > 0])
    if k.size == 0:
        return
    y = 1.0 - np.arange(k.size) / k.size
    ax.loglog(k, y, label=label, **kw)


def entries(raw: dict[str, Any], which: str, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH, 5))
    for name, color in (("trained", "C0"), ("control", "C7")):
        split = raw["entries"][name]
        sq = raw["sigma_q"][name] or 1.0
        c = split.centers / sq
        ax.semilogy(c, np.maximum(split.symmetric, 0.5), color=color, lw=1, ls="--", label=f"{name}: symmetric")
        sk = np.where(split.skew > 0, split.skew, np.nan)
        ax.semilogy(c, sk, color=color, lw=1.5, label=f"{name}: skew")
    ax.set_xlabel(rf"entry of $G_{which}$ block / $\sigma_Q$")
    ax.set_ylabel("count")
    ax.set_title("symmetric part and skew of the entries")
    ax.legend()
    return _finish(fig, path, f"G_{which} = D_{which} E, diagonal block of head {raw.get('head', '?')} (cf. Fig. 9a)")


def modularity(raw: dict[str, Any], which: str, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH, 5))
    for name, color in (("trained", "C0"), ("control", "C7")):
        sw = raw["modularity"][name]
        e = [s["edges"] for s in sw]
        ax.semilogx(e, [s["Q"] for s in sw], "o-", color=color, label=f"{name}")
        if name == "trained":
            ax.semilogx(e, [s["Q_er"] for s in sw], "s--", color="C1", label="Erdos-Renyi, same edges")
            ax.semilogx(
                [s["lowrank_edges"] for s in sw],
                [s["Q_lowrank"] for s in sw],
                "^--",
                color="C2",
                label="random low-rank, same entries",
            )
    neg = raw["modularity"].get("trained_negative")
    if neg:
        ax.semilogx([s["edges"] for s in neg], [s["Q"] for s in neg], "v", color="C3", label="trained, |G <= -beta|")
    ax.set_xlabel("edges")
    ax.set_ylabel("Newman modularity Q")
    ax.set_title("Louvain, best of seeds, against random graphs of the same size")
    ax.legend()
    return _finish(fig, path, f"modularity of thresholded G_{which}, head {raw.get('head', '?')} (cf. Fig. 9b)")


def degrees(raw: dict[str, Any], which: str, path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, d in zip(axes, ("in", "out"), strict=True):
        _ccdf(ax, raw["degrees"]["trained"][d], "trained", color="C0")
        _ccdf(ax, raw["degrees"]["control"][d], "control", color="C7")
        _ccdf(ax, raw["degrees"]["trained"][f"lowrank_{d}"], "random low-rank", color="C2", ls="--")
        ax.set_xlabel(f"{d}-degree k")
        ax.set_ylabel("P(K >= k)")
        ax.set_title(f"{d}-degrees (complementary CDF)")
        ax.legend()
    return _finish(fig, path, f"degrees of thresholded G_{which}, head {raw.get('head', '?')} (cf. Fig. 10)")


def sigma(raw: dict[str, Any], path: Path, source: str = "") -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for name, color in (("trained", "C0"), ("trained_unrotated", "C1"), ("control", "C7")):
        r = raw.get(name)
        if not r or not r["thresholds"]:
            continue
        last = r["thresholds"][-1]
        _ccdf(axes[0], last["out"], name, color=color)
        _ccdf(axes[1], last["in"], name, color=color)
        if r.get("firing") is not None and name != "trained_unrotated":
            fr = r["firing"]["y"]
            axes[2].hist(fr[fr > 0], bins=40, histtype="step", color=color, label=f"{name}: y firing rate", log=True)
    for ax, xlabel, ylabel, title in (
        (axes[0], "out-degree k (y-neuron)", "P(K >= k)", "out-degrees"),
        (axes[1], "in-degree k (x-neuron)", "P(K >= k)", "in-degrees"),
        (axes[2], "firing rate of y-neurons", "neurons", "firing rates"),
    ):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    where = f", layer {raw['layer']}, head {raw['head']}" if "layer" in raw else ""
    return _finish(fig, path, f"sigma graph (Eq. 16){where}, cf. Fig. 11", source)


def _legend_beside(ax, **options) -> None:
    """The legend right of the panel, where it covers no trace (inside, the layers' lines ran under it)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **options)


def sparsity_repeat(raw: dict[str, Any], path: Path, bucket_layer: int | None = None) -> Path:
    plt = pyplot()
    tr, ctl, phase = raw["trained"], raw["control"], raw["phase"]
    L, T = tr.y_token.shape
    fig, axes = plt.subplots(3, 1, figsize=(13, 11), sharex=True)
    colors = {"warmup": "#eeeeee", "fact": "#ffd8b0", "repeat": "#ffffff"}
    for ax in axes:
        for a, b, name in describe_phases(phase[:T]):
            if name != "repeat":
                ax.axvspan(a - 0.5, b - 0.5, color=colors[name], lw=0)
    for layer in range(L):
        axes[0].plot(tr.y_token[layer] * 100, lw=1, label=f"layer {layer}")
    axes[0].plot(ctl.y_token.mean(axis=0) * 100, lw=0.8, color="k", ls=":", label="control (mean)")
    axes[0].set_ylabel("% y non-zero")
    axes[0].set_title("y active per layer")
    _legend_beside(axes[0])
    if tr.y_bucket is not None:
        bl = min(2, L - 1) if bucket_layer is None else bucket_layer
        K = tr.y_bucket.shape[1]
        cmap = plt.get_cmap("viridis")
        for b in range(K):
            lo, hi = tr.periods[b] if tr.periods else (0, 0)
            axes[1].plot(
                tr.y_bucket[bl, b] * 100, lw=0.9, color=cmap(b / max(K - 1, 1)), label=f"freq{b}: {lo:.0f}-{hi:.0f}"
            )
        axes[1].set_ylabel("% y non-zero")
        axes[1].set_title(f"layer {bl}, per RoPE frequency bucket")
        _legend_beside(axes[1], title="period (tokens)", ncol=1 + (K > 8))
    axes[2].plot(tr.surprisal, lw=0.8, color="C3", label="trained")
    axes[2].plot(ctl.surprisal, lw=0.8, color="k", ls=":", label="control")
    axes[2].set_ylabel("surprisal (bits)")
    axes[2].set_xlabel("token (shaded: warm-up grey, first presentation of the word orange)")
    axes[2].set_title("surprisal of each token")
    _legend_beside(axes[2])
    for ax in axes[:2]:
        ax.set_xlabel("token")
        ax.xaxis.set_tick_params(labelbottom=True)
    return _finish(fig, path, "activity on the repeated-word sequence (cf. Fig. 14)")


def sparsity_data(raw: dict[str, Any], path: Path, source: str = "") -> Path:
    plt = pyplot()
    tr, ctl = raw["trained"], raw["control"]
    L, T = tr.y_token.shape
    fig, axes = plt.subplots(2, 1, figsize=(13, 8), sharex=True)
    for layer in range(L):
        axes[0].plot(tr.y_token[layer] * 100, lw=0.9, label=f"layer {layer}")
    axes[0].plot(ctl.y_token.mean(axis=0) * 100, lw=0.9, color="k", ls=":", label="control (mean)")
    axes[0].set_ylabel("% y non-zero")
    axes[0].set_xlabel("token")
    axes[0].xaxis.set_tick_params(labelbottom=True)
    axes[0].set_title("y active per layer (mean over the windows)")
    axes[0].legend(ncol=min(L + 1, 5))
    axes[1].plot(tr.surprisal, lw=0.8, color="C3")
    axes[1].set_ylabel("surprisal (bits)")
    axes[1].set_xlabel("token")
    axes[1].set_title("surprisal of each token (mean over the windows)")
    return _finish(fig, path, "sparsity on the inspected text", source)


def fact(trace: dict[str, Any], path: Path, source: str = "") -> Path:
    """Which neurons hold the fact: each head's share of the question's read and the top neurons' part of it."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(MIN_WIDTH, 12), 5))
    heads = trace["heads"]
    left.bar(range(len(heads)), [h["share"] for h in heads], color="C0")
    left.set_xticks(range(len(heads)), [f"L{h['layer']}H{h['head']}" for h in heads], rotation=90)
    left.axhline(0, color="k", lw=0.8)
    left.set_ylabel("fact / (|fact| + |others|)")
    left.set_title("each head's share of the read")
    neurons = trace["neurons"]
    names = [f"L{n['layer']}H{n['head']}#{n['neuron']}" for n in neurons]
    at = np.arange(len(neurons))
    right.barh(at - 0.2, [n["fact"] for n in neurons], height=0.4, color="C1", label="the fact")
    right.barh(at + 0.2, [n["other"] for n in neurons], height=0.4, color="C7", label="every other position")
    right.set_yticks(at, names)
    right.invert_yaxis()
    right.set_xlabel("part of the question's coefficient on the values")
    right.set_title("the neurons that carry it")
    right.legend()
    gap = trace["read"] - trace["write"]
    return _finish(fig, path, f"the fact written at {trace['write']:,}, read {gap:,} tokens later", source)


def write_all(raw: dict[str, Any], folder: Path, source: str = "") -> list[Path]:
    """Every figure the raw results allow, written into ``folder``; returns the paths."""
    folder = Path(folder)
    out: list[Path] = []
    for which, g in raw.get("graphs", {}).items():
        out.append(entries(g, which, folder / f"entries_{which}.png"))
        out.append(modularity(g, which, folder / f"modularity_{which}.png"))
        out.append(degrees(g, which, folder / f"degrees_{which}.png"))
    if "sigma" in raw:
        out.append(sigma(raw["sigma"], folder / "sigma.png", source))
    if "sparsity_repeat" in raw:
        out.append(sparsity_repeat(raw["sparsity_repeat"], folder / "sparsity_repeat.png"))
    if "sparsity_data" in raw:
        out.append(sparsity_data(raw["sparsity_data"], folder / "sparsity_data.png", source))
    return out
