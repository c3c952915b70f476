"""Multi-query associative recall (MQAR) as Zoology has it (Arora et al. 2023, section 3.2, Definition 3.1, Algorithm 1;
their ``multiquery_ar``).

D key-value pairs, then each key again at a power-law query slot, its value labelled there. Slots are drawn by the
Gumbel-top-k trick (``np.random.choice(replace=False, p=p)``'s order); training slices are interleaved in proportion
(`MQAR.train_order`). docs/tasks.md."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError

from ..typed_config import bounded
from .base import IGNORE_INDEX
from .common import SPLIT_IDS, TaskConfig, check_batch_args, rng

#: examples generated together from one seed (the unit of the in-memory memo)
BLOCK = 1024
#: the last key of the seed of the training order's offsets, ``(seed, 0, 0, 0, ORDER_STREAM)``: five keys,
#: so it is never the seed of a data block ``(seed, split, slice, block)``
ORDER_STREAM = 1


def check_mqar_args(vocab_size: int, input_seq_len: int, num_kv_pairs: int) -> None:
    """Zoology's assertions, as one-line ValueErrors."""
    if input_seq_len % 2:
        raise UserError(f"MQAR: input_seq_len must be even, got {input_seq_len}")
    if vocab_size <= input_seq_len:
        raise UserError(f"MQAR: vocab_size ({vocab_size}) must be larger than input_seq_len ({input_seq_len})")
    if 4 * num_kv_pairs > input_seq_len:
        raise UserError(
            f"MQAR: no room for {num_kv_pairs} key-value pairs and their queries in {input_seq_len} tokens "
            "(need 4 * num_kv_pairs <= input_seq_len)"
        )
    if num_kv_pairs > vocab_size // 2 - 1:
        raise UserError(f"MQAR: {num_kv_pairs} distinct keys do not fit in the key range [1, {vocab_size // 2})")


def _distinct(gen: np.random.Generator, n: int, low: int, high: int, k: int) -> np.ndarray:
    """(n, k) rows of k distinct integers of [low, high), each a uniform ordered sample without replacement."""
    span = high - low
    if span < 4 * k:  # dense: a random permutation prefix of the small range
        return low + np.argsort(gen.random((n, span)), axis=1)[:, :k]
    if k * k <= 2 * span:  # sparse: redraw whole rows with a repeat (accepted with probability >= e^-1)
        out = gen.integers(low, high, size=(n, k))
        bad = np.arange(n)
        while bad.size:
            rows = np.sort(out[bad], axis=1)
            bad = bad[(rows[:, 1:] == rows[:, :-1]).any(axis=1)]
            out[bad] = gen.integers(low, high, size=(bad.size, k))
        return out
    out = np.empty((n, k), dtype=np.int64)  # in between: column by column, each redrawn until new in its row
    for j in range(k):
        col = gen.integers(low, high, size=n)
        bad = np.flatnonzero((out[:, :j] == col[:, None]).any(axis=1))
        while bad.size:
            col[bad] = gen.integers(low, high, size=bad.size)
            bad = bad[(out[bad, :j] == col[bad, None]).any(axis=1)]
        out[:, j] = col
    return out


def power_law_probs(space: int, power_a: float) -> np.ndarray:
    """Zoology's query-slot probabilities p_i ∝ a i^(a-1), i = 1..space, normalised."""
    p = power_a * np.arange(1, space + 1, dtype=np.float64) ** (power_a - 1)
    return p / p.sum()


