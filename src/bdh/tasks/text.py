"""Byte-level language modelling (vocabulary 256): the ``text`` task.

One memory-mapped byte stream (a file, a folder's files, or the embedded Shakespeare) split into ``train`` then ``val``.
`TextTask.batch` gives random training windows and spread validation ones; `TextTask.stream_batch` consecutive windows
for truncated BPTT."""

from __future__ import annotations

import lzma
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bdh.errors import UserError
from bdh.outputs import input_file

from ..typed_config import bounded
from .base import IGNORE_INDEX
from .common import TaskConfig
from .facts import MIN_DISTANCE, PAIR_BYTES, Overlay, apply_overlays, plan_facts

#: the name that selects the embedded corpus in ``task.data``
EMBEDDED = "shakespeare"
EMBEDDED_FILE = "shakespeare.txt.xz"
SPLITS = ("train", "val", "all")
#: whole-lane streams (``train.tbptt_windows`` null) plan the recall curriculum's facts per this many windows
LANE_FACT_WINDOWS = 32
LN2 = math.log(2.0)


@dataclass
class TextConfig(TaskConfig):
    """Configuration of the byte-level text task."""

    # a text file, a folder of files (sorted by path, concatenated), or ``shakespeare`` / null for the embedded corpus.
    data: str | None = None
    seq_len: int = bounded(256, ge=1)
    val_fraction: float = bounded(0.1, gt=0, lt=1)  # share of the stream (its end) held out for validation.
    # the recall curriculum (`bdh.tasks.facts`): mean fact/question pairs per 1,000 bytes of each training row; 0 trains
    # on the corpus alone. Validation text is never changed.
    facts: float = bounded(0.0, ge=0, le=100)
    # the longest distance in bytes between a fact and its question (null: the row's length).
    fact_reach: int | None = bounded(None, ge=MIN_DISTANCE)

    def input_paths(self) -> list[str]:
        """The file or folder ``data`` names (none for the embedded corpus)."""
        return [] if self.data is None or self.data == EMBEDDED else [str(Path(self.data).expanduser())]

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.data is not None and (not isinstance(self.data, str) or not self.data):
            self._fail("data", f"must be a path or null, got {self.data!r}")


class ByteStream:
    """A read-only byte sequence made of memory-mapped files (or one in-memory buffer)."""

    def __init__(self, segments: list[np.ndarray], source: str):
        self.segments = [s for s in segments if len(s)]
        self.source = source
        self.starts = np.cumsum([0] + [len(s) for s in self.segments])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, start: int, length: int) -> np.ndarray:
        """Bytes [start, start + length) as a uint8 array (copied; may span several files)."""
        if start < 0 or start + length > len(self):
            raise IndexError(
                f"{self.source}: bytes [{start}, {start + length}) are outside the {len(self)}-byte stream"
            )
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        parts, need, pos = [], length, start - int(self.starts[i])
        while need > 0:
            seg = self.segments[i]
            take = min(need, len(seg) - pos)
            parts.append(np.asarray(seg[pos : pos + take]))
            need -= take
            i, pos = i + 1, 0
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()


def embedded_corpus() -> bytes:
    """The embedded default corpus, decompressed (about 4.8 MB of plain text)."""
    return lzma.decompress(resources.files("bdh.data").joinpath(EMBEDDED_FILE).read_bytes())


def open_stream(data: str | None) -> ByteStream:
    """The bytes of a file, a folder of files, or the embedded corpus (``None`` or ``shakespeare``)."""
    if data is None or data == EMBEDDED:
        return ByteStream([np.frombuffer(embedded_corpus(), dtype=np.uint8)], EMBEDDED)
    path = Path(data).expanduser()
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise UserError(f"task.data: {data}: the folder holds no files")
    else:  # a file; a FIFO or device is refused by name, never opened
        files = [input_file(path, "task.data:", missing="no such file or folder")]
    segments = [np.memmap(f, dtype=np.uint8, mode="r") for f in files if f.stat().st_size > 0]
    if not segments:
        raise UserError(f"task.data: {data}: the corpus is empty (0 bytes)")
    return ByteStream(segments, str(data))


