"""`RunFolder`: a run's folder (docs/training.md), what is written there and what a resume reads; rank 0 writes it."""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bdh.outputs import check_output, empty_folder, folder_entries, folder_lock, write_text

from ...model.io import CheckpointError
from ..config import RunConfig, load_run_config
from ..errors import TrainingError
from ..runtime.device import Runtime
from . import checkpoint as ckpt
from .log import MetricsLog


class RunFolder:
    """One run's folder: ``path``, its lock (until `close`), ``metrics``, ``last_checkpoint``, ``best`` (None
    at first)."""

    def __init__(self, config: RunConfig, runtime: Runtime, *, resume: Path | None, overwrite: bool) -> None:
        """The folder ``resume``, else ``config.run_dir`` (new or empty, or emptied with ``overwrite``), else
        runs/<timestamp>[-<name>]; its path goes to ``config.run_dir``."""
        self.runtime = runtime
        self._lock = contextlib.ExitStack()
        try:
            self.path = self._make(config, resume, overwrite)
        except BaseException:
            self._lock.close()
            raise
        config.run_dir = str(self.path)
        self.metrics = MetricsLog(self.path / "metrics.jsonl")
        self.last_checkpoint: Path | None = None
        self.best: dict[str, Any] | None = None

    def _make(self, config: RunConfig, resume: Path | None, overwrite: bool) -> Path:
        """The folder, made and locked by rank 0, its path broadcast to every process."""
        path = None
        if self.runtime.env.is_main:
            if resume is not None:
                p = Path(resume)
            elif config.run_dir:
                p = Path(config.run_dir)
            else:
                p = new_run_dir(config.name)
            if resume is None:  # never the run's own inputs, nor a folder holding one (--overwrite would delete them)
                check_output(p, overwrite=True, inputs=config.inputs(), folder=True, flag="run_dir")
            self._lock.enter_context(folder_lock(p))
            if resume is None and folder_entries(p):
                if not overwrite:
                    raise TrainingError(
                        f"run_dir: {p} already exists and is not empty; continue it with bdh train --resume {p}, "
                        "start it anew with --overwrite, or pick another run_dir"
                    )
                empty_folder(p)
            path = str(p)
        return Path(self.runtime.broadcast(path))

    def start(self, config: RunConfig, resumed_at: int | None) -> None:
        """Write config.yaml (rank 0); a resume at ``resumed_at`` first drops later steps from metrics.jsonl."""
        if not self.runtime.env.is_main:
            return
        if resumed_at is not None:
            self.metrics.truncate_after(resumed_at)
        write_text(self.path / "config.yaml", config.to_yaml())

    # ------------------------------------------------------------------ resume
    def checkpoint_to_resume(self, chosen: Path | None) -> Path | None:
        """The checkpoint a resume loads: ``chosen``, else the newest (None: the run has none yet)."""
        found = ckpt.list_checkpoints(self.path)
        return chosen or (found[-1] if found else None)

    def load(
        self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
    ) -> ckpt.Checkpoint:
        """Load checkpoint ``path`` and its best evaluation; a damaged one is refused naming the previous good one."""
        try:
            state = ckpt.load_checkpoint(path, model, optimizer, device)
        except CheckpointError as exc:
            previous = ckpt.latest_good(self.path, before=path)
            hint = (
                f"; the previous good checkpoint {previous.name} is still there: resume from it with "
                f"--checkpoint {previous.name}"
                if previous
                else ""
            )
            raise CheckpointError(f"{exc}{hint}") from None
        self.best = state.meta.get("best")
        self.last_checkpoint = path
        return state

    # ------------------------------------------------------------------ writing
    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        state: dict[str, torch.Tensor],
        meta: dict[str, Any],
        keep: int,
    ) -> Path | None:
        """Write checkpoints/step-``step`` with ``state`` and ``meta``, keeping ``keep``; every process gathers a
        sharded model."""
        weights = self.runtime.full_weights(model)  # gathered by every process, written by rank 0
        optimizer_state = self.runtime.full_optimizer_state(optimizer)
        path = None
        if self.runtime.env.is_main:
            meta = {**meta, "best": self.best}
            path = ckpt.save_checkpoint(
                self.path, step, model, optimizer, state, meta, keep, weights=weights, optimizer_state=optimizer_state
            )
        self.runtime.barrier()
        self.last_checkpoint = self.path / "checkpoints" / f"step-{step}"
        return path

    def keep_best(
        self, metrics: dict[str, float], target_metric: tuple[str, bool], model: nn.Module, step: int, tokens: int
    ) -> None:
        """Keep ``metrics`` if the best so far (the task's ``target_metric``, else ``val_loss``) and write best/
        (rank 0)."""
        name, higher = target_metric
        key = f"val_{name}"
        if key not in metrics:
            key = "val_loss"
            higher = False
        value = metrics[key]
        if self.best is not None and not (value > self.best["value"] if higher else value < self.best["value"]):
            return
        self.best = {"step": step, "metric": key, "value": value}
        weights = self.runtime.full_weights(model)
        if self.runtime.env.is_main:
            meta = {"step": step, "tokens": tokens, "metric": key, "value": value, "metrics": metrics}
            ckpt.save_best(self.path, model, meta, weights=weights)

    def close(self) -> None:
        """Release the folder's lock."""
        self._lock.close()


def new_run_dir(name: str | None) -> Path:
    """runs/<timestamp>, followed by ``-<name>`` when given, and by ``-2``, ``-3``, ... when that exists."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / (f"{stamp}-{name}" if name else stamp)
    p, k = base, 1
    while p.exists():
        k += 1
        p = base.with_name(f"{base.name}-{k}")
    return p


__all__ = ["RunFolder", "load_run_config", "new_run_dir"]