def generate_mqar(
    gen: np.random.Generator,
    num_examples: int,
    *,
    vocab_size: int = 8192,
    input_seq_len: int = 64,
    num_kv_pairs: int = 4,
    power_a: float = 0.01,
    random_non_queries: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``num_examples`` examples (inputs, labels), (n, input_seq_len) int64 each, from ``gen`` alone."""
    check_mqar_args(vocab_size, input_seq_len, num_kv_pairs)
    n, N, D = num_examples, input_seq_len, num_kv_pairs
    half = vocab_size // 2
    keys = _distinct(gen, n, 1, half, D)
    values = _distinct(gen, n, half, vocab_size, D)
    space = (N - 2 * D) // 2
    # Gumbel-top-k = sampling D slots without replacement with probabilities p, in draw order
    scores = np.log(power_law_probs(space, power_a))[None, :] + gen.gumbel(size=(n, space))
    top = np.argpartition(-scores, D - 1, axis=1)[:, :D] if D < space else np.tile(np.arange(space), (n, 1))
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    gaps = np.take_along_axis(top, order, axis=1)  # (n, D): slot of key j
    inputs = np.zeros((n, N), dtype=np.int64)
    inputs[:, 0 : 2 * D : 2] = keys
    inputs[:, 1 : 2 * D : 2] = values
    qpos = 2 * D + 2 * gaps
    labels = np.full((n, N), IGNORE_INDEX, dtype=np.int64)
    np.put_along_axis(labels, qpos, values, axis=1)
    if random_non_queries:
        inputs[:, 2 * D :] = gen.integers(0, vocab_size, size=(n, N - 2 * D))
    np.put_along_axis(inputs, qpos, keys, axis=1)
    return inputs, labels


def _as_slices(value: object, field: str, cfg: MQARConfig) -> tuple[tuple[int, int], ...] | None:
    """A list of [input_seq_len, num_kv_pairs] pairs as a tuple of int pairs (None stays None)."""
    if value is None:
        return None
    pairs = list(value) if isinstance(value, (list, tuple)) else []
    good = bool(pairs) and all(
        isinstance(p, (list, tuple))
        and len(p) == 2
        and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in p)
        for p in pairs
    )
    if not good:
        cfg._fail(field, f"must be a non-empty list of [input_seq_len, num_kv_pairs] pairs, got {value!r}")
    return tuple((int(a), int(b)) for a, b in pairs)


@dataclass
class MQARConfig(TaskConfig):
    """MQAR data (Zoology's ``MQARConfig``, our split sizes); shorter slices right-padded with PAD (id V)
    labelled -100."""

    vocab_size: int = bounded(8192, ge=1)  # V; keys from [1, V/2), values from [V/2, V).
    input_seq_len: int = bounded(64, ge=1)  # N, tokens per example (even, < V).
    num_kv_pairs: int = bounded(4, ge=1)  # D key-value pairs per example (4 D <= N).
    power_a: float = bounded(0.01, gt=0)  # exponent a of the query-slot power law p_i ∝ a i^(a-1).
    random_non_queries: bool = True  # fillers are uniform random tokens (True, Zoology's default) or token 0.
    # the fixed training set per train slice: one count, or a list with one per slice.
    num_train_examples: int | Sequence[int] = 100_000
    num_val_examples: int = bounded(3_000, ge=1)  # size of the fixed validation set, per slice.
    # train_slices, val_slices: lists of [input_seq_len, num_kv_pairs] to mix; default the single one.
    train_slices: Sequence[Sequence[int]] | None = None
    val_slices: Sequence[Sequence[int]] | None = None
    # draw the data sets from this seed instead of the run's; null: the run's seed.
    data_seed: int | None = bounded(None, ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        self._check_bool("random_non_queries")
        self.train_slices = _as_slices(self.train_slices, "train_slices", self)
        self.val_slices = _as_slices(self.val_slices, "val_slices", self)
        for field, slices in (
            ("input_seq_len", [(self.input_seq_len, self.num_kv_pairs)]),
            ("train_slices", self.train_slices),
            ("val_slices", self.val_slices),
        ):
            for N, D in slices or ():
                if N < 2 or D < 1:
                    self._fail(field, f"input_seq_len must be >= 2 and num_kv_pairs >= 1, got [{N}, {D}]")
                try:
                    check_mqar_args(self.vocab_size, N, D)
                except ValueError as exc:
                    self._fail(field, str(exc).removeprefix("MQAR: "))
        self._check_train_sizes()

    def _check_train_sizes(self) -> None:
        """``num_train_examples``: a positive integer, or one per train slice (a tuple)."""
        value, n = self.num_train_examples, len(self.slices("train"))

        def positive(v: object) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1

        if isinstance(value, (list, tuple)):
            if not all(positive(v) for v in value):
                self._fail("num_train_examples", f"every count must be an integer >= 1, got {list(value)!r}")
            if len(value) != n:
                self._fail(
                    "num_train_examples",
                    f"has {len(value)} counts for {n} train slice(s); give one count per train slice "
                    "or one integer for all",
                )
            self.num_train_examples = tuple(int(v) for v in value)
        elif not positive(value):
            self._fail(
                "num_train_examples",
                f"must be an integer >= 1 or a list of them (one per train slice), got {value!r}",
            )

    def slices(self, split: str) -> tuple[tuple[int, int], ...]:
        """The (input_seq_len, num_kv_pairs) slices of a split, in order."""
        s = self.train_slices if split == "train" else self.val_slices
        return tuple(s) if s else ((self.input_seq_len, self.num_kv_pairs),)

    def sizes(self, split: str) -> tuple[int, ...]:
        """The number of examples of each slice of a split's fixed set, in the order of `slices`."""
        n = len(self.slices(split))
        if split != "train":
            return (int(self.num_val_examples),) * n
        value = self.num_train_examples
        return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),) * n


