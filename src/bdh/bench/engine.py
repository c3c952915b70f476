"""The engine of every sweep of training runs (``bdh bench``, relatives, scaling): a spec's ``key()`` and
``run_name()``, `fit` to train one, a ledger of the finished ones for resume (`TableLedger`, `RunLedger`), and
`train_all` for the rest, serially or ``jobs`` at once."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, Protocol

from bdh.errors import Interrupted

from .results import write_csv

Row = dict[str, Any]


class Spec(Protocol):
    """What the engine needs of a run's spec (`bdh.bench.spec.RunSpec`, the scaling experiment's `RunSpec`)."""

    model: str

    def key(self) -> Any:
        """What identifies the run's result (compared on resume)."""
        ...

    def run_name(self) -> str:
        """The run folder's name (below the model's folder, or including it)."""
        ...


class Ledger(Protocol):
    """Where the finished runs of a sweep are recorded, and found again on resume."""

    def find(self, spec: Any) -> Row | None:
        """The recorded result of ``spec``, or None when it has not finished."""
        ...

    def add(self, spec: Any, run_dir: Path, row: Row) -> None:
        """Record the result ``row`` of ``spec``, trained in ``run_dir`` (atomically)."""
        ...


class TableLedger:
    """One table of result rows (``runs.csv``) rewritten per finished run; ``key_of`` gives a row's key."""

    def __init__(self, path: Path, rows: list[Row], key_of: Callable[[Row], Hashable], columns: Sequence[str]) -> None:
        self.path, self.rows, self.columns = Path(path), rows, list(columns)
        self._by_key = {key_of(r): r for r in rows}

    def find(self, spec: Any) -> Row | None:
        return self._by_key.get(spec.key())

    def add(self, spec: Any, run_dir: Path, row: Row) -> None:
        self.rows.append(row)
        self._by_key[spec.key()] = row
        write_csv(self.path, self.rows, self.columns)


def fit(config: Any, interrupted: type[Interrupted] = Interrupted) -> Any:
    """Train ``config`` with the public trainer; a run stopped by SIGINT/SIGTERM raises ``interrupted``."""
    import bdh.train

    result = bdh.train.train(config)
    if result.interrupted is not None:
        raise interrupted(result.interrupted)
    return result


def pending(specs: Sequence[Any], ledger: Ledger, resume: bool) -> list[Any]:
    """The specs still to train: all of them, or with ``resume`` those ``ledger`` has no result of."""
    return [s for s in specs if not resume or ledger.find(s) is None]


def clear(run_dir: Path) -> None:
    """Remove what an interrupted attempt left in ``run_dir``: a run is always trained from its start."""
    if run_dir.exists():
        shutil.rmtree(run_dir)


def train_fresh(spec: Any, run_dir: Path, ledger: Ledger, train: Callable[[Any, Path], Row]) -> Row:
    """Train ``spec`` into a cleared ``run_dir`` and record its row in ``ledger``; returns the row."""
    clear(run_dir)
    row = train(spec, run_dir)
    ledger.add(spec, run_dir, row)
    return row


def train_or_reuse(
    spec: Any, run_dir: Path, ledger: Ledger, train: Callable[[Any, Path], Row], resume: bool
) -> tuple[Row, bool]:
    """``(row, reused)``: with ``resume`` the result ``ledger`` holds for ``spec``, else `train_fresh`."""
    found = ledger.find(spec) if resume else None
    if found is not None:
        return found, True
    return train_fresh(spec, run_dir, ledger, train), False


def train_all(
    specs: Sequence[Any],
    run_dir: Callable[[Any], Path],
    ledger: Ledger,
    train: Callable[[Any, Path], Row],
    *,
    jobs: int = 1,
    on_start: Callable[[int, Any], None] = lambda i, spec: None,
    on_done: Callable[[int, Any, Row], None] = lambda i, spec, row: None,
    interrupted: type[Interrupted] = Interrupted,
) -> None:
    """Train every spec anew and record its row as it finishes, serially or ``jobs`` at once (``train`` picklable);
    ``on_start`` and ``on_done`` run here, which alone writes the ledger."""
    if jobs <= 1 or len(specs) <= 1:
        for i, spec in enumerate(specs, 1):
            on_start(i, spec)
            on_done(i, spec, train_fresh(spec, run_dir(spec), ledger, train))
        return
    from .workers import Job, run_jobs

    def start(job: Job) -> None:
        clear(job.run_dir)
        on_start(job.index, job.spec)

    def done(job: Job, row: Row) -> None:
        ledger.add(job.spec, job.run_dir, row)
        on_done(job.index, job.spec, row)

    jobs_ = [Job(i, spec, run_dir(spec)) for i, spec in enumerate(specs, 1)]
    run_jobs(jobs_, train, jobs, start, done, interrupted)
