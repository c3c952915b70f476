"""Multi-query associative recall (MQAR) with the semantics of Zoology (Arora et al. 2023, section 3.2,
Definition 3.1 and Algorithm 1 of appendix E.1, as implemented in their ``multiquery_ar`` generator).

One example of length ``N = input_seq_len`` with ``D = num_kv_pairs`` pairs::

    positions 0 .. 2D-1       k_0 v_0 k_1 v_1 ... k_{D-1} v_{D-1}     (keys from [1, V/2), values from [V/2, V))
    positions 2D .. N-1       fillers, and each key k_j once more at position 2D + 2 g_j

* keys are D distinct ids of ``[1, V/2)`` and values D distinct ids of ``[V/2, V)``, drawn per example
  (there is no global key -> value map);
* the query slots ``g_j`` are D distinct slots of ``range(space)``, ``space = (N - 2D) / 2``, drawn
  without replacement with probabilities ``p_i ∝ a * i^(a-1)`` (i = 1..space, ``a = power_a``): a power
  law favouring queries close to the key-value block; slot g_j goes to key j in draw order;
* the label sits on the query's own position (the model predicts the value as the next token there);
  every other label is -100;
* fillers are token 0, or uniform random tokens of the whole vocabulary with ``random_non_queries``
  (they can then coincide with keys or values, as in Zoology);
* the checks Zoology asserts: N even, ``vocab_size > N`` and ``4 D <= N``.

Sampling D distinct slots without replacement in draw order is done for all examples at once with
the Gumbel-top-k trick (sorting ``log p + Gumbel noise`` gives exactly the sequential draw order of
``np.random.choice(replace=False, p=p)``), which is what makes 100k examples take well under a second.

Data: the training set is a fixed set of ``num_train_examples`` per slice, walked in order, epoch
after epoch (Zoology does not shuffle); the validation set is a fixed set of ``num_val_examples`` per
slice. Examples are generated in blocks of `BLOCK` from ``SeedSequence(seed, split, slice, block)``, so
train and validation come from disjoint seed streams and any batch is a pure function of
``(split, index, batch_size, seed)``.

Metric (Zoology's ``compute_metrics``): per example, the fraction of its query positions where the
argmax over the full vocabulary equals the value; then the mean over examples, overall and per slice
(``num_kv_pairs``, ``input_seq_len``). Validation batches never mix slices, so each validation batch
reports exactly one slice key ``accuracy_kv{D}_len{N}``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bdh.errors import UserError

from .base import IGNORE_INDEX
from .common import TaskConfig, check_batch_args, rng

#: examples generated together from one seed (the unit of the in-memory memo)
BLOCK = 1024


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
    """(n, k) rows of k distinct integers of [low, high), each row a uniform ordered sample without
    replacement (exact in all three regimes)."""
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
    """``num_examples`` MQAR examples as numpy arrays (inputs, labels), both (n, input_seq_len) int64.

    Vectorised over examples; see the module docstring for the layout. ``gen`` is the only source of
    randomness.
    """
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
    """MQAR data (Zoology's ``MQARConfig`` plus our split sizes).

    Attributes:
        vocab_size: V; keys from [1, V/2), values from [V/2, V). Zoology: 8192.
        input_seq_len: N, tokens per example (even, < V).
        num_kv_pairs: D key-value pairs per example (4 D <= N).
        power_a: exponent a of the query-slot power law p_i ∝ a i^(a-1) (Zoology code: 0.01).
        random_non_queries: fillers are uniform random tokens (True, Zoology's default) or token 0.
        num_train_examples: size of the fixed training set, per slice (Zoology: 100,000).
        num_val_examples: size of the fixed validation set, per slice (Zoology: 3,000).
        train_slices: optional list of [input_seq_len, num_kv_pairs] to train on a mixture
            (each slice gets num_train_examples); default: the single (input_seq_len, num_kv_pairs).
        val_slices: the same for validation (e.g. [[64, 4], [128, 8], [256, 16]]).
        data_seed: draw the data sets from this seed instead of the run's seed (so runs with
            different seeds share one training and validation set); null: the run's seed.
    When slices have different lengths, shorter examples are right-padded with a PAD token (id V, so
    the task's vocabulary is V + 1) whose labels are -100; a causal model never sees the padding.
    """

    vocab_size: int = 8192
    input_seq_len: int = 64
    num_kv_pairs: int = 4
    power_a: float = 0.01
    random_non_queries: bool = True
    num_train_examples: int = 100_000
    num_val_examples: int = 3_000
    train_slices: Sequence[Sequence[int]] | None = None
    val_slices: Sequence[Sequence[int]] | None = None
    data_seed: int | None = None

    def __post_init__(self) -> None:
        self._check_data_seed()
        for name in ("vocab_size", "input_seq_len", "num_kv_pairs", "num_train_examples", "num_val_examples"):
            self._check_int(name)
        if isinstance(self.power_a, bool) or not isinstance(self.power_a, (int, float)) or not 0 < self.power_a:
            self._fail("power_a", f"must be a positive number, got {self.power_a!r}")
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

    def slices(self, split: str) -> tuple[tuple[int, int], ...]:
        """The (input_seq_len, num_kv_pairs) slices of a split, in order."""
        s = self.train_slices if split == "train" else self.val_slices
        return tuple(s) if s else ((self.input_seq_len, self.num_kv_pairs),)


class MQAR:
    """The MQAR task (causal next-token recall); see the module docstring."""

    name = "mqar"
    config_class = MQARConfig
    causal = True
    target_metric = ("accuracy", True)

    def __init__(self, config: MQARConfig | None = None):
        self.config = MQARConfig() if config is None else config
        if not isinstance(self.config, MQARConfig):
            raise TypeError(f"MQAR: expected an MQARConfig, got {type(self.config).__name__}")
        cfg = self.config
        lengths = [N for split in ("train", "val") for N, _ in cfg.slices(split)]
        self.seq_len = max(lengths)
        self.padded = min(lengths) < self.seq_len
        #: PAD token id (only used when slices have different lengths)
        self.pad_id = cfg.vocab_size
        self.vocab_size = cfg.vocab_size + (1 if self.padded else 0)
        self._memo: OrderedDict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    # ------------------------------------------------------------------ data
    def _sizes(self, split: str) -> list[int]:
        n = self.config.num_train_examples if split == "train" else self.config.num_val_examples
        return [n] * len(self.config.slices(split))

    def _block(self, seed: int, sid: int, slice_id: int, block: int) -> tuple[np.ndarray, np.ndarray]:
        key = (seed, sid, slice_id, block)
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        cfg = self.config
        split = "train" if sid == 0 else "val"
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
        if N < self.seq_len:
            x = np.concatenate([x, np.full((count, self.seq_len - N), self.pad_id, np.int64)], axis=1)
            y = np.concatenate([y, np.full((count, self.seq_len - N), IGNORE_INDEX, np.int64)], axis=1)
        self._memo[key] = (x.astype(np.int32), y.astype(np.int32))  # half the memory; widened on gather
        while len(self._memo) > 8:
            self._memo.popitem(last=False)
        return x, y

    def _gather(self, sid: int, slice_ids: np.ndarray, local: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``local`` of slices ``slice_ids`` of a fixed set (one block generated per distinct block)."""
        x = np.empty((len(local), self.seq_len), dtype=np.int64)
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

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training batch ``index`` (the fixed training set in order, wrapping around epoch after epoch;
        slices concatenated) or validation batch ``index`` (each slice in whole batches, the last one short)."""
        sid = check_batch_args(split, index, batch_size)
        seed = self.config.data_seed_for(seed)
        sizes = self._sizes(split)
        if split == "train":
            bounds = np.cumsum([0] + sizes)
            ids = (index * batch_size + np.arange(batch_size)) % bounds[-1]
            slice_ids = np.searchsorted(bounds, ids, side="right") - 1
            x, y = self._gather(sid, slice_ids, ids - bounds[slice_ids], seed)
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
        """Training: full batches per epoch; validation: batches of all slices (each slice rounded up)."""
        check_batch_args(split, 0, batch_size)
        sizes = self._sizes(split)
        if split == "train":
            return max(sum(sizes) // batch_size, 1)
        return sum(-(-n // batch_size) for n in sizes)

    # ------------------------------------------------------------------ metrics
    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """``accuracy``: Zoology's per-example query accuracy (argmax over the full vocabulary), averaged
        over examples; plus ``accuracy_kv{D}_len{N}`` for each slice present in the batch."""
        return mqar_metrics(logits, targets, inputs, pad_id=self.pad_id if self.padded else None)


def mqar_metrics(
    logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor, pad_id: int | None = None
) -> dict[str, float]:
    """Per-example accuracy over labelled positions, averaged; per slice (num labels, unpadded length)."""
    mask = targets != IGNORE_INDEX
    correct = (logits.argmax(dim=-1) == targets) & mask
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
