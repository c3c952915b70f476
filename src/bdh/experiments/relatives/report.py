"""report.md, results.json and the figures of ``bdh experiment relatives``, from the two suites' rows: the frontier
against width and state size, the language model's bits per byte, the verdicts and the two targets checked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdh.bench.results import markdown_table as bench_table
from bdh.bench.spec import SuiteDef, is_reference

from ..common import Report
from .costs import duration
from .verdict import Verdict, tally

#: the model whose MQAR accuracy must reach `ATTENTION_TOP` somewhere (the frontier's top)
ATTENTION = "gpt"
ATTENTION_TOP = 0.9


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def figures(frontier: Sequence[dict], lm: Sequence[dict], folder: Path) -> dict[str, str]:
    """The three figures (png and svg) into ``folder``; returns caption -> the png's path relative to the report."""
    from bdh.viz.plots import suite_plot

    made: dict[str, str] = {}
    panels = [
        (frontier, "frontier-width", "width", "accuracy", "seq_len", False, "MQAR accuracy against width"),
        (frontier, "frontier-state", "state_size", "accuracy", "seq_len", True, "MQAR accuracy against state size"),
        (lm, "lm-bpb", "tokens", "bpb", "budget", True, "bits per byte against training tokens"),
    ]
    for rows, stem, x, y, facet, log_x, caption in panels:
        if not [r for r in rows if not is_reference(r)]:
            continue
        suite_plot(
            rows,
            folder / stem,
            x,
            y,
            facet=facet,
            title=f"{caption} (mean over seeds, min-max band)",
            reference="trivial",
            log_x=log_x,
        )
        made[caption] = f"figures/{stem}.png"
    return made


def targets(frontier: Sequence[dict], lm: Sequence[dict]) -> list[tuple[str, bool | None, str]]:
    """The issue's targets as (claim, held: True / False / None when not measured, the numbers)."""
    found: list[tuple[str, bool | None, str]] = []
    top = [_f(r["accuracy_mean"]) for r in frontier if r["model"] == ATTENTION]
    best = max((v for v in top if math.isfinite(v)), default=math.nan)
    held = None if not top else best >= ATTENTION_TOP
    found.append((f"attention ({ATTENTION}) reaches {ATTENTION_TOP} MQAR accuracy somewhere", held, f"best {best:.3f}"))
    for name, rows, metric, higher in (("MQAR", frontier, "accuracy", True), ("LM", lm, "bpb", False)):
        floor = {(str(r["setting"]), str(r["width"])): _f(r[f"{metric}_mean"]) for r in rows if is_reference(r)}
        above: dict[str, bool] = {}
        for r in rows:
            if is_reference(r):
                continue
            base, mine = floor.get((str(r["setting"]), str(r["width"])), math.nan), _f(r[f"{metric}_mean"])
            above[r["model"]] = above.get(r["model"], False) or (mine > base if higher else mine < base)
        below = sorted(m for m, ok in above.items() if not ok)
        text = "every model" if not below else "not: " + ", ".join(below)
        found.append((f"{name}: every model beats its trivial row somewhere", (not below) if above else None, text))
    return found


def verdict_rows(verdicts: Sequence[Verdict]) -> list[list[Any]]:
    """The verdict table: model, suite, setting, width, BDH, the model, the difference and its min-max, verdict."""
    rows = []
    for v in verdicts:
        spread = f"{v.diff_min:+.3f} to {v.diff_max:+.3f}" if math.isfinite(v.diff_min) else "n/a"
        rows.append([v.model, v.suite, v.setting, v.width, v.reference, v.value, f"{v.diff:+.3f}", spread])
        rows[-1] += [v.verdict, v.cpu_s_per_step]
    return rows


def ledger_seconds(suites: dict[str, tuple[SuiteDef, dict[str, Any]]]) -> float:
    """The wall seconds of every run in the suites' ledgers (``wall_s`` of each row of ``runs``)."""
    walls = (_f(r.get("wall_s")) for _, result in suites.values() for r in result["runs"])
    return sum(w for w in walls if math.isfinite(w))


