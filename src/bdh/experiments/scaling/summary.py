"""From run records to the numbers of the report: losses per size and model at the chosen learning rates,
the comparisons, the power-law fits, the crossovers and the paper's claims (section 4.2, Fig. 7)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bdh.seed_stats import finite_mean

from .config import Config
from .fits import PowerLawFit, crossovers, fit_power_law
from .ladder import MODELS, Rung, inference_cost, train_flops_per_token
from .verdict import UNDECIDED, Comparison, compare, decide, findings

#: fitted crossovers are also looked for this far beyond the largest size (labelled as extrapolation)
EXTRAPOLATE = 100.0


@dataclass
class Summary:
    """The numbers behind the report."""

    sizes: list[dict[str, Any]]
    final: list[Comparison]
    half: list[Comparison]
    fits: dict[str, PowerLawFit]
    crossing: dict[str, list[float]]
    improved: dict[str, tuple[str, float, float, str]]
    found: list[tuple[str, bool | None, str]] = field(default_factory=list)
    equal_time: list[Comparison] = field(default_factory=list)


def kept(records: list[dict[str, Any]], chosen: dict[str, tuple[float, Any]], model: str, size: int) -> list[dict]:
    """The runs of ``model`` at ``size`` with its chosen learning rate, by seed."""
    lr = chosen[model][0]
    return sorted((r for r in records if r["model"] == model and r["size"] == size and r["lr"] == lr), key=_seed)


def _seed(record: dict[str, Any]) -> int:
    return int(record["seed"])


def half_loss(record: dict[str, Any], steps: int) -> float:
    """The validation loss of the curve point nearest half the run (NaN without one)."""
    val = record.get("curve", {}).get("val", [])
    if not val or record.get("diverged"):
        return math.nan
    return float(min(val, key=lambda p: abs(p[0] - steps / 2))[2])


def loss_at_seconds(record: dict[str, Any], seconds: float) -> float | None:
    """The run's validation loss after ``seconds`` of training: its loss curve ([step, tokens, loss]) read at the
    tokens its measured throughput trains in that time, linearly between curve points; the last point once the run
    has ended. NaN for a diverged run (as its final loss); None where it was not measured: before the first curve
    point, or without a curve or a throughput."""
    if record.get("diverged"):
        return math.nan
    val = record.get("curve", {}).get("val", [])
    rate = record.get("tok_per_s", math.nan)
    if not val or not math.isfinite(rate) or not math.isfinite(seconds):
        return None
    tokens = rate * seconds
    if tokens >= val[-1][1]:
        return float(val[-1][2])
    for (_, t0, l0), (_, t1, l1) in zip(val, val[1:]):
        if t0 <= tokens <= t1:
            return float(l0 + (l1 - l0) * (tokens - t0) / max(t1 - t0, 1e-12))
    return None


def equal_time(records: list[dict], chosen: dict, size: int) -> Comparison:
    """BDH against GPT at ``size`` for the same wall-clock: per seed, both models read at the training time of the
    faster one (`loss_at_seconds`; the slower one's curve cut there), then `compare` as at equal tokens; undecided
    where a slower run has no curve point that early."""
    bdh, gpt = kept(records, chosen, "bdh", size), kept(records, chosen, "gpt", size)
    by_seed = {_seed(r): r for r in gpt}
    pairs = [(b, by_seed[_seed(b)]) for b in bdh if _seed(b) in by_seed]
    losses: list[list[float | None]] = [[], []]
    for b, g in pairs:
        budget = min(b.get("train_s", math.nan), g.get("train_s", math.nan))
        losses[0].append(loss_at_seconds(b, budget))
        losses[1].append(loss_at_seconds(g, budget))
    if not pairs or any(v is None for vs in losses for v in vs):
        note = "no curve point of the slower model at the faster one's training time (more curve_points)"
        return Comparison(UNDECIDED, math.nan, math.nan, math.nan, math.nan, len(pairs), note)
    return compare(*losses)


def size_rows(config: Config, rungs: list[Rung], records: list[dict], chosen: dict) -> list[dict[str, Any]]:
    """Per size: both models' parameter counts, per-seed final and half-budget losses, and costs."""
    rows = []
    for rung in rungs:
        row: dict[str, Any] = {"size": rung.index, "label": rung.label(), "params": dict(rung.params)}
        row["mismatch"] = rung.mismatch
        for m in MODELS:
            runs = kept(records, chosen, m, rung.index)
            row[m] = {
                "seeds": [_seed(r) for r in runs],
                "final": [float(r["val_loss"]) for r in runs],
                "half": [half_loss(r, config.steps) for r in runs],
                "train_flops_per_token": train_flops_per_token(m, rung.section(m), config.seq_len),
                "train_flops": train_flops_per_token(m, rung.section(m), config.seq_len) * config.tokens_per_run,
                "at_seq_len": inference_cost(m, rung.section(m), config.seq_len),
                "at_context": inference_cost(m, rung.section(m), config.inference_context),
                "tok_per_s": finite_mean([r.get("tok_per_s", math.nan) for r in runs]),
                "directions": _directions(runs),
            }
        rows.append(row)
    return rows


def _directions(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = sorted({k for r in runs for k in r.get("directions", {})})
    return {k: finite_mean([r["directions"].get(k, math.nan) for r in runs if "directions" in r]) for k in keys}


def summarise(config: Config, rungs: list[Rung], records: list[dict], chosen: dict) -> Summary:
    """Every number of the report's verdict."""
    sizes = size_rows(config, rungs, records, chosen)
    final = [compare(s["bdh"]["final"], s["gpt"]["final"]) for s in sizes]
    half = [compare(s["bdh"]["half"], s["gpt"]["half"]) for s in sizes]
    fits = {}
    for m in MODELS:
        pts = [(s["params"][m], v) for s in sizes for v in s[m]["final"]]
        fits[m] = fit_power_law([p for p, _ in pts], [v for _, v in pts])
    lo = min(min(s["params"].values()) for s in sizes)
    hi = max(max(s["params"].values()) for s in sizes)
    crossing = {
        "measured_range": crossovers(fits["bdh"], fits["gpt"], lo, hi),
        "extrapolated": crossovers(fits["bdh"], fits["gpt"], hi, hi * EXTRAPOLATE),
    }
    improved = {m: decide(sizes[-1][m]["final"], sizes[0][m]["final"]) for m in MODELS}
    if len(sizes) < 2:
        improved = {m: ("undecided", math.nan, math.nan, "one size") for m in MODELS}
    summary = Summary(sizes, final, half, fits, crossing, improved)
    summary.equal_time = [equal_time(records, chosen, s["size"]) for s in sizes]
    summary.found = findings([s["label"] for s in sizes], final, half, fits, improved)
    return summary
