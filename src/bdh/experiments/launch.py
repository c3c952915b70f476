"""Running a registered experiment as ``bdh experiment NAME`` does: the output folder chosen, refused, emptied or
(``resume``) continued, locked for the run, and an interruption of a resumable experiment turned into a result."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


def resumable(name: str) -> bool:
    """Whether experiment ``name`` continues an output folder (``resume``) and has a GPU-sized preset (``full``):
    its module declares ``prepare_resume`` (with the ``MARKER`` file of its folders and ``Config.full``)."""
    from bdh.registry import help_of

    return help_of("experiment", name).resumes


def kept_runs(out: Path) -> str:
    """What an interrupted experiment kept, naming only what is there: its runs folder (``runs/``), or the
    ledgers of the suites it trains through the bench engine (``relatives``: ``frontier/runs.csv``, ...)."""
    places = [p for p in (out / "runs", *sorted(out.glob("*/runs.csv"))) if p.exists()]
    if not places:
        return "no run had finished yet"
    return "the finished runs are kept in " + " and ".join(str(p) for p in places)


def default_out(name: str) -> Path:
    """The output folder when none is given: ``runs/experiment-NAME-<timestamp>``."""
    return Path("runs") / f"experiment-{name}-{datetime.now():%Y%m%d-%H%M%S}"


@dataclass(frozen=True)
class ExperimentRun:
    """What an experiment run left: its ``report`` (``report.md``, None when interrupted) in ``out``, the
    ``minutes`` it took, and for an experiment that can continue and was stopped by a signal, the
    ``interrupted`` exception and what was ``kept``."""

    name: str
    out: Path
    report: Path | None
    minutes: float
    interrupted: KeyboardInterrupt | None = None
    kept: str = ""

    def summary(self) -> str:
        """The line ``bdh experiment`` prints on stdout after a finished run: the report and the minutes."""
        return f"{self.report}  ({self.minutes:.1f} min)"


def _refusal_advice(name: str, module: Any, out: Path) -> str:
    """What refusing a non-empty ``out`` advises: ``--resume`` too when it holds an earlier (interrupted) run of
    the same resumable experiment."""
    ours = resumable(name) and (out / module.MARKER).is_file()
    return f"{'add --resume to continue it or ' if ours else ''}pass --overwrite to replace it"


def run_experiment(
    name: str,
    config: Any,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> ExperimentRun:
    """Run experiment ``name`` with ``config`` into ``out`` (`default_out` when None); ``log`` gets the progress lines.

    An experiment's ``check_before_training(config)``, where it has one, runs first, before ``out`` is touched. A
    `KeyboardInterrupt` of a resumable experiment returns a run with ``interrupted`` set (finished runs kept in
    ``out/runs``); any other experiment lets it through."""
    from bdh.experiments.common import prepare_out
    from bdh.outputs import folder_lock
    from bdh.registry import get_experiment

    module = get_experiment(name)
    out = Path(out) if out is not None else default_out(name)
    start = time.time()
    how = _refusal_advice(name, module, out)
    check = getattr(module, "check_before_training", None)  # what would fail only after runs have trained
    if check is not None:
        check(config)
    with folder_lock(out):  # one experiment at a time in a folder
        inputs = config.inputs() if hasattr(config, "inputs") else ()  # a registered config may not have them
        folder = getattr(getattr(module, "prepare_resume", None), "__self__", None)  # its `ExperimentFolder`
        if resume and hasattr(folder, "refuse_another_preset"):  # made with another preset: the command that goes on
            folder.refuse_another_preset(config, out)
        out = module.prepare_resume(out) if resume else prepare_out(out, overwrite=overwrite, inputs=inputs, how=how)
        try:
            report = module.run(config, out, log=log, **({"resume": True} if resume else {}))
        except KeyboardInterrupt as exc:  # SIGINT or SIGTERM, during a run or after the last one
            if not resumable(name):
                raise
            kept = kept_runs(out)
            return ExperimentRun(name, out, None, (time.time() - start) / 60, interrupted=exc, kept=kept)
    return ExperimentRun(name, out, report, (time.time() - start) / 60)
