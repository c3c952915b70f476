"""Dropout masks for CPU tensors from a fast generator, seeded from PyTorch's (docs/performance.md).

PyTorch's CPU ``bernoulli_`` is a single-threaded Mersenne Twister; `drop_mask` draws 16-bit numbers from NumPy's SFC64,
seeded per call from PyTorch's generator (``torch.manual_seed`` and resumes reproduce them; ``dropout_rng: torch``: the
official masks). The drop probability is round(p 2^16) / 2^16."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from bdh.errors import UserError


@dataclass(frozen=True)
class DropMask:
    """Entries dropout zeroes: ``draws`` True where dropped (``threshold`` None), or bf16 draws kept
    above ``threshold``."""

    draws: torch.Tensor
    threshold: float | None = None

    def zero(self, t: torch.Tensor) -> torch.Tensor:
        """t with the dropped entries set to 0 (in place for a bool mask, a new tensor otherwise)."""
        if self.threshold is None:
            return t.masked_fill_(self.draws, 0)
        draws = self.draws if self.draws.dtype == t.dtype else self.draws.to(t.dtype)  # bf16 -> fp32: exact
        return torch.ops.aten.threshold_backward(t, draws, self.threshold)

    def dropped(self) -> torch.Tensor:
        """The mask as a bool tensor, True where dropped."""
        if self.threshold is None:
            return self.draws
        return self.draws.float() <= self.threshold  # NaN draws compare false: kept


def draw_seed(generator: torch.Generator | None = None) -> int:
    """A 62-bit seed taken from PyTorch's generator (or the one given): what makes a mask reproducible."""
    return int(torch.randint(0, 2**62, (), generator=generator))


def drop_count(p: float) -> int:
    """Of the 2^16 equally likely 16-bit draws, how many drop an entry: round(p 2^16)."""
    if not 0.0 <= p < 1.0:
        raise UserError(f"drop_mask: p must lie in [0, 1), got {p!r}")
    return round(p * 2**16)


def _draws16(count: int, generator: torch.Generator | None) -> torch.Tensor:
    """``count`` independent uniform 16-bit draws as int16, from one seed taken from PyTorch's generator."""
    seed = draw_seed(generator)
    words = np.random.SFC64(seed).random_raw((count + 3) // 4)  # uint64: four 16-bit draws each
    return torch.from_numpy(words.view(np.int16)[:count])  # the 16 bits as int16: uniform on [-2^15, 2^15)


@functools.lru_cache(maxsize=64)
def _bf16_threshold(keep: int) -> float | None:
    """The value keeping exactly ``keep`` of the 2^16 bf16 patterns under ``threshold_backward`` (NaNs kept),
    or None."""
    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    nans = int(values.isnan().sum())
    values = values[~values.isnan()].sort(descending=True).values
    above = keep - nans
    if not 0 < above < values.numel():
        return None
    threshold = values[above]
    return float(threshold) if int((values > threshold).sum()) == above else None


def drop_mask(
    shape: tuple[int, ...], p: float, generator: torch.Generator | None = None, dtype: torch.dtype | None = None
) -> DropMask:
    """A CPU mask of ``shape``, each entry dropped with probability ``p`` (to 2^-16): bf16 draws with a threshold for
    bf16, fp32 and fp64 (one ``threshold_backward`` pass), else a bool tensor."""
    drop = drop_count(p)
    draws = _draws16(math.prod(shape), generator).view(shape)
    if dtype in (torch.bfloat16, torch.float32, torch.float64):
        threshold = _bf16_threshold(2**16 - drop)
        if threshold is not None:
            return DropMask(draws.view(torch.bfloat16), threshold)
    return DropMask(draws < drop - 2**15)


#: splitmix64's increment (the golden ratio in 64 bits) and its output mixer (Steele, Lea and Flood 2014)
_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def counter_draws(seed: int, count: int) -> np.ndarray:
    """The compiled gate's 16-bit draws, uint16 (count,): bits 16 (i mod 4) .. + 15 of word i // 4 of
    splitmix64(``seed``); the reference of its loop."""
    k = np.arange(1, (count + 3) // 4 + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + k * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX[0])
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX[1])
    z ^= z >> np.uint64(31)
    return z.astype("<u8").view("<u2")[:count]


def counter_mask(shape: tuple[int, ...], p: float, seed: int) -> DropMask:
    """The mask of the compiled gate for ``seed`` (dropped where the `counter_draws` draw is below round(p 2^16))."""
    draws = torch.from_numpy(counter_draws(seed, math.prod(shape)).astype(np.int32)).view(shape)
    return DropMask(draws < drop_count(p))
