"""The run folders under a directory and what each achieved (`list_runs`, ``bdh runs``), read from files only."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError

from ..config import read_config_file
from .checkpoint import list_checkpoints
from .log import _warn, read_metrics

#: the column titles of `RunSummary.row`, in order
COLUMNS = ("run", "model", "task", "step", "tokens", "best", "last val_bpb", "checkpoint")


@dataclass(frozen=True)
class RunSummary:
    """What one run folder says of itself."""

    path: Path  # the run folder.
    # model, task: the registered names in its config (``?`` when missing).
    model: str
    task: str
    # step, total_steps: the last logged training step and the run's length (``total_steps`` from the last checkpoint
    # when a time budget shortened the run; ``?`` when unknown).
    step: int
    total_steps: int | str
    tokens: int  # training tokens at the last logged step.
    # ``(metric, value, step)`` of ``best/meta.json``; None when there is none, ``"?"`` when damaged.
    best: tuple[str, float, int] | str | None
    last_val_bpb: float | None  # the last evaluation's bits per byte (None when there is none or it is not finite).
    checkpoint: str | None  # the name of the last checkpoint folder (None when there is none).
    # step_limit, max_minutes: the steps its config's ``train.max_steps`` allows and its time budget (None when unknown
    # or none): a run its budget planned shorter than its limit shows both, and the budget.
    step_limit: int | None = None
    max_minutes: float | None = None

    def steps(self) -> str:
        """Trained against planned steps: ``186/186``, or ``186/186 of 2000 (cut by train.max_minutes=10)``."""
        text = f"{self.step}/{self.total_steps}"
        limit, total = self.step_limit, self.total_steps
        if self.max_minutes is None or limit is None or not isinstance(total, int) or total >= limit:
            return text
        return f"{text} of {limit} (cut by train.max_minutes={self.max_minutes:g})"

    def row(self) -> tuple[str, ...]:
        """The summary as the text cells of `COLUMNS`."""
        if isinstance(self.best, tuple):
            best = f"{self.best[0]} {self.best[1]:.4f} @{self.best[2]}"
        else:
            best = self.best or "-"
        return (
            self.path.name,
            self.model,
            self.task,
            self.steps(),
            f"{self.tokens:,}",
            best,
            "-" if self.last_val_bpb is None else f"{self.last_val_bpb:.4f}",
            self.checkpoint or "-",
        )


def run_folders(root: str | Path) -> list[Path]:
    """``root`` if a run folder, else the run folders in it, sorted; a path that is not a folder is refused."""
    root = Path(root)
    if not root.is_dir():
        if root.exists():
            raise UserError(f"{root}: not a folder; give a folder of run folders, or a run folder")
        raise FileNotFoundError(f"{root}: no such folder")
    if (root / "config.yaml").is_file():
        return [root]
    return sorted(p for p in root.iterdir() if (p / "config.yaml").is_file())


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when it is missing or damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _best(run: Path) -> tuple[str, float, int] | str | None:
    """``best/meta.json`` as (metric, value, step); ``"?"`` when it is there but damaged."""
    path = run / "best" / "meta.json"
    if not path.is_file():
        return None
    meta = _read_json(path)
    try:
        return (str(meta["metric"]), float(meta["value"]), int(meta["step"]))  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return "?"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _step_limit(train: dict[str, Any], trained: list[dict[str, Any]]) -> int | None:
    """The steps ``train.max_steps`` and ``train.max_tokens`` allow; None when unknown."""
    limit, tokens = train.get("max_steps"), train.get("max_tokens")
    if not _is_int(limit):
        return None
    if tokens is not None:
        last = trained[-1] if trained else {}
        if not (_is_int(tokens) and _is_int(last.get("tokens")) and _is_int(last.get("step")) and last["step"] > 0):
            return None
        per_step = max(1, last["tokens"] // last["step"])
        limit = min(limit, max(1, -(-tokens // per_step)))
    return limit


def _section(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    """A section of a config.yaml as read, {} where it is missing or not a mapping (an edited or damaged file)."""
    value = cfg.get(key)
    return value if isinstance(value, dict) else {}


def summarize_run(run: str | Path) -> RunSummary | None:
    """The summary of one run folder; None when its ``config.yaml`` cannot be read."""
    run = Path(run)
    try:
        cfg = read_config_file(run / "config.yaml")
    except (ValueError, FileNotFoundError):
        return None
    records = read_metrics(run / "metrics.jsonl")
    trained = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    train = _section(cfg, "train")
    total: int | str = train.get("max_steps", "?")
    checkpoints = list_checkpoints(run)
    if checkpoints:  # a time budget may have shortened the run: the checkpoint knows its length
        total = (_read_json(checkpoints[-1] / "meta.json") or {}).get("total_steps", total)
    last = evals[-1].get("val_bpb") if evals else None
    limit, minutes = _step_limit(train, trained), train.get("max_minutes")
    return RunSummary(
        path=run,
        model=str(_section(cfg, "model").get("name", "?")),
        task=str(_section(cfg, "task").get("name", "?")),
        step=int(trained[-1]["step"]) if trained else 0,
        total_steps=total,
        tokens=int(trained[-1].get("tokens", 0)) if trained else 0,
        best=_best(run),
        last_val_bpb=float(last) if isinstance(last, (int, float)) and math.isfinite(last) else None,
        checkpoint=checkpoints[-1].name if checkpoints else None,
        step_limit=limit,
        max_minutes=float(minutes) if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) else None,
    )


def list_runs(root: str | Path) -> list[RunSummary]:
    """The summaries of the runs under ``root``; an unreadable run is skipped with a warning (``root``
    itself: refused)."""
    folders, summaries = run_folders(root), []
    for run in folders:
        try:
            summary = summarize_run(run)
        except (UserError, OSError) as exc:
            if folders == [Path(root)]:
                raise
            _warn(f"{str(exc) if isinstance(exc, UserError) else f'{run}: {exc.strerror or exc}'}; {run} not listed")
            continue
        if summary is not None:
            summaries.append(summary)
    return summaries


__all__ = ["COLUMNS", "RunSummary", "list_runs", "run_folders", "summarize_run"]
