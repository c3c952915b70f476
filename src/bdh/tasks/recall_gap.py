"""Recall through a gap (the ``recall_gap`` task): MQAR's D key-value pairs, G filler tokens, then the keys again.

Fillers are never a key or value of the example; training gaps are uniform in [0, min(gap_max, seq_len - 4D)],
validation uses ``val_gap`` (docs/tasks.md)."""

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


def check_recall_gap_args(vocab_size: int, num_kv_pairs: int, length: int, gap: int) -> None:
    """D distinct keys in [1, V/2), at least one filler token, and room for the pairs, the gap and the questions."""
    D = num_kv_pairs
    if D > vocab_size // 2 - 1:
        raise UserError(f"recall_gap: {D} distinct keys do not fit in the key range [1, {vocab_size // 2})")
    if vocab_size - 2 * D < 1:
        raise UserError(f"recall_gap: no filler token is left by {D} keys and values of {vocab_size}")
    if gap < 0 or 4 * D + gap > length:
        raise UserError(f"recall_gap: {length} tokens have no room for {D} pairs, their questions and a gap of {gap}")


def _fillers(gen: np.random.Generator, n: int, length: int, taken: np.ndarray, vocab_size: int) -> np.ndarray:
    """(n, length) tokens uniform over [0, V) without each row's ``taken`` ids (n, m)."""
    out = gen.integers(0, vocab_size - taken.shape[1], size=(n, length))
    for col in np.sort(taken, axis=1).T:
        out += out >= col[:, None]
    return out


def generate_recall_gap(
    gen: np.random.Generator,
    n: int,
    length: int,
    gap: int | np.ndarray,
    *,
    vocab_size: int = 256,
    num_kv_pairs: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples (inputs, targets), (n, length) int64 each, with ``gap`` (one or per example), from
    ``gen`` alone."""
    D, V = num_kv_pairs, vocab_size
    gaps = np.broadcast_to(np.asarray(gap, dtype=np.int64), (n,))
    check_recall_gap_args(V, D, length, int(gaps.max(initial=0)))
    check_recall_gap_args(V, D, length, int(gaps.min(initial=0)))
    keys = _distinct(gen, n, 1, V // 2, D)
    values = _distinct(gen, n, V // 2, V, D)
    x = _fillers(gen, n, length, np.concatenate([keys, values], axis=1), V)
    pairs = np.stack([keys, values], axis=2).reshape(n, 2 * D)
    start = length - 4 * D - gaps  # where the pairs begin (after the prefix)
    np.put_along_axis(x, start[:, None] + np.arange(2 * D), pairs, axis=1)
    ask = np.argsort(gen.random((n, D)), axis=1)
    questions = np.stack([np.take_along_axis(keys, ask, 1), np.take_along_axis(values, ask, 1)], axis=2)
    x[:, length - 2 * D :] = questions.reshape(n, 2 * D)
    y = np.full((n, length), IGNORE_INDEX, dtype=np.int64)
    y[:, length - 2 * D :: 2] = questions[:, :, 1]
    return x, y


@dataclass
class RecallGapConfig(TaskConfig):
    """The ``recall_gap`` task."""

    seq_len: int = bounded(256, ge=4)
    vocab_size: int = bounded(256, ge=4)  # V; keys from [1, V/2), values from [V/2, V).
    num_kv_pairs: int = bounded(8, ge=1)  # D key-value pairs per example (4 D <= seq_len).
    gap_max: int = bounded(64, ge=0)  # training gaps are uniform in [0, min(gap_max, seq_len - 4D)].
    # the gap of every validation example; null: the whole room, seq_len - 4D.
    val_gap: int | None = bounded(None, ge=0)
    val_batches: int = bounded(8, ge=1)  # batches in one pass over the validation split.

    def __post_init__(self) -> None:
        super().__post_init__()
        for field, gap in (("num_kv_pairs", 0), ("val_gap", self.val_gap or 0)):
            try:
                check_recall_gap_args(self.vocab_size, self.num_kv_pairs, self.seq_len, gap)
            except ValueError as exc:
                self._fail(field, str(exc).removeprefix("recall_gap: "))


class RecallGap:
    """Recall of D facts through a gap of fillers (docs/tasks.md)."""

    name = "recall_gap"
    config_class = RecallGapConfig
    causal = True
    target_metric = ("accuracy", True)

    @classmethod
    def model_fields(cls, config: RecallGapConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), from its config alone."""
        return {"vocab_size": config.vocab_size, "causal": cls.causal, "seq_len": config.seq_len}

    def __init__(self, config: RecallGapConfig | None = None):
        self.config = RecallGapConfig() if config is None else config
        self.seq_len = self.config.seq_len
        self.vocab_size = self.config.vocab_size

    def test_gap(self, length: int) -> int:
        """The gap of a test example of ``length`` tokens: the whole room, ``length - 4D``."""
        return length - 4 * self.config.num_kv_pairs

    def generate(self, gen: np.random.Generator, n: int, length: int, gap: int | np.ndarray | None = None):
        """``n`` examples of ``length`` tokens from ``gen`` with gap ``gap`` (None: `test_gap`)."""
        cfg = self.config
        gap = self.test_gap(length) if gap is None else gap
        return generate_recall_gap(gen, n, length, gap, vocab_size=cfg.vocab_size, num_kv_pairs=cfg.num_kv_pairs)

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh examples per (seed, split, index): random gaps in training, ``val_gap`` in validation."""
        sid = check_batch_args(split, index, batch_size)
        gen = rng(check_seed(seed), sid, int(index))
        cfg = self.config
        if split == "train":
            gap = gen.integers(0, min(cfg.gap_max, self.test_gap(self.seq_len)) + 1, size=batch_size)
        else:
            gap = cfg.val_gap
        x, y = self.generate(gen, batch_size, self.seq_len, gap)
        return torch.from_numpy(x), torch.from_numpy(y)

    def num_batches(self, split: str, batch_size: int) -> int | None:
        return None if split == "train" else self.config.val_batches

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """``accuracy``: the share of questions answered right (argmax = the value)."""
        return {"accuracy": mqar_metrics(logits, targets, inputs)["accuracy"]}