def _lengths(cfg: MQARConfig) -> tuple[int, int, bool]:
    """Tokens per training and validation example, and whether a split mixes lengths (padded)."""
    train_lens = [N for N, _ in cfg.slices("train")]
    val_lens = [N for N, _ in cfg.slices("val")]
    return max(train_lens), max(val_lens), min(train_lens) < max(train_lens) or min(val_lens) < max(val_lens)


class MQAR:
    """The MQAR task (causal next-token recall) (docs/tasks.md)."""

    name = "mqar"
    config_class = MQARConfig
    causal = True
    target_metric = ("accuracy", True)

    @classmethod
    def model_fields(cls, config: MQARConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), from its config alone."""
        train_len, val_len, padded = _lengths(config)
        return {"vocab_size": config.vocab_size + int(padded), "causal": cls.causal, "seq_len": max(train_len, val_len)}

    def __init__(self, config: MQARConfig | None = None):
        self.config = MQARConfig() if config is None else config
        if not isinstance(self.config, MQARConfig):
            raise TypeError(f"MQAR: expected an MQARConfig, got {type(self.config).__name__}")
        cfg = self.config
        #: tokens per training / validation example (the longest slice of the split); shorter examples padded
        self.train_seq_len, self.val_seq_len, self.padded = _lengths(cfg)
        fields = self.model_fields(cfg)
        self.seq_len, self.vocab_size = fields["seq_len"], fields["vocab_size"]  # the longest slice; PAD counted
        #: PAD token id (only used when the slices of a split have different lengths)
        self.pad_id = cfg.vocab_size
        self._memo: OrderedDict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._order: tuple[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    # ------------------------------------------------------------------ data
    def _sizes(self, split: str) -> tuple[int, ...]:
        return self.config.sizes(split)

    def _split_len(self, sid: int) -> int:
        return self.train_seq_len if sid == SPLIT_IDS["train"] else self.val_seq_len

    def _block(self, seed: int, sid: int, slice_id: int, block: int) -> tuple[np.ndarray, np.ndarray]:
        key = (seed, sid, slice_id, block)
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        cfg = self.config
        split = "train" if sid == SPLIT_IDS["train"] else "val"
        N, D = cfg.slices(split)[slice_id]
        total = self._sizes(split)[slice_id]
        count = min(BLOCK, total - block * BLOCK)
        x, y = generate_mqar(
            rng(seed, sid, slice_id, block),
            count,
            vocab_size=cfg.vocab_size,
            input_seq_len=N,
            num_kv_pairs=D,
            power_a=cfg.power_a,
            random_non_queries=cfg.random_non_queries,
        )
        T = self._split_len(sid)
        if N < T:
            x = np.concatenate([x, np.full((count, T - N), self.pad_id, np.int64)], axis=1)
            y = np.concatenate([y, np.full((count, T - N), IGNORE_INDEX, np.int64)], axis=1)
        self._memo[key] = (x.astype(np.int32), y.astype(np.int32))  # half the memory; widened on gather
        while len(self._memo) > 8:
            self._memo.popitem(last=False)
        return x, y

    def _gather(self, sid: int, slice_ids: np.ndarray, local: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``local`` of slices ``slice_ids`` of a fixed set (one block generated per distinct block)."""
        x = np.empty((len(local), self._split_len(sid)), dtype=np.int64)
        y = np.empty_like(x)
        blocks = local // BLOCK
        for s, b in sorted(set(zip(slice_ids.tolist(), blocks.tolist()))):
            m = (slice_ids == s) & (blocks == b)
            bx, by = self._block(seed, sid, s, b)
            x[m] = bx[local[m] - b * BLOCK]
            y[m] = by[local[m] - b * BLOCK]
        return x, y

    def examples(self, split: str, slice_id: int, start: int, stop: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Examples ``start:stop`` of one slice of the fixed ``split`` set, as numpy arrays."""
        sid = check_batch_args(split, 0, 1)
        local = np.arange(start, stop)
        return self._gather(sid, np.full_like(local, slice_id), local, self.config.data_seed_for(seed))

    def train_order(self, batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One epoch's fixed ``(slice_of, within, per_slice)``: batch p is batch ``within[p]`` of slice ``slice_of[p]``,
        interleaved in proportion at seeded phases."""
        if self._order is not None and self._order[0] == (batch_size, seed):
            return self._order[1]
        per_slice = np.array([max(n // batch_size, 1) for n in self._sizes("train")], dtype=np.int64)
        offsets = rng(seed, SPLIT_IDS["train"], 0, 0, ORDER_STREAM).random(len(per_slice))
        slice_of = np.repeat(np.arange(len(per_slice)), per_slice)
        within = np.concatenate([np.arange(c) for c in per_slice])
        order = np.lexsort((slice_of, (within + offsets[slice_of]) / per_slice[slice_of]))
        plan = (slice_of[order], within[order], per_slice)
        self._order = ((batch_size, seed), plan)
        return plan

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: ``batch_size`` examples of one slice in `train_order`; validation: each slice in whole batches."""
        sid = check_batch_args(split, index, batch_size)
        seed = self.config.data_seed_for(seed)
        sizes = self._sizes(split)
        if split == "train":
            slice_of, within, per_slice = self.train_order(batch_size, seed)
            epoch, pos = divmod(int(index), len(slice_of))
            s = int(slice_of[pos])
            j = epoch * int(per_slice[s]) + int(within[pos])  # the slice's batch number since the start
            local = (j * batch_size + np.arange(batch_size, dtype=np.int64)) % sizes[s]
            x, y = self._gather(sid, np.full_like(local, s), local, seed)
        else:
            s, b = self._val_locate(index, batch_size)
            local = np.arange(b * batch_size, min((b + 1) * batch_size, sizes[s]))
            x, y = self._gather(sid, np.full_like(local, s), local, seed)
        return torch.from_numpy(x), torch.from_numpy(y)

    def _val_locate(self, index: int, batch_size: int) -> tuple[int, int]:
        for s, n in enumerate(self._sizes("val")):
            nb = -(-n // batch_size)
            if index < nb:
                return s, index
            index -= nb
        raise UserError(
            f"MQAR: validation batch index out of range (the set has {self.num_batches('val', batch_size)} batches)"
        )

    def num_batches(self, split: str, batch_size: int) -> int | None:
        """Training: ``max(n_s // batch_size, 1)`` summed over slices; validation: each slice's batches, rounded up."""
        check_batch_args(split, 0, batch_size)
        sizes = self._sizes(split)
        if split == "train":
            return sum(max(n // batch_size, 1) for n in sizes)
        return sum(-(-n // batch_size) for n in sizes)

    # ------------------------------------------------------------------ metrics
    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """``accuracy`` (Zoology's per-example query accuracy, PAD left out) and ``accuracy_kv{D}_len{N}`` per slice."""
        return mqar_metrics(logits, targets, inputs, pad_id=self.pad_id if self.padded else None)


def predictions(logits: torch.Tensor, pad_id: int | None = None) -> torch.Tensor:
    """The argmax of ``logits`` without column ``pad_id`` (None: all); ties to the lowest id, no copy."""
    if pad_id is None or pad_id >= logits.shape[-1]:
        return logits.argmax(dim=-1)
    best, pred = logits[..., :pad_id].max(dim=-1)
    if logits.shape[-1] > pad_id + 1:  # a model vocabulary wider than the task's: columns after PAD count
        best_after, after = logits[..., pad_id + 1 :].max(dim=-1)
        pred = torch.where(best_after > best, after + pad_id + 1, pred)
    return pred


def mqar_metrics(
    logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor, pad_id: int | None = None
) -> dict[str, float]:
    """Per-example accuracy over labelled positions, averaged, overall and per slice (num labels, unpadded length)."""
    mask = targets != IGNORE_INDEX
    correct = (predictions(logits, pad_id) == targets) & mask
    n_lab = mask.sum(dim=1)
    keep = n_lab > 0
    per_ex = correct.sum(dim=1).float() / n_lab.clamp(min=1).float()
    out: dict[str, float] = {"accuracy": float(per_ex[keep].mean()) if keep.any() else float("nan")}
    lengths = (inputs != pad_id).sum(dim=1) if pad_id is not None else torch.full_like(n_lab, inputs.shape[1])
    keys = torch.stack([n_lab, lengths], dim=1)[keep]
    acc = per_ex[keep]
    for kv, length in torch.unique(keys, dim=0).tolist():
        m = (keys[:, 0] == kv) & (keys[:, 1] == length)
        out[f"accuracy_kv{kv}_len{length}"] = float(acc[m].mean())
    return out