def spread(order: np.ndarray, count: int) -> np.ndarray:
    """The window of each place in the evaluation order, ``order * g mod count`` (g near ``count`` / golden ratio):
    every prefix spreads evenly."""
    g = max(1, round(count * 0.6180339887498949))
    while math.gcd(g, count) != 1:
        g += 1
    return (order * g) % count


class TextTask:
    """Next-byte prediction on a byte stream; metrics: loss (nats), bits per byte, accuracy."""

    config_class = TextConfig
    name = "text"
    vocab_size = 256
    causal = True
    target_metric = ("bpb", False)

    @classmethod
    def model_fields(cls, config: TextConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), without reading the data."""
        return {"vocab_size": cls.vocab_size, "causal": cls.causal, "seq_len": config.seq_len}

    def __init__(self, config: TextConfig | None = None, *, whole: bool = False):
        """``whole=True`` skips the train/val split: the stream is only read as split ``all`` (evaluation of a file)."""
        self.config = config or TextConfig()
        self.seq_len = self.config.seq_len
        self.stream = open_stream(self.config.data)
        n = len(self.stream)
        need = self.seq_len + 1
        if whole:
            self.n_train = 0
            if n < need:
                raise UserError(
                    f"task.data: the corpus ({n:,} bytes) is shorter than one window of seq_len + 1 = {need} bytes"
                )
            return
        self.n_train = int(round(n * (1.0 - self.config.val_fraction)))
        if self.n_train < need or n - self.n_train < need:
            raise UserError(
                f"task.data: the corpus ({n:,} bytes) is shorter than one window: train ({self.n_train:,} bytes) "
                f"and val ({n - self.n_train:,} bytes) each need seq_len + 1 = {need} bytes; "
                "use a smaller task.seq_len or more text"
            )

    # ------------------------------------------------------------------ splits
    def _bounds(self, split: str) -> tuple[int, int]:
        if split == "train":
            return 0, self.n_train
        if split == "val":
            return self.n_train, len(self.stream)
        if split == "all":
            return 0, len(self.stream)
        raise UserError(f"text: unknown split {split!r}; use one of {', '.join(SPLITS)}")

    def split_bytes(self, split: str) -> int:
        lo, hi = self._bounds(split)
        return hi - lo

    def _windows(
        self, starts: np.ndarray, facts: list[list[Overlay]] | None = None, offset: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of T + 1 bytes from ``starts``, with ``facts[b]`` written over row b."""
        T = self.seq_len
        rows = [self.stream.read(int(s), T + 1) for s in starts]
        if facts is not None:
            rows = [apply_overlays(r, f, offset) for r, f in zip(rows, facts, strict=True)]
        rows = np.stack(rows).astype(np.int64)
        data = torch.from_numpy(rows)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def _seq_windows(self, split: str) -> int:
        return (self.split_bytes(split) - 1) // self.seq_len

    # ------------------------------------------------------------------ the Task protocol
    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch ``index``: seeded random windows of ``train``, or ``val`` (or ``all``) in `spread` order;
        indices wrap."""
        lo, hi = self._bounds(split)
        if split == "train":
            rng = np.random.Generator(np.random.PCG64([seed, index, 0x7E47]))
            starts = lo + rng.integers(0, hi - lo - self.seq_len, size=batch_size)
            return self._windows(starts, self._plan_facts([seed, index], batch_size, self.seq_len + 1))
        else:
            nw = self._seq_windows(split)
            w = index * batch_size + np.arange(batch_size)
            w = w[w < nw] if w[0] < nw else w % nw  # the last batch of a pass is short
            starts = lo + spread(w, nw) * self.seq_len
        return self._windows(starts)

    def num_batches(self, split: str, batch_size: int) -> int | None:
        """``val`` / ``all``: batches that cover every window once; ``train``: None (endless)."""
        if split == "train":
            return None
        return -(-self._seq_windows(split) // batch_size)

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """Mean cross-entropy (nats), bits per byte and next-byte accuracy over the scored positions."""
        scored = targets != IGNORE_INDEX
        count = int(scored.sum())
        if count == 0:
            return {}
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
        )
        acc = (logits.argmax(-1) == targets)[scored].float().mean()
        return {"loss": float(loss), "bpb": float(loss) / LN2, "acc": float(acc)}

    # ------------------------------------------------------------------ consecutive windows (TBPTT)
    def lane_windows(self, split: str, batch_size: int) -> int:
        """Windows per lane when ``split`` is cut into ``batch_size`` lanes for `stream_batch`."""
        lane = self.split_bytes(split) // batch_size
        windows = (lane - 1) // self.seq_len
        if windows < 1:
            raise UserError(
                f"task.data: {split} ({self.split_bytes(split):,} bytes) is too short for {batch_size} lanes of "
                f"seq_len + 1 = {self.seq_len + 1} bytes; lower the batch size or task.seq_len"
            )
        return windows

    def stream_batch(
        self, split: str, index: int, batch_size: int, seed: int, stream_windows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Batch ``index`` of consecutive windows, (inputs, targets, reset): ``stream_windows`` None: lanes read to
        their end, each pass shifted; K: streams of K windows at seeded places."""
        if stream_windows is not None:
            return self._random_streams(split, index, batch_size, seed, stream_windows)
        lo, hi = self._bounds(split)
        lane = (hi - lo) // batch_size
        windows = self.lane_windows(split, batch_size)
        epoch, w = divmod(index, windows)
        slack = lane - 1 - windows * self.seq_len
        shift = int(np.random.Generator(np.random.PCG64([seed, epoch, 0x57E4])).integers(0, slack + 1))
        starts = lo + np.arange(batch_size) * lane + shift + w * self.seq_len
        block, at = divmod(w, LANE_FACT_WINDOWS)  # facts are planned per block of windows of a lane
        length = LANE_FACT_WINDOWS * self.seq_len  # a block's last byte is the next block's first: left alone
        facts = self._plan_facts([seed, epoch, block], batch_size, length) if split == "train" else None
        inputs, targets = self._windows(starts, facts, at * self.seq_len)
        return inputs, targets, w == 0

    def _random_streams(
        self, split: str, index: int, batch_size: int, seed: int, stream_windows: int
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """`stream_batch` with streams of ``stream_windows`` windows at random places (see there)."""
        lo, hi = self._bounds(split)
        span = stream_windows * self.seq_len + 1
        if span > hi - lo:
            raise UserError(
                f"train.tbptt_windows: a stream of {stream_windows} windows of {self.seq_len} bytes is longer than "
                f"the {split} split ({hi - lo:,} bytes); use fewer windows"
            )
        stream, w = divmod(index, stream_windows)
        rng = np.random.Generator(np.random.PCG64([seed, stream, 0x5A7E]))
        starts = lo + rng.integers(0, hi - lo - span + 1, size=batch_size) + w * self.seq_len
        facts = self._plan_facts([seed, stream], batch_size, span) if split == "train" else None
        inputs, targets = self._windows(starts, facts, w * self.seq_len)
        return inputs, targets, w == 0

    def check_training_rows(self, bptt: str, stream_windows: int | None) -> None:
        """Refuse a ``task.facts`` no training row can hold (it would silently train on the corpus alone)."""
        if self.config.facts <= 0:
            return
        windows = (stream_windows or LANE_FACT_WINDOWS) if bptt == "tbptt" else None
        row = self.seq_len + 1 if windows is None else windows * self.seq_len
        need = PAIR_BYTES + MIN_DISTANCE
        if row < need:
            raise UserError(
                f"task.facts: a training row of {row} bytes cannot hold a fact, its question and the {MIN_DISTANCE} "
                f"bytes between them ({need} bytes), so no fact would be written; raise task.seq_len to "
                f"{need - 1 if windows is None else -(-need // windows)} or more, or set task.facts=0"
            )

    def _plan_facts(self, key: list[int], rows: int, length: int) -> list[list[Overlay]] | None:
        """The recall overlays of ``rows`` training rows of ``length`` bytes, seeded by ``key``; None without facts."""
        if self.config.facts <= 0:
            return None
        rng = np.random.Generator(np.random.PCG64([*key, 0xFAC7]))
        reach = self.config.fact_reach or length
        return [plan_facts(rng, length, self.config.facts, reach) for _ in range(rows)]
