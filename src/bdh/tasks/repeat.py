"""The repeated-word sequence of paper section 6.4 (Fig. 14) and its phase labels.

The input is letters of the Latin alphabet. Every period of 13 + 8 * 8 = 77 letters starts with a
fixed 13-letter warm-up, followed by 8 repetitions of a random 8-letter word (the "fact"). A new word
is drawn for every period (the paper does not say; with one word for all periods everything after the
first period would be predictable). Letters are byte tokens (``ord('a') ... ord('z')``), so the same
sequence can be fed to a byte-level model and to a model trained on this task alone.

Each position carries a phase label: ``warmup`` (the warm-up letters), ``fact`` (the first
presentation of the word: the memorisation phase, unpredictable) and ``repeat`` (the 7 repetitions:
predictable once the word has been seen).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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
    """A batch of repeated-word sequences.

    Attributes:
        tokens: (B, T) int64 byte tokens of lowercase letters.
        phase: (T,) int64 phase code per position: 0 warm-up, 1 fact (first presentation), 2 repeat.
        period_index: (T,) which period each position belongs to.
    """

    tokens: torch.Tensor
    phase: torch.Tensor
    period_index: torch.Tensor


def phases(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Phase codes (0 warm-up, 1 fact, 2 repeat) and period indices of positions 0 .. length-1."""
    if length < 1:
        raise ValueError(f"repeat: length must be positive, got {length}")
    pos = torch.arange(length)
    within = pos % PERIOD
    w = len(WARMUP)
    phase = torch.where(within < w, 0, torch.where(within < w + WORD_LEN, 1, 2))
    return phase.long(), (pos // PERIOD).long()


def repeat_batch(batch_size: int, length: int = 2 * PERIOD, seed: int = 0) -> RepeatBatch:
    """``batch_size`` sequences of ``length`` letters, words drawn from a generator seeded by ``seed``."""
    if batch_size < 1:
        raise ValueError(f"repeat: batch_size must be positive, got {batch_size}")
    phase, period_index = phases(length)
    n_periods = int(period_index[-1]) + 1
    rng = np.random.Generator(np.random.PCG64([seed, 0x6_4]))
    letters = np.frombuffer(ALPHABET.encode(), dtype=np.uint8)
    warm = np.frombuffer(WARMUP.encode(), dtype=np.uint8)
    # one draw per period, in order, so a longer sequence extends a shorter one with the same seed
    words = np.stack([letters[rng.integers(0, len(letters), size=(batch_size, WORD_LEN))] for _ in range(n_periods)], axis=1)
    one = np.concatenate([np.broadcast_to(warm, (batch_size, n_periods, len(warm))), np.tile(words, (1, 1, REPEATS))], axis=2)
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
