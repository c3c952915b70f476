"""From run records to the numbers of the report: losses per size and model at the chosen learning rates,
the comparisons, the power-law fits, the crossovers and the paper's claims (section 4.2, Fig. 7)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bdh.seeds import finite_mean

from .config import Config
from .fits import PowerLawFit, crossovers, fit_power_law
from .ladder import MODELS, Rung, inference_cost, train_flops_per_token
from .verdict import Comparison, compare, decide, findings

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
    summary.found = findings([s["label"] for s in sizes], final, half, fits, improved)
    return summary
