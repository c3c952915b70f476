"""The repeated-word sequence of paper section 6.4 (Fig. 14), its phase labels, and the ``repeat`` task.

Each period is a fixed warm-up then a new random word repeated, as bytes; phases ``warmup``, ``fact``, ``repeat``.
Copying the fact needs attention to earlier tokens (what no-BPTT training, section 7.2, may lose)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bdh.errors import UserError

from ..typed_config import bounded
from .base import IGNORE_INDEX
from .common import TaskConfig, check_batch_args, check_seed

#: the fixed warm-up (13 letters)
WARMUP = "thedragonhatc"
WORD_LEN = 8
REPEATS = 8
PERIOD = len(WARMUP) + WORD_LEN * REPEATS  # 77
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
#: phase codes of `RepeatBatch.phase`
PHASES = ("warmup", "fact", "repeat")


@dataclass
class RepeatBatch:
    """``tokens`` (B, T), ``phase`` (T,) (0 warm-up, 1 fact, 2 repeat) and ``period_index`` (T,)."""

    tokens: torch.Tensor
    phase: torch.Tensor
    period_index: torch.Tensor


def phases(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Phase codes (0 warm-up, 1 fact, 2 repeat) and period indices of positions 0 .. length-1."""
    if length < 1:
        raise UserError(f"repeat: length must be positive, got {length}")
    pos = torch.arange(length)
    within = pos % PERIOD
    w = len(WARMUP)
    phase = torch.where(within < w, 0, torch.where(within < w + WORD_LEN, 1, 2))
    return phase.long(), (pos // PERIOD).long()


def repeat_batch(batch_size: int, length: int = 2 * PERIOD, seed: int | Sequence[int] = 0) -> RepeatBatch:
    """``batch_size`` sequences of ``length`` letters, words drawn from ``seed`` (an integer or a sequence of them)."""
    if batch_size < 1:
        raise UserError(f"repeat: batch_size must be positive, got {batch_size}")
    phase, period_index = phases(length)
    n_periods = int(period_index[-1]) + 1
    keys = [int(seed)] if isinstance(seed, (int, np.integer)) else [int(k) for k in seed]
    rng = np.random.Generator(np.random.PCG64([*keys, 0x6_4]))
    letters = np.frombuffer(ALPHABET.encode(), dtype=np.uint8)
    warm = np.frombuffer(WARMUP.encode(), dtype=np.uint8)
    # one draw per period, in order, so a longer sequence extends a shorter one with the same seed
    words = np.stack(
        [letters[rng.integers(0, len(letters), size=(batch_size, WORD_LEN))] for _ in range(n_periods)], axis=1
    )
    one = np.concatenate(
        [np.broadcast_to(warm, (batch_size, n_periods, len(warm))), np.tile(words, (1, 1, REPEATS))], axis=2
    )
    seq = one.reshape(batch_size, n_periods * PERIOD)[:, :length]
    return RepeatBatch(torch.from_numpy(seq.astype(np.int64)), phase, period_index)


def describe_phases(phase: torch.Tensor) -> list[tuple[int, int, str]]:
    """The runs of equal phase as (start, stop, name), for annotating traces."""
    out: list[tuple[int, int, str]] = []
    p = phase.tolist()
    start = 0
    for i in range(1, len(p) + 1):
        if i == len(p) or p[i] != p[start]:
            out.append((start, i, PHASES[p[start]]))
            start = i
    return out


# ------------------------------------------------------------------------------------------ the task
@dataclass
class RepeatConfig(TaskConfig):
    """The ``repeat`` task: ``seq_len`` tokens per window, ``val_batches`` per validation pass."""

    seq_len: int = bounded(2 * PERIOD, ge=2)
    val_batches: int = bounded(8, ge=1)


class RepeatTask:
    """Next-letter prediction on repeated-word sequences; metrics per phase (warm-up, fact, repeat)."""

    name = "repeat"
    config_class = RepeatConfig
    vocab_size = 256  # byte tokens, so byte-level language models can be tested on it too
    causal = True
    target_metric = ("repeat_accuracy", True)

    @classmethod
    def model_fields(cls, config: RepeatConfig) -> dict[str, Any]:
        """What the task decides of the model (`bdh.tasks.base.decided_fields`), from its config alone."""
        return {"vocab_size": cls.vocab_size, "causal": cls.causal, "seq_len": config.seq_len}

    def __init__(self, config: RepeatConfig | None = None):
        self.config = RepeatConfig() if config is None else config
        self.seq_len = self.config.seq_len
        #: phase code of every target position (the letter being predicted)
        self.target_phase = phases(self.seq_len + 1)[0][1:]

    def batch(self, split: str, index: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh words for every (seed, split, index); every position is scored."""
        sid = check_batch_args(split, index, batch_size)
        tokens = repeat_batch(batch_size, self.seq_len + 1, seed=(check_seed(seed), sid, int(index))).tokens
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def num_batches(self, split: str, batch_size: int) -> int | None:
        return None if split == "train" else self.config.val_batches

    def metrics(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> dict[str, float]:
        """``{phase}_accuracy`` (argmax) and ``{phase}_loss`` (nats) per phase."""
        T = targets.shape[1]
        phase = phases(T + 1)[0][1:].to(targets.device)
        valid = targets != IGNORE_INDEX
        nll = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="none",
        ).view_as(targets)
        correct = logits.argmax(-1) == targets
        out: dict[str, float] = {}
        for code, name in enumerate(PHASES):
            m = valid & (phase == code)
            if m.any():
                out[f"{name}_accuracy"] = float(correct[m].float().mean())
                out[f"{name}_loss"] = float(nll[m].mean())
        return out
