"""The task protocol shared by the trainer, the benchmarks and every task module.

A task is a small object built from a typed config. Its batches are a *pure function* of
``(split, index, batch_size, seed)``: the trainer asks for batch number ``index`` and always gets the
same tensors, which is what makes a resumed run continue exactly (no hidden iterator state to save).

`Task` is what every task has. `StreamTask` declares an optional capability: consecutive windows, which
truncated backprop through time (``train.bptt=tbptt``) needs; check it with ``isinstance(task, StreamTask)``.
`decided_fields` gives what a task decides of the model (`MODEL_FIELDS`) from its config alone, for a run
config to complete its ``model`` section when it is read.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

#: target value of positions that are not scored (PyTorch's cross-entropy default)
IGNORE_INDEX = -100


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task.

    Attributes:
        name: registry name of the task (``text``, ``mqar``, ``boardpath``, ``sudoku``, ...).
        vocab_size: number of input token ids the model must embed.
        seq_len: tokens per example (the model's window T).
        causal: True for next-token tasks; False for whole-board tasks read bidirectionally.
        target_metric: the metric ``best/`` checkpoints are chosen by, and whether higher is better.

    Optional attributes (read with ``getattr``, so they are not protocol members):
        train_seq_len: tokens per training example when shorter than ``seq_len`` (MQAR trains on short
            slices and validates on longer ones); the trainer counts training tokens with it.
        per_token_metrics: names of metrics that are means over scored tokens with a number of scored
            tokens that differs between examples; evaluation weights them by a batch's scored tokens, every
            other metric by the batch's examples (`bdh.train.evaluate`).
    """

    name: str
    vocab_size: int
    seq_len: int
    causal: bool
    target_metric: tuple[str, bool]

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
    """A task that also serves consecutive windows (the ``text`` task): what training with truncated backprop
    through time (``train.bptt=tbptt``) needs. A split is cut into ``batch_size`` lanes read side by side;
    row b of stream batch ``index + 1`` continues row b of stream batch ``index``."""

    def lane_windows(self, split: str, batch_size: int) -> int:
        """Windows per lane when ``split`` is cut into ``batch_size`` lanes (a `bdh.errors.UserError` when
        the split is too short for them)."""
        ...

    def stream_batch(
        self, split: str, index: int, batch_size: int, seed: int, stream_windows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Stream batch ``index`` of ``split``: (inputs, targets, reset), ``reset`` True when the batch starts
        new streams (a carried recurrent state must start from zero): a new pass over the lanes, or, with
        ``stream_windows`` K, every K batches (streams of K windows at random places). Deterministic in its
        arguments."""
        ...


#: the model fields a task decides (its vocabulary, how it is read, its length), where the run leaves them out
MODEL_FIELDS = ("vocab_size", "causal", "seq_len")


def decided_fields(task_class: type, config: Any) -> dict[str, Any]:
    """The `MODEL_FIELDS` the task ``task_class`` built on ``config`` has: its classmethod ``model_fields(config)``
    where it has one (a task that reads data when it is built, ``text``, answers without reading it), else read
    off the task built on ``config``."""
    own = getattr(task_class, "model_fields", None)
    if own is not None:
        return dict(own(config))
    task = task_class(config)
    return {key: getattr(task, key) for key in MODEL_FIELDS}
