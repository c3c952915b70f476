"""``bdh experiment relatives``: the two suites trained through the bench engine, then the verdicts and the report.

Output folder: the marker ``relatives.json``, ``frontier/`` and ``lm/`` (``bdh bench`` output folders, whose
runs.csv ledgers ``--resume`` continues), ``figures/``, report.md and results.json."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from bdh.bench import recall, runner

from ..scaffold import ExperimentFolder, Log
from . import lm
from .config import Config
from .costs import estimate, plan_text
from .verdict import compare

#: config fields that only choose which runs are made (or how fast): a resumed folder may change them
SELECTORS = ("models", "seeds", "jobs", "probe_steps")
#: the output folder; its marker file ``relatives.json`` is what ``--resume`` continues
FOLDER = ExperimentFolder("relatives", SELECTORS)
MARKER = FOLDER.marker
prepare_resume = FOLDER.prepare_resume


def parts(config: Config) -> dict[str, tuple[Any, list, int, int]]:
    """The two suites: name -> (suite, runs, vocabulary, validation windows per run)."""
    frontier, language = config.frontier_sweep(), config.lm_sweep()
    return {
        "frontier": (recall.suite_def(frontier), recall.plan(frontier), frontier.vocab_size, frontier.num_val_examples),
        "lm": (lm.suite_def(language), lm.plan(language), lm.BYTES, language.eval_batches * language.eval_batch_size),
    }


def describe_plan(config: Config, probe_steps: int | None = None) -> str:
    """The runs and their estimated cost, each model timed on this machine for ``probe_steps`` steps (default the
    config's; 0: the runs only). ``--show-config`` prints it."""
    probe = config.probe_steps if probe_steps is None else probe_steps
    suites = parts(config)
    f, L = config.frontier_sweep(), config.lm_sweep()
    header = [
        f"relatives plan: (a) MQAR frontier: {len(f.models)} models x {len(f.widths)} widths x {len(f.settings())} "
        f"(N, D) x {len(f.lrs)} lr x {len(f.seeds)} seeds, {f.steps} steps of {f.batch_size}; "
        f"(b) LM: {len(L.models)} models x 2 budgets ({L.steps} steps of {L.batch_size} x {L.seq_len} bytes; "
        f"{L.minutes:g} min) x {len(L.lrs)} lr x {len(L.seeds)} seeds",
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // config.jobs))  # a run's share, as the workers will have it
    try:
        timed = estimate({k: v[1:] for k, v in suites.items()}, probe, config.device)
        return plan_text(timed, header, probe, config.jobs)
    finally:
        torch.set_num_threads(threads)


def run(config: Config, out: Path, *, log: Log = print, resume: bool = False) -> Path:
    """Train both suites (with ``resume``, only the runs not yet in their ledgers), then write the verdicts, the
    figures, report.md and results.json into ``out``; returns the report's path."""
    from .report import write_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    FOLDER.mark(config.to_dict(), out, resume)
    start = time.time()
    suites = parts(config)
    plan = describe_plan(config, probe_steps=0)
    log(plan)
    done: dict[str, tuple[Any, dict[str, Any]]] = {}
    for name, (suite, specs, _, _) in suites.items():
        opts = runner.BenchOptions(out=out / name, resume=resume, device=config.device, jobs=config.jobs, plots=False)
        done[name] = (suite, runner.run_suite(suite, specs, opts, log=log))
    verdicts = [
        v
        for suite, result in done.values()
        for v in compare(result["results"], suite.name, suite.score[0], suite.higher_is_better)
    ]
    report = write_report(out, config, done, verdicts, plan, time.time() - start)
    log(f"relatives: done in {(time.time() - start) / 60:.1f} min")
    return report
