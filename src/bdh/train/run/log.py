"""What a run reports: ``metrics.jsonl``, a progress bar or lines, TensorBoard when installed, W&B when asked."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from bdh.errors import UserError
from bdh.outputs import NO_SPACE, DiskFull, append_text, file_problem, write_text

#: RUN_DIR/WANDB_ID_FILE holds the W&B run id, so that ``bdh train --resume`` continues the same W&B run
WANDB_ID_FILE = "wandb-id"


class MetricsLog:
    """Append-only ``metrics.jsonl``: one JSON object per training record or evaluation."""

    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop the records after ``step`` (for a resume) and damaged lines (with one warning)."""
        if not os.path.lexists(self.path):
            return
        lines, damaged = _metric_lines(self.path)
        keep = [line for line, record in lines if int(record.get("step", 0)) <= step]
        if damaged:
            _warn(f"{self.path}: {damaged} damaged line(s) dropped (repaired; {len(keep)} records kept)")
        write_text(self.path, "".join(line + "\n" for line in keep))

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as one line (whole or not at all: `bdh.outputs.append_text`)."""
        append_text(self.path, json.dumps(record) + "\n")


def metric_text(metrics: dict[str, float], skip: tuple[str, ...] = ()) -> str:
    """``name value`` per float metric not in ``skip``; ``<name>_se`` shown as ``name value ± se``."""
    parts = []
    for k, v in metrics.items():
        if k in skip or not isinstance(v, float) or (k.endswith("_se") and k[:-3] in metrics):
            continue
        se = metrics.get(f"{k}_se")
        parts.append(f"{k} {v:.4f}" + (f" ± {se:.4f}" if isinstance(se, float) and math.isfinite(se) else ""))
    return ", ".join(parts)


def se_text(metrics: dict[str, float], key: str = "val_bpb") -> str:
    """`` ± SE (standard error)`` of ``key`` (its ``<key>_se``), or nothing when that is absent or not finite."""
    se = metrics.get(f"{key}_se", float("nan"))
    return f" ± {se:.4f} (standard error)" if math.isfinite(se) else ""


def _warn(message: str) -> None:
    print(f"bdh: warning: {message}", file=sys.stderr, flush=True)


def _metric_lines(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """The good lines of a metrics.jsonl with their records, and the count of damaged ones; a non-regular path
    is refused."""
    problem = file_problem(path)
    if problem is not None:
        raise UserError(f"{path}: {problem}; metrics.jsonl must be a regular file")
    good, damaged = [], 0
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("step", 0), int):
                raise ValueError("not a record")
        except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            damaged += 1
            continue
        good.append((line, record))
    return good, damaged


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl ([] if none), damaged lines skipped with one warning."""
    if not os.path.lexists(path):
        return []
    lines, damaged = _metric_lines(path)
    if damaged:
        _warn(f"{path}: {damaged} damaged line(s) skipped ({len(lines)} records read)")
    return [record for _, record in lines]


