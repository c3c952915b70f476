"""The ledger of ``bdh experiment length``: ``results/<run>.json``, one run's training record and its read rows,
written as each row ends and read back by ``--resume``. A record read back is checked before it counts: a damaged
file (cut, empty, not JSON, not the object written), a row read twice (it would count twice in the report) or a
score a read cannot give (not a finite fraction) is one line naming the file and how to rebuild it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..ledger import Ledger, RecordError

__all__ = ["RecordError", "ledger", "read_record", "record_problem", "run_name"]

#: the fields of every record (`experiment.train_run`) and of every row (`experiment.read_row`)
RECORD_FIELDS = ("model", "task", "seed", "rows")
ROW_FIELDS = ("length", "read", "status")
#: the fields of an ``ok`` row that are fractions of the test set
FRACTIONS = ("accuracy", "low", "high")


def ledger(out: Path) -> Ledger:
    """The ledger of the experiment's folder ``out``: a damaged record refused with the command that rebuilds it."""
    out = Path(out)
    rebuild = (
        "not the record this experiment writes: delete it and run the same command with --resume (bdh experiment "
        f"length --out {out} --resume, with the same --quick and --set): its run is trained and read again"
    )
    return Ledger(out / "results", rebuild=rebuild)


def read_record(out: Path, model: str, task: str, seed: int, facts: int | None = None) -> dict[str, Any] | None:
    """The record of the run (``model``, ``task``, ``seed``, trained on ``facts`` pairs where given) in ``out``,
    checked (`record_problem`), or None when it has none; a damaged one is a `RecordError` saying how to make it
    again."""
    run = (model, task, seed, facts)
    return ledger(out).find(run_name(*run), check=lambda record: record_problem(record, run))


def record_problem(record: Any, run: tuple[str, str, int, int | None]) -> str | None:
    """What is wrong with a record (an object) read back as the one of ``run`` (model, task, seed, facts), or None:
    fields missing, another run's, a row that is not an object or lacks its fields, one (length, read, facts) twice,
    an ``ok`` row's score not a fraction."""
    missing = [k for k in RECORD_FIELDS if k not in record]
    if missing:
        return f"has no {', '.join(missing)}"
    theirs = (record["model"], record["task"], record["seed"], record.get("facts"))
    if theirs != tuple(run):
        return f"is the record of {_name(theirs)}, not of {_name(run)}"
    if not isinstance(record["rows"], list):
        return "has rows that are not a list"
    seen: set[tuple[Any, ...]] = set()
    for i, row in enumerate(record["rows"]):
        problem = _row_problem(row)
        key = None if problem else (row["length"], row["read"], row.get("facts"))
        if key in seen:
            problem = f"reads length {row['length']} ({row['read']}) a second time, which would count twice"
        if problem is not None:
            return f"row {i + 1} {problem}"
        seen.add(key)
    return None


def run_name(model: str, task: str, seed: int, facts: int | None = None) -> str:
    """A run's name: model, task, the trained count where the config gives one (``facts``), seed."""
    return f"{model}-{task}-s{seed}" if facts is None else f"{model}-{task}-D{facts}-s{seed}"


def _name(run: tuple[Any, ...]) -> str:
    model, task, seed, facts = run
    return run_name(model, task, seed, facts)


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict) or any(k not in row for k in ROW_FIELDS):
        return f"is not a read row (an object with {', '.join(ROW_FIELDS)})"
    if not isinstance(row["length"], int) or isinstance(row["length"], bool) or row["length"] < 1:
        return f"has length {row['length']!r}, not a positive whole number"
    if row["status"] != "ok":
        return None
    for key in FRACTIONS:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)):
            return f"has {key} {value!r}, not a finite number"
        if not 0 <= value <= 1:
            return f"has {key} {value!r}, not a fraction in [0, 1]"
    return None
