"""The ledger of ``bdh experiment length``: ``results/<run>.json``, one run's training record and its read rows,
written as each row ends and read back by ``--resume``. A record read back is checked before it counts: a damaged
file (cut, empty, not JSON, not the object written), a row read twice (it would count twice in the report) or a
score a read cannot give (not a finite fraction) is one line naming the file and how to rebuild it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bdh.errors import UserError

#: the fields of every record (`experiment.train_run`) and of every row (`experiment.read_row`)
RECORD_FIELDS = ("model", "task", "seed", "rows")
ROW_FIELDS = ("length", "read", "status")
#: the fields of an ``ok`` row that are fractions of the test set
FRACTIONS = ("accuracy", "low", "high")


class RecordError(UserError):
    """A ``results/<run>.json`` that is not a record as the experiment wrote it."""


def read_record(path: Path, model: str, task: str, seed: int, facts: int | None = None) -> dict[str, Any]:
    """The record of the run (``model``, ``task``, ``seed``, trained on ``facts`` pairs where given) at ``path``,
    checked (`record_problem`); a damaged one is a `RecordError` saying how to make it again."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        record, problem = None, "is not text"
    except ValueError as exc:
        record, problem = None, f"is not JSON ({str(exc).splitlines()[0]})"
    else:
        problem = record_problem(record, (model, task, seed, facts))
    if problem is not None:
        raise RecordError(
            f"{path}: {problem}; not the record this experiment writes: delete it and run the same command with "
            f"--resume (bdh experiment length --out {path.parent.parent} --resume, with the same --quick and --set): "
            "its run is trained and read again"
        )
    return record


def record_problem(record: Any, run: tuple[str, str, int, int | None]) -> str | None:
    """What is wrong with a record read back as the one of ``run`` (model, task, seed, facts), or None: not an
    object, fields missing, another run's, a row that is not an object or lacks its fields, one (length, read, facts)
    twice, an ``ok`` row's score not a fraction."""
    if not isinstance(record, dict):
        return f"holds a JSON {type(record).__name__}, not an object"
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
