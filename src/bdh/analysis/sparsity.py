"""Sparsity of x and y (section 6.4, Fig. 14) per layer, token and RoPE-frequency bucket (0: fastest),
with surprisal."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError
from bdh.model import BDHConfig

from ..tasks.repeat import PHASES
from .record import Recording


def frequency_buckets(config: BDHConfig, freqs: torch.Tensor, n_buckets: int = 8) -> torch.Tensor | None:
    """Bucket (0 = fastest) of each within-head neuron, (N,); None without RoPE."""
    if config.positional == "none":
        return None
    N = config.N
    f = freqs.detach().float().cpu().abs()
    if f.numel() == N // 2 and config.positional != "rope":
        f = torch.cat([f, f])
    if f.numel() != N:
        raise UserError(f"frequency_buckets: {f.numel()} frequencies for {N} neurons per head")
    order = torch.argsort(-f, stable=True)  # fastest (largest frequency) first
    buckets = torch.empty(N, dtype=torch.long)
    buckets[order] = torch.arange(N) * n_buckets // N
    return buckets


def bucket_periods(
    config: BDHConfig, freqs: torch.Tensor, buckets: torch.Tensor, n_buckets: int
) -> list[tuple[float, float]]:
    """(shortest, longest) RoPE period in tokens of each bucket (the paper labels buckets by these)."""
    f = freqs.detach().float().cpu().abs()
    if f.numel() != config.N:
        f = torch.cat([f, f])
    turns = f if config.positional == "rope" else f / (2 * np.pi)
    period = 1.0 / turns.clamp_min(1e-30)
    return [(float(period[buckets == b].min()), float(period[buckets == b].max())) for b in range(n_buckets)]


@dataclass
class SparsityTrace:
    """Fractions of non-zero activations, averaged over sequences, heads and neurons."""

    # x_token, y_token: (L, T) per token.
    x_token: np.ndarray
    y_token: np.ndarray
    # x_bucket, y_bucket: (L, K, T) per token and RoPE bucket, or None without RoPE.
    x_bucket: np.ndarray | None
    y_bucket: np.ndarray | None
    # (T,) mean surprisal in bits of the token *read* at each position (shifted by one; nan at 0).
    surprisal: np.ndarray
    periods: list[tuple[float, float]]  # (shortest, longest) period of each bucket, tokens.

    def layer_means(self) -> dict[str, list[float]]:
        """Fraction of non-zero x and y per layer over all tokens."""
        return {"x": self.x_token.mean(axis=1).tolist(), "y": self.y_token.mean(axis=1).tolist()}


def sparsity(rec: Recording, n_buckets: int = 8) -> SparsityTrace:
    """The fractions of non-zero x and y of every recorded layer (Fig. 14a/b)."""
    cfg = rec.config
    buckets = frequency_buckets(cfg, rec.freqs, n_buckets)
    layers = [i for i, t in enumerate(rec.x) if t is not None]
    xs, ys, xb, yb = [], [], [], []
    for layer in layers:
        for src, tok, buck in ((rec.x[layer], xs, xb), (rec.y[layer], ys, yb)):
            nz = (src > 0).float()  # B, H, T, N
            tok.append(nz.mean(dim=(0, 1, 3)).numpy())
            if buckets is not None:
                per = torch.stack([nz[..., buckets == b].mean(dim=(0, 1, 3)) for b in range(n_buckets)])
                buck.append(per.numpy())
    periods = bucket_periods(cfg, rec.freqs, buckets, n_buckets) if buckets is not None else []
    nxt = rec.surprisal.numpy()
    arrived = np.full(nxt.shape, np.nan)
    arrived[:, 1:] = nxt[:, :-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # position 0 has no surprisal
        surprisal = np.nanmean(arrived, axis=0) if arrived.shape[0] > 1 else arrived[0]
    return SparsityTrace(
        np.stack(xs),
        np.stack(ys),
        np.stack(xb) if buckets is not None else None,
        np.stack(yb) if buckets is not None else None,
        surprisal,
        periods,
    )


def phase_summary(trace: SparsityTrace, phase: torch.Tensor) -> dict[str, Any]:
    """Mean activity and surprisal per phase (warm-up, fact, repeat) of the section 6.4 sequence, and fact / repeat."""
    ph = phase.numpy()
    T = ph.size
    from ..tasks.repeat import PERIOD

    keep = np.arange(T) >= PERIOD if T > PERIOD else np.ones(T, dtype=bool)
    out: dict[str, Any] = {"skipped_first_period": bool(T > PERIOD)}
    for name, tok, buck in (("x", trace.x_token, trace.x_bucket), ("y", trace.y_token, trace.y_bucket)):
        per = {}
        for code, label in enumerate(PHASES):
            sel = keep & (ph == code)
            per[label] = tok[:, sel].mean(axis=1).tolist() if sel.any() else None
        ratio = None
        if per["fact"] is not None and per["repeat"] is not None:
            ratio = [f / r if r > 0 else None for f, r in zip(per["fact"], per["repeat"])]
        entry: dict[str, Any] = {"per_layer": per, "fact_over_repeat": ratio}
        if buck is not None:
            f_sel, r_sel = keep & (ph == 1), keep & (ph == 2)
            if f_sel.any() and r_sel.any():
                fb = buck[:, :, f_sel].mean(axis=2)
                rb = buck[:, :, r_sel].mean(axis=2)
                entry["bucket_fact"] = fb.tolist()
                entry["bucket_repeat"] = rb.tolist()
                entry["bucket_fact_over_repeat"] = np.where(rb > 0, fb / np.where(rb > 0, rb, 1), np.nan).tolist()
        out[name] = entry
    s = trace.surprisal
    out["surprisal"] = {
        label: (float(np.nanmean(s[keep & (ph == code)])) if (keep & (ph == code) & ~np.isnan(s)).any() else None)
        for code, label in enumerate(PHASES)
    }
    return out


def activity_surprisal_correlation(trace: SparsityTrace) -> list[float]:
    """Per layer, the Spearman correlation of y's non-zero fraction with the surprisal (section 6.4)."""
    from .stats import spearman

    ok = ~np.isnan(trace.surprisal)
    return [spearman(trace.y_token[layer, ok], trace.surprisal[ok]) for layer in range(trace.y_token.shape[0])]
