"""The cells of the length experiment's tables: rows pooled over seeds with their Wilson interval, and how a cell and
a model's read are written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bdh.tasks.lengths import wilson_interval


def _table_key(row: dict[str, Any]) -> tuple:
    return (row["task"], row["model"], row["read"], row["length"])


def pooled(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], tuple] = _table_key) -> dict[tuple, dict]:
    """``key(row)`` (default (task, model, read, length)) -> the seeds pooled: right and scored summed, the Wilson
    interval of the sum, the seeds' accuracies, or the status of a row that was not read."""
    out: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key_of_row = key(row)
        cell = out.setdefault(key_of_row, {"right": 0, "n": 0, "seeds": [], "status": "ok"})
        if row["status"] != "ok":
            cell["status"] = row["status"]
            continue
        cell["right"] += row["right"]
        cell["n"] += row["n"]
        cell["seeds"].append(row["accuracy"])
    for cell in out.values():
        if cell["n"]:
            cell["accuracy"] = cell["right"] / cell["n"]
            cell["low"], cell["high"] = wilson_interval(cell["right"], cell["n"])
    return out


def read_label(model: str, read: str) -> str:
    if read == "state-hard":
        return f"{model} (read with the hard gate)"
    if read == "state-hard-top1":
        return f"{model} (read with the hard gate, top-1 writes)"
    return model if read in ("state", "whole") else f"{model} ({read} of T)"


def cell_text(cell: dict[str, Any] | None, seeds: int) -> str:
    """A table cell: the pooled accuracy and its interval (with the seeds read, where not all were), OOM, n/a (a
    model that cannot read the length), or – (not read)."""
    if cell is None:
        return "–"
    if "accuracy" not in cell:
        return "OOM" if cell["status"].startswith("out of memory") else "n/a"
    some = f" [{len(cell['seeds'])} of {seeds} seeds]" if len(cell["seeds"]) < seeds else ""
    return f"{cell['accuracy']:.2f} ({cell['low']:.2f}–{cell['high']:.2f}){some}"