def tally_rows(verdicts: Sequence[Verdict]) -> list[list[Any]]:
    """Per model and suite: cells better and worse than BDH beyond the seed spread, within it, in all."""
    return [
        [model, suite, c["better"], c["worse"], c["within"], c["cells"]]
        for model, suites in tally(verdicts).items()
        for suite, c in suites.items()
    ]


def _protocol(config: Any, suites: dict[str, tuple[SuiteDef, dict[str, Any]]], plan: str, seconds: float) -> str:
    """The report's opening: the models and seeds, how they were sized, the time the runs took, the plan."""
    return (
        f"Models: {', '.join(config.models)}; seeds {', '.join(map(str, config.seeds))}; every model but BDH sized to "
        f"BDH's parameter count at each width by its own `for_budget`. On device {config.device}, the runs took "
        f"{duration(ledger_seconds(suites))} of wall time by the ledgers (training and evaluation of every run, "
        f"summed over the runs, {config.jobs} at once, in whichever process trained them: a `--resume` counts the "
        f"runs made before it); this process took {duration(seconds)}. The runs (`--show-config` times each model "
        f"for an estimate of their cost):\n\n```\n{plan}\n```"
    )


def suite_sections(report: Report, suites: dict[str, tuple[SuiteDef, dict[str, Any]]], shown: dict[str, str]) -> None:
    """Each suite's figures (``shown``: caption -> path) and the bench's table of its summary."""
    (frontier_def, frontier), (lm_def, lm) = suites["frontier"], suites["lm"]
    report.heading("(a) MQAR frontier")
    for caption, path in shown.items():
        if not path.startswith("figures/lm"):
            report.figure(path, caption)
    report.text(bench_table(frontier["summary"], frontier_def))
    report.heading("(b) Byte-level language model")
    if "bits per byte against training tokens" in shown:
        report.figure(shown["bits per byte against training tokens"], "bits per byte against training tokens")
    report.text(bench_table(lm["summary"], lm_def))


def write_report(
    out: Path,
    config: Any,
    suites: dict[str, tuple[SuiteDef, dict[str, Any]]],
    verdicts: Sequence[Verdict],
    plan: str,
    seconds: float,
) -> Path:
    """report.md and results.json into ``out`` (figures into ``out/figures``); returns the report's path.
    ``suites``: ``frontier`` and ``lm`` -> (suite, what `bdh.bench.runner.run_suite` returned)."""
    frontier, lm = suites["frontier"][1], suites["lm"][1]
    report = Report("BDH among its relatives: the MQAR frontier and a byte-level language model")
    report.text(_protocol(config, suites, plan, seconds))
    shown = figures(frontier["results"], lm["results"], out / "figures")
    report.heading("Targets")
    found = targets(frontier["summary"], lm["summary"])
    report.findings(found)
    report.heading("Against BDH, beyond the seed spread")
    report.text(
        "Difference = model minus BDH in the suite's score (MQAR accuracy: higher is better; LM bits per byte: "
        "lower is better), with the least and greatest seed-by-seed difference. `better`/`worse` only where the "
        "model's worst seed beats BDH's best seed, or its best seed loses to BDH's worst (the bench's winner rule)."
    )
    report.table(["model", "suite", "better", "worse", "within", "cells"], tally_rows(verdicts))
    headers = ["model", "suite", "setting", "width", "BDH", "model score", "difference", "min to max", "verdict"]
    report.table([*headers, "cpu_s_per_step"], verdict_rows(verdicts))
    suite_sections(report, suites, shown)
    report.heading("What this scale can and cannot say")
    report.text(
        "Every number here is from small models trained briefly on 2 CPU cores: a verdict says what a part of BDH "
        "costs or buys at these widths and this training length, not at the paper's scale; equal wall-clock depends "
        "on this machine's speed for each model (and on its load while the runs ran). `--full` is the GPU sweep."
    )
    report.results = {
        "config": config.to_dict(),
        "plan": plan,
        "seconds": seconds,
        "targets": Report.findings_json(found),
        "verdicts": [v.to_dict() for v in verdicts],
        "tally": tally(verdicts),
        "frontier": frontier["summary"],
        "lm": lm["summary"],
    }
    return report.write(out)
