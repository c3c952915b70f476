"""Evaluation of a model on a task's held-out split: the loop behind ``Trainer.evaluate`` and ``bdh eval``.

`evaluate` scores each ``seq_len`` window from an empty context; `evaluate_carried` reads a stream task's lanes
with a recurrent state carried. Both report ``val_loss`` (nats per scored token), ``val_bpb`` and
``val_<metric>`` (docs/tasks.md)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from bdh.errors import UserError
from bdh.model_api import carries_state

from ..tasks.base import IGNORE_INDEX
from .errors import TrainingError

LN2 = math.log(2.0)


class Ticker(Protocol):
    """What the evaluation loops report progress to (`bdh.train.run.log.EvalProgress`)."""

    def update(self, done: int) -> None: ...

    def close(self) -> None: ...


class _Scores:
    """Sums over scored batches: loss per scored token, and each metric weighted by examples (or scored tokens for
    ``per_token_metrics``), averaged over the batches that report it."""

    def __init__(self, task: Any):
        self.task = task
        self.per_token = frozenset(getattr(task, "per_token_metrics", ()))
        self.loss_sum, self.count = 0.0, 0
        self.sums: dict[str, float] = {}
        self.weights: dict[str, int] = {}
        self.row_losses: list[torch.Tensor] = []  # per scored row (example): summed loss and scored tokens
        self.row_counts: list[torch.Tensor] = []

    def add(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> None:
        """Score one batch; a batch without scored targets is skipped (it has neither loss nor metrics)."""
        logits = logits.float()
        c = int((targets != IGNORE_INDEX).sum())
        if c == 0:
            return
        per_token = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
        ).view(targets.shape[0], -1)
        counts = (targets != IGNORE_INDEX).reshape(targets.shape[0], -1).sum(1)
        self.row_losses.append(per_token.sum(1)[counts > 0].double())  # on the model's device until `loss_se`
        self.row_counts.append(counts[counts > 0].double())
        self.loss_sum += float(per_token.sum())
        self.count += c
        rows = int(targets.shape[0])
        for key, value in self.task.metrics(logits, targets, inputs).items():
            # only the batches that report a key count for it (per-slice metrics appear only in their slice's)
            w = c if key in self.per_token else rows
            self.sums[key] = self.sums.get(key, 0.0) + float(value) * w
            self.weights[key] = self.weights.get(key, 0) + w

    def metrics(self) -> dict[str, float]:
        """The task's metrics under their own names, averaged over the batches that report each."""
        return {k: v / self.weights[k] for k, v in self.sums.items()}

    def loss(self) -> float:
        """Nats per scored token (NaN when nothing was scored)."""
        return self.loss_sum / self.count if self.count else float("nan")

    def loss_se(self) -> float:
        """The standard error of `loss` over the windows (delta method for sum(l_i) / sum(c_i)), NaN for fewer
        than two."""
        if not self.row_losses:
            return float("nan")
        l, c = torch.cat(self.row_losses), torch.cat(self.row_counts)
        n = l.numel()
        if n < 2:
            return float("nan")
        m = l.sum() / c.sum()
        return float(((l - m * c).square().sum() * n / (n - 1)).sqrt() / c.sum())

    def result(self) -> dict[str, float]:
        """``val_loss``, ``val_bpb``, ``val_bpb_se`` and ``val_<name>`` per task metric; empty when nothing
        was scored."""
        if self.count == 0:
            return {}
        out = {f"val_{k}": v for k, v in self.metrics().items()}
        out["val_loss"] = self.loss()
        out["val_bpb"] = out["val_loss"] / LN2
        out["val_bpb_se"] = self.loss_se() / LN2
        return out


@torch.no_grad()
def _score(
    model: nn.Module,
    task: Any,
    windows: Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    progress: Ticker | None,
) -> _Scores:
    """The loop: ``model`` in eval mode (restored after), no gradients, every window of ``windows`` scored,
    ``progress`` told."""
    was_training = model.training
    model.eval()
    scores = _Scores(task)
    try:
        for done, (logits, targets, inputs) in enumerate(windows, 1):
            scores.add(logits, targets, inputs)
            if progress is not None:
                progress.update(done)
    finally:
        model.train(was_training)
        if progress is not None:
            progress.close()
    return scores


