"""Helpers of the task modules: typed configs (`TaskConfig`) and per-batch generators seeded by integer sequences."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from bdh.errors import UserError

from ..typed_config import TypedConfig

#: split name -> the integer mixed into every seed of that split (train and val never share a stream)
SPLIT_IDS = {"train": 0, "val": 1}


class TaskConfig(TypedConfig):
    """Typed config of a task, with the data-seed helper (``data_seed: int | None = bounded(None, ge=0)``)."""

    #: the fields that name files or folders the task reads (a run's output may not hold them: `input_paths`)
    INPUTS: ClassVar[tuple[str, ...]] = ()

    def input_paths(self) -> list[str]:
        """The `INPUTS` fields that are set: files the task reads (``--overwrite`` never deletes them)."""
        return [str(v) for v in (getattr(self, name) for name in self.INPUTS) if v is not None]

    def data_seed_for(self, seed: int) -> int:
        """The seed the data sets are drawn from: ``data_seed`` when set, else the run's seed."""
        value = getattr(self, "data_seed", None)
        return check_seed(seed) if value is None else int(value)


def split_id(split: str) -> int:
    """The integer of a split name; one-line ValueError for anything but ``train`` / ``val``."""
    if split not in SPLIT_IDS:
        raise UserError(f"unknown split {split!r}; use 'train' or 'val'")
    return SPLIT_IDS[split]


def check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def rng(*keys: int) -> np.random.Generator:
    """A numpy Generator that depends only on the integer ``keys`` (e.g. seed, split id, block)."""
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in keys]))


def check_batch_args(split: str, index: int, batch_size: int) -> int:
    sid = split_id(split)
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
        raise UserError(f"batch index must be a non-negative integer, got {index!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise UserError(f"batch_size must be a positive integer, got {batch_size!r}")
    return sid


def epoch_order(n: int, seed: int, epoch: int, stream: int) -> np.ndarray:
    """The order of ``n`` training examples in ``epoch``: a permutation drawn from (seed, stream, epoch)."""
    return rng(seed, stream, epoch).permutation(n)


def shuffled_indices(n: int, start: int, count: int, seed: int, stream: int) -> np.ndarray:
    """Ids ``start .. start+count`` of an endless stream visiting all ``n`` examples once per epoch,
    freshly shuffled."""
    pos = np.arange(start, start + count)
    epochs, within = pos // n, pos % n
    out = np.empty(count, dtype=np.int64)
    for e in np.unique(epochs):
        m = epochs == e
        out[m] = epoch_order(n, seed, int(e), stream)[within[m]]
    return out
