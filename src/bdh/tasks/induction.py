"""Induction heads (Gu & Dao 2023, "Mamba", section 4.1.2, Table 11): recall the token after a trigger, asked again at
the end. The ``induction`` task.

``k = triggers`` trigger ids each occur twice, the answer scored where the trigger recurs; k = 1 is the paper's task, k
> 1 ours (docs/tasks.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError

from ..typed_config import bounded
from .base import IGNORE_INDEX
from .common import TaskConfig, check_batch_args, check_seed, rng
from .mqar import _distinct, mqar_metrics


def _item_order(gen: np.random.Generator, n: int, k: int) -> np.ndarray:
    """(n, 2k-1) items in slot order: a uniform permutation of the valid orders (each pair before its re-occurrence)."""
    order = np.argsort(gen.random((n, 2 * k - 1)), axis=1)
    rank = np.argsort(order, axis=1)  # slot of each item
    rows = np.arange(n)
    for j in range(k - 1):
        swap = rank[:, k + j] < rank[:, j]
        a, b = rank[swap, j], rank[swap, k + j]
        order[rows[swap], a], order[rows[swap], b] = k + j, j
    return order


def generate_induction(
    gen: np.random.Generator, n: int, length: int, *, vocab_size: int = 16, triggers: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences (inputs, targets), (n, length) int64 each, from ``gen`` alone (docs/tasks.md)."""
    k, plain = triggers, vocab_size - triggers
    check_induction_args(vocab_size, length, triggers)
    x = gen.integers(0, plain, size=(n, length))
    y = np.full((n, length), IGNORE_INDEX, dtype=np.int64)
    answers = gen.integers(0, plain, size=(n, k))
    trig = plain + np.argsort(gen.random((n, k)), axis=1)  # trigger id of pair j; trig[:, k-1] is asked last
    m = 2 * k - 1
    slots = np.sort(_distinct(gen, n, 0, length - k - 1, m), axis=1)  # the items' places among the units
    order = _item_order(gen, n, k)
    width = np.where(order < k, 2, 1)  # tokens of the item in each slot
    pos = slots + np.cumsum(width - 1, axis=1) - (width - 1)
    who = np.where(order < k, order, order - k)  # the trigger an item belongs to
    np.put_along_axis(x, pos, np.take_along_axis(trig, who, axis=1), axis=1)
    pair = order < k
    rows = np.nonzero(pair)[0]
    x[rows, pos[pair] + 1] = answers[rows, who[pair]]
    rows = np.nonzero(~pair)[0]
    y[rows, pos[~pair]] = answers[rows, who[~pair]]
    x[:, -1], y[:, -1] = trig[:, k - 1], answers[:, k - 1]
    return x, y


def check_induction_args(vocab_size: int, length: int, triggers: int) -> None:
    """Room for the plain tokens and the items: at least 2 plain tokens, and ``length >= 3 k``."""
    if vocab_size - triggers < 2:
        raise UserError(f"induction: {triggers} trigger(s) leave fewer than 2 plain tokens of {vocab_size}")
    if length < 3 * triggers:
        raise UserError(f"induction: {length} tokens have no room for {triggers} trigger(s) (need 3 per trigger)")


@dataclass
class InductionConfig(TaskConfig):
    """The ``induction`` task."""

    seq_len: int = bounded(256, ge=3)  # tokens per sequence T.
    vocab_size: int = bounded(16, ge=3)  # V, the triggers included.
    triggers: int = bounded(1, ge=1)  # k (trigger, answer) pairs per sequence; 1 is the paper's task.
    val_batches: int = bounded(8, ge=1)  # batches in one pass over the validation split (it is endless otherwise).

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            check_induction_args(self.vocab_size, self.seq_len, self.triggers)
        except ValueError as exc:
            self._fail("triggers", str(exc).removeprefix("induction: "))


class Induction:
    """Induction heads: the answer after a trigger, asked when the trigger recurs (docs/tasks.md)."""

    name = "induction"
    config_class = InductionConfig
    causal = True
    target_metric = ("accuracy", True)

    @classmethod
    def model_fields(cls, config: InductionConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), from its config alone."""
        return {"vocab_size": config.vocab_size, "causal": cls.causal, "seq_len": config.seq_len}

    def __init__(self, config: InductionConfig | None = None):
        self.config = InductionConfig() if config is None else config
        self.seq_len = self.config.seq_len
        self.vocab_size = self.config.vocab_size

    def generate(self, gen: np.random.Generator, n: int, length: int, gap: int | None = None):
        """``n`` sequences of ``length`` tokens from ``gen`` (``gap`` has no meaning here and must be None)."""
        if gap is not None:
            raise UserError(f"induction: sequences have no gap, got gap={gap}")
        cfg = self.config
        return generate_induction(gen, n, length, vocab_size=cfg.vocab_size, triggers=cfg.triggers)

    def test_gap(self, length: int) -> None:
        """The gap a test set of ``length`` tokens reports: none (see `bdh.tasks.lengths`)."""
        return None

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh sequences for every (seed, split, index)."""
        sid = check_batch_args(split, index, batch_size)
        x, y = self.generate(rng(check_seed(seed), sid, int(index)), batch_size, self.seq_len)
        return torch.from_numpy(x), torch.from_numpy(y)

    def num_batches(self, split: str, batch_size: int) -> int | None:
        return None if split == "train" else self.config.val_batches

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """``accuracy``: the share of scored positions whose argmax is the answer."""
        return {"accuracy": mqar_metrics(logits, targets, inputs)["accuracy"]}