def eval_batch_count(task: Any, split: str, batch_size: int, batches: int | None) -> int:
    """The batches an evaluation of ``split`` reads: ``batches``, at most one pass; a `TrainingError` if endless
    and None."""
    n = task.num_batches(split, batch_size)
    n = batches if n is None else (n if batches is None else min(n, batches))
    if n is None:
        raise TrainingError(f"eval.batches: task {task.name!r} has an endless {split} split; give a number")
    return n


def _independent(
    model: nn.Module,
    task: Any,
    batch_size: int,
    batches: int | None,
    seed: int,
    autocast,
    split: str,
    progress: Ticker | None,
) -> _Scores:
    """The scores of the first ``batches`` batches of ``split`` (all of them when None), each window on its own."""
    device = next(model.parameters()).device
    n = eval_batch_count(task, split, batch_size, batches)

    def windows() -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for i in range(n):
            inputs, targets = task.batch(split, i, batch_size, seed)
            inputs, targets = inputs.to(device), targets.to(device)
            with autocast():
                logits = model(inputs)
            yield logits, targets, inputs

    return _score(model, task, windows(), progress)


def evaluate(
    model: nn.Module,
    task: Any,
    batch_size: int,
    batches: int | None,
    seed: int,
    autocast=contextlib.nullcontext,
    split: str = "val",
    progress: Ticker | None = None,
) -> dict[str, float]:
    """Validation metrics of ``model`` over the first ``batches`` batches of ``split`` (None: all); empty if
    nothing scored."""
    return _independent(model, task, batch_size, batches, seed, autocast, split, progress).result()


def evaluate_metrics(
    model: nn.Module,
    task: Any,
    batch_size: int,
    batches: int | None,
    seed: int,
    autocast=contextlib.nullcontext,
    split: str = "val",
    progress: Ticker | None = None,
) -> tuple[dict[str, float], float]:
    """`evaluate` as ``(metrics, loss)``: metrics without the ``val_`` prefix, the loss in nats (NaN if
    nothing scored)."""
    scores = _independent(model, task, batch_size, batches, seed, autocast, split, progress)
    return scores.metrics(), scores.loss()


def check_carry(model: nn.Module, task: Any, name: str = "--carry-state") -> None:
    """A one-line `UserError` unless ``model`` has a recurrent state and ``task`` consecutive windows."""
    kind = type(model).__name__
    if not carries_state(model):
        raise UserError(
            f"{name}: the model ({kind}) has no recurrent state to carry across windows "
            "(it declares no fixed-size state); --sliding reads long text through a window of its trained context"
        )
    if not getattr(getattr(model, "config", None), "causal", True):
        raise UserError(f"{name}: a bidirectional model (causal=false) has no recurrent state to carry")
    if not callable(getattr(task, "stream_batch", None)):
        raise UserError(
            f"{name}: task {getattr(task, 'name', type(task).__name__)!r} has no consecutive windows "
            "(stream_batch); only a text task can be read as one stream"
        )


def carried_window_count(task: Any, split: str, lanes: int, windows: int | None) -> int:
    """Windows read per lane by `evaluate_carried`: ``windows``, at most the lane's length (all when None)."""
    available = task.lane_windows(split, lanes)
    return available if windows is None else min(windows, available)


def evaluate_carried(
    model: nn.Module,
    task: Any,
    lanes: int,
    windows: int | None,
    seed: int,
    autocast=contextlib.nullcontext,
    split: str = "val",
    progress: Ticker | None = None,
) -> dict[str, float]:
    """Validation metrics with the state carried: the first ``windows`` windows of ``lanes`` lanes read
    with ``model.step``."""
    check_carry(model, task, "evaluate_carried")
    device = next(model.parameters()).device
    n = carried_window_count(task, split, lanes, windows)

    def carried() -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        state = model.init_state(lanes)  # on the model's device
        for i in range(n):
            inputs, targets, reset = task.stream_batch(split, i, lanes, seed)
            if reset and i > 0:  # cannot happen for i < lane_windows; a guard against a changed task
                raise RuntimeError(f"evaluate_carried: the stream of {split} started over at window {i}")
            inputs, targets = inputs.to(device), targets.to(device)
            with autocast():
                logits, state = model.step(inputs, state)
            yield logits, targets, inputs

    return _score(model, task, carried(), progress).result()


__all__ = [
    "carried_window_count",
    "check_carry",
    "eval_batch_count",
    "evaluate",
    "evaluate_carried",
    "evaluate_metrics",
]
