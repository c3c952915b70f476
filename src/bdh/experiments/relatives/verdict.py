"""Part (c) of ``bdh experiment relatives``: every model and ablated row of BDH against BDH, computed from the rows.

Per (suite, setting, width): label minus BDH (means over seeds, and the seed-by-seed min-max), ``better`` or
``worse`` only beyond the seed spread (`bdh.bench.results.pick_winner`); `tally` counts the verdicts per label."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bdh.bench.models import REFERENCE
from bdh.bench.results import pick_winner
from bdh.bench.spec import is_reference
from bdh.seed_stats import finite_mean

BETTER, WORSE = "better", "worse"


@dataclass(frozen=True)
class Verdict:
    """One label against BDH in one (suite, setting, width)."""

    model: str  # the label; suite, setting, width: where.
    suite: str
    setting: str
    width: int
    metric: str  # the score compared; higher_is_better: its direction.
    higher_is_better: bool
    # reference, value: BDH's and the label's means over seeds.
    reference: float
    value: float
    # diff, diff_min, diff_max: label minus BDH, and the least and greatest seed-by-seed differences (NaN without a
    # common seed).
    diff: float
    diff_min: float
    diff_max: float
    verdict: str  # ``better`` / ``worse`` (beyond the seed spread), or why not.
    cpu_s_per_step: float  # the label's mean CPU seconds per step.

    @property
    def beyond(self) -> bool:
        """True when the verdict is beyond the seed spread (better or worse)."""
        return self.verdict in (BETTER, WORSE)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _value(row: dict[str, Any], column: str) -> float:
    try:
        return float(row.get(column, "nan"))
    except (TypeError, ValueError):
        return math.nan


def _by_seed(rows: Iterable[dict[str, Any]], metric: str) -> dict[tuple[str, str, int], dict[int, float]]:
    """(model, setting, width) -> seed -> score, from result rows (one per seed; reference rows left out)."""
    out: dict[tuple[str, str, int], dict[int, float]] = {}
    for r in rows:
        if is_reference(r):
            continue
        key = (str(r["model"]), str(r["setting"]), int(float(r["width"])))
        out.setdefault(key, {})[int(float(r["seed"]))] = _value(r, metric)
    return out


def _speed(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str, int], float]:
    values: dict[tuple[str, str, int], list[float]] = {}
    for r in rows:
        key = (str(r["model"]), str(r["setting"]), int(float(r["width"])))
        values.setdefault(key, []).append(_value(r, "cpu_s_per_step"))
    return {k: finite_mean(v) for k, v in values.items()}


def compare(
    rows: Sequence[dict[str, Any]], suite: str, metric: str, higher_is_better: bool, reference: str = REFERENCE
) -> list[Verdict]:
    """The verdict of every label against ``reference`` in every (setting, width) of one suite's result rows."""
    scores, speed = _by_seed(rows, metric), _speed(rows)
    out = []
    for (model, setting, width), mine in scores.items():
        base = scores.get((reference, setting, width))
        if model == reference or base is None:
            continue
        paired = [mine[s] - base[s] for s in sorted(set(mine) & set(base))]
        paired = [d for d in paired if math.isfinite(d)] or [math.nan]
        winner, why = pick_winner({reference: list(base.values()), model: list(mine.values())}, higher_is_better)
        verdict = why if winner is None else (BETTER if winner == model else WORSE)
        ref_mean, my_mean = finite_mean(list(base.values())), finite_mean(list(mine.values()))
        out.append(
            Verdict(
                model, suite, setting, width, metric, higher_is_better, ref_mean, my_mean,
                my_mean - ref_mean, min(paired), max(paired), verdict, speed.get((model, setting, width), math.nan),
            )
        )  # fmt: skip
    return out


def tally(verdicts: Iterable[Verdict]) -> dict[str, dict[str, dict[str, int]]]:
    """label -> suite -> {``better``, ``worse``, ``within``, ``cells``}: how many (setting, width) cells the label
    wins or loses against BDH beyond the seed spread, how many are within it (or undecidable), and in all."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for v in verdicts:
        counts = out.setdefault(v.model, {}).setdefault(v.suite, {BETTER: 0, WORSE: 0, "within": 0, "cells": 0})
        counts[v.verdict if v.beyond else "within"] += 1
        counts["cells"] += 1
    return out