def _scalars(values: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a record, without its step."""
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}


@contextlib.contextmanager
def _disk_full_named(folder: Path) -> Iterator[None]:
    """A full disk under a logger's writes as a one-line `DiskFull` naming its folder; other errors as they are."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        raise DiskFull(folder, exc.errno, kept="the checkpoints written so far are whole") from None


class TensorBoard:
    """Scalars to ``RUN_DIR/tensorboard`` if ``tensorboard`` is installed, and to `WandB` with ``log.wandb``."""

    def __init__(self, folder: Path, enabled: bool, wandb: Any = None):
        self.folder = folder
        self.writer = None
        self.wandb = WandB(folder.parent, wandb) if wandb is not None and wandb.log.wandb else None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                return
            self.writer = SummaryWriter(str(folder))

    def scalars(self, prefix: str, values: dict[str, Any], step: int) -> None:
        if self.wandb is not None:
            with _disk_full_named(self.wandb.folder):
                self.wandb.scalars(prefix, values, step)
        if self.writer is None:
            return
        with _disk_full_named(self.folder):
            for key, value in _scalars(values).items():
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            with _disk_full_named(self.folder):
                self.writer.close()
        if self.wandb is not None:
            with _disk_full_named(self.wandb.folder):
                self.wandb.close()


def check_wandb() -> None:
    """A one-line `UserError` unless the optional ``wandb`` package is installed."""
    try:
        found = importlib.util.find_spec("wandb") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UserError("log.wandb: the wandb package is not installed; pip install wandb (or set log.wandb=false)")


class WandB:
    """Scalars to a Weights & Biases run named after the run folder (``log.wandb_mode``, ``log.wandb_project``; null:
    W&B's defaults); files in ``WANDB_DIR`` or RUN_DIR/wandb; the id kept in RUN_DIR/wandb-id for resumes."""

    def __init__(self, run_dir: Path, config: Any):
        check_wandb()
        import wandb

        log = config.log
        id_file = run_dir / WANDB_ID_FILE
        run_id = id_file.read_text(encoding="utf-8").strip() if id_file.is_file() else None
        folder = None if os.environ.get("WANDB_DIR") else str(run_dir)  # W&B writes its files to <dir>/wandb
        self.folder = Path(os.environ.get("WANDB_DIR") or run_dir) / "wandb"
        self.run = wandb.init(
            project=log.wandb_project,
            mode=log.wandb_mode,
            dir=folder,
            name=run_dir.name,
            id=run_id,
            resume="allow" if run_id else None,
            config=config.to_dict(),
        )
        if run_id is None and not getattr(self.run, "disabled", False) and getattr(self.run, "id", None):
            write_text(id_file, f"{self.run.id}\n")

    def scalars(self, prefix: str, values: dict[str, Any], step: int) -> None:
        self.run.log({f"{prefix}/{k}": v for k, v in _scalars(values).items()}, step=step)

    def close(self) -> None:
        self.run.finish()


#: without a progress bar (``lines``), a line with the training loss, tokens/s and ETA at least this often, in seconds
LINE_SECONDS = 60.0


class Progress:
    """A tqdm bar in a terminal, else plain lines every ``line_seconds``; ``mode``: ``bar``, ``lines``,
    ``none``, ``auto``."""

    def __init__(
        self, total: int, initial: int, mode: str, stream: TextIO | None = None, line_seconds: float = LINE_SECONDS
    ):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.total, self.start_step, self.start_time = total, initial, time.time()
        self.line_seconds, self.line_time = line_seconds, self.start_time  # the last line shown
        self.bar = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, initial=initial, file=self.stream, unit="step", dynamic_ncols=True, desc="train"
            )

    def update(self, step: int, loss: float, tok_per_s: float) -> None:
        """After step ``step``: the bar moves, or a line when ``line_seconds`` have passed."""
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix_str(f"loss {loss:.4f}, {tok_per_s:,.0f} tok/s", refresh=False)
        elif self.mode == "lines" and time.time() - self.line_time >= self.line_seconds:
            self.line_time = time.time()
            self.message(f"step {step}/{self.total}: train loss {loss:.4f}, {tok_per_s:,.0f} tok/s{self._eta(step)}")

    def eta(self, step: int) -> float:
        done = step - self.start_step
        if done <= 0:
            return math.nan
        return (time.time() - self.start_time) / done * (self.total - step)

    def _eta(self, step: int) -> str:
        """``, ETA m:ss`` after ``step``, or nothing at the end or before a step was timed."""
        eta = self.eta(step)
        return "" if math.isnan(eta) or step >= self.total else f", ETA {_hms(eta)}"

    def message(self, text: str) -> None:
        """A line that stays (an evaluation, a checkpoint): above the bar, or on its own line."""
        if self.mode == "none":
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def eval_line(self, step: int, loss: float, tok_per_s: float, metrics: dict[str, float]) -> None:
        shown, self.line_time = metric_text(metrics), time.time()
        eta = self._eta(step)
        self.message(f"step {step}/{self.total}: train loss {loss:.4f}, {shown}, {tok_per_s:,.0f} tok/s{eta}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class RunLog:
    """What one `Trainer.fit` reports on rank 0: `Progress`, `MetricsLog`, `TensorBoard`."""

    def __init__(self, metrics: MetricsLog, config: Any, run_dir: Path, total: int, initial: int, main: bool):
        """``total``, ``initial``: the run's steps and its first; ``main``: this process reports."""
        self.main = main
        self.metrics = metrics
        self.progress = Progress(total, initial, config.log.progress if main else "none")
        self.board = TensorBoard(
            run_dir / "tensorboard", config.log.tensorboard and main, wandb=config if main else None
        )

    def message(self, text: str) -> None:
        """A line that stays (`Progress.message`)."""
        self.progress.message(text)

    def set_total(self, total: int) -> None:
        """The run now has ``total`` steps (a time budget planned it anew)."""
        self.progress.total = total
        if self.progress.bar is not None:
            self.progress.bar.total = total
            self.progress.bar.refresh()

    def train(self, record: dict[str, Any], write: bool) -> None:
        """After a training step: show its ``record`` (step, loss, tok_per_s, ...), and with ``write`` log it."""
        if not self.main:
            return
        self.progress.update(record["step"], record["loss"], record["tok_per_s"])
        if write:
            self.metrics.write(record)
            self.board.scalars("train", record, record["step"])

    def evaluation(self, step: int, tokens: int, loss: float, tok_per_s: float, metrics: dict[str, float]) -> None:
        """After an evaluation at ``step``: log its ``metrics`` and show them beside the training ``loss``."""
        if not self.main:
            return
        self.metrics.write({"kind": "eval", "step": step, "tokens": tokens, **metrics})
        self.board.scalars("eval", metrics, step)
        self.progress.eval_line(step, loss, tok_per_s, metrics)

    def close(self) -> None:
        self.progress.close()
        self.board.close()


class EvalProgress:
    """Progress of a long evaluation, as `Progress`'s ``mode``; ``unit``: what is counted (plural)."""

    def __init__(
        self, total: int, mode: str = "auto", stream: TextIO | None = None, unit: str = "batches", desc: str = "eval"
    ):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode, self.total, self.unit, self.desc = mode, total, unit, desc
        self.start_time = time.time()
        self.every = max(1, math.ceil(total / 10))
        self.shown = 0
        self.bar = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=self.stream, unit=unit, dynamic_ncols=True, desc=desc)

    def update(self, done: int) -> None:
        """``done`` of ``total`` units are finished."""
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
        elif self.mode == "lines" and (done - self.shown >= self.every or done == self.total) and done > self.shown:
            self.shown = done
            elapsed = time.time() - self.start_time
            eta = "" if done >= self.total else f", ETA {_hms(elapsed / done * (self.total - done))}"
            print(
                f"{self.desc}: {done}/{self.total} {self.unit}, {_hms(elapsed)} elapsed{eta}",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
