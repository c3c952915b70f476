"""The task protocol shared by the trainer, the benchmarks and every task module (docs/tasks.md).

A task's batches are a *pure function* of ``(split, index, batch_size, seed)``, so a resumed run continues
exactly with no iterator state to save. `StreamTask` adds consecutive windows (what ``train.bptt=tbptt`` needs);
`decided_fields` gives what a task decides of the model from its config alone."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

#: target value of positions that are not scored (PyTorch's cross-entropy default)
IGNORE_INDEX = -100


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task.

    Optional attributes (read with ``getattr``): ``train_seq_len``, tokens per training example when shorter than
    ``seq_len`` (MQAR); ``per_token_metrics``, metrics that evaluation weights by scored tokens instead of examples.
    """

    name: str
    vocab_size: int  # number of input token ids the model must embed.
    seq_len: int  # tokens per example (the model's window T).
    causal: bool  # True for next-token tasks; False for whole-board tasks read bidirectionally.
    target_metric: tuple[str, bool]  # the metric ``best/`` checkpoints are chosen by, and whether higher is better.

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number ``index`` of ``split`` (``train`` or ``val``): (inputs, targets), both (B, T) int64,
        targets = IGNORE_INDEX where nothing is scored. Deterministic in its arguments."""
        ...

    def num_batches(self, split: str, batch_size: int) -> int | None:
        """How many distinct batches one pass over ``split`` has (None for an endless stream)."""
        ...

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """Task metrics computed on the same predictions the loss sees (logits (B, T, V))."""
        ...


@runtime_checkable
class StreamTask(Task, Protocol):
    """A task that also serves consecutive windows (the ``text`` task) for truncated backprop through time: a split cut
    into ``batch_size`` lanes, row b of stream batch ``index + 1`` continuing row b of batch ``index``."""

    def lane_windows(self, split: str, batch_size: int) -> int:
        """Windows per lane when ``split`` is cut into ``batch_size`` lanes (a `bdh.errors.UserError` when
        the split is too short for them)."""
        ...

    def stream_batch(
        self, split: str, index: int, batch_size: int, seed: int, stream_windows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Stream batch ``index`` of ``split``: (inputs, targets, reset), ``reset`` True when the batch starts new
        streams (a
        carried state must start from zero); deterministic in its arguments."""
        ...


#: the model fields a task decides (its vocabulary, how it is read, its length), where the run leaves them out
MODEL_FIELDS = ("vocab_size", "causal", "seq_len")


def decided_fields(task_class: type, config: Any) -> dict[str, Any]:
    """The `MODEL_FIELDS` the task ``task_class`` built on ``config`` has: its classmethod ``model_fields(config)``
    where it has one (``text`` answers without reading its data), else read off the task built on ``config``."""
    own = getattr(task_class, "model_fields", None)
    if own is not None:
        return dict(own(config))
    task = task_class(config)
    return {key: getattr(task, key) for key in MODEL_FIELDS}
