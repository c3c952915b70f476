"""What a run reports: ``metrics.jsonl``, a progress bar or plain lines, and TensorBoard when installed."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from bdh.outputs import write_text


class MetricsLog:
    """Append-only ``metrics.jsonl``: one JSON object per training record or evaluation."""

    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (a resumed run rewrites what the lost steps had logged)."""
        if not self.path.is_file():
            return
        keep = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if int(record.get("step", 0)) <= step:
                keep.append(line)
        write_text(self.path, "".join(line + "\n" for line in keep))

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (unreadable lines are skipped)."""
    out = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


class TensorBoard:
    """Scalars to ``RUN_DIR/tensorboard`` when the ``tensorboard`` package is installed; a no-op otherwise."""

    def __init__(self, folder: Path, enabled: bool):
        self.writer = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                return
            self.writer = SummaryWriter(str(folder))

    def scalars(self, prefix: str, values: dict[str, Any], step: int) -> None:
        if self.writer is None:
            return
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("step",):
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Progress:
    """A progress bar with loss, tokens/s and ETA (tqdm) in a terminal, or one plain line per evaluation.

    ``mode``: ``bar``, ``lines``, ``none`` or ``auto`` (a bar when ``stream`` is a terminal).
    """

    def __init__(self, total: int, initial: int, mode: str, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.total, self.start_step, self.start_time = total, initial, time.time()
        self.bar = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, file=self.stream, unit="step", dynamic_ncols=True, desc="train")

    def update(self, step: int, loss: float, tok_per_s: float) -> None:
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix_str(f"loss {loss:.4f}, {tok_per_s:,.0f} tok/s", refresh=False)

    def eta(self, step: int) -> float:
        done = step - self.start_step
        if done <= 0:
            return math.nan
        return (time.time() - self.start_time) / done * (self.total - step)

    def message(self, text: str) -> None:
        """A line that stays (an evaluation, a checkpoint): above the bar, or on its own line."""
        if self.mode == "none":
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def eval_line(self, step: int, loss: float, tok_per_s: float, metrics: dict[str, float]) -> None:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        eta = self.eta(step)
        eta_s = "" if math.isnan(eta) or step >= self.total else f", ETA {_hms(eta)}"
        self.message(f"step {step}/{self.total}: train loss {loss:.4f}, {shown}, {tok_per_s:,.0f} tok/s{eta_s}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
