"""Dropout masks for CPU tensors from a fast generator, seeded from PyTorch's.

Dropout in BDH sits on the gated activations y (B, h, T, N), the largest tensor of a layer, so it
needs one random number per neuron per token. PyTorch's CPU ``bernoulli_`` draws them from a
single-threaded Mersenne Twister, which showed up in the profile of a CPU training step as more than the
attention matmuls (docs/performance.md has the measurements).

`drop_mask` draws the same Bernoulli mask from NumPy's SFC64 generator instead, 16 random bits per
entry, an order of magnitude cheaper per draw. Each call takes a 64-bit seed from PyTorch's default CPU
generator (or the one given), so the masks are as reproducible as ``nn.Dropout``'s: ``torch.manual_seed``
fixes them, and saving and restoring PyTorch's RNG state (as checkpoints do) resumes the same stream.
They are not the official code's masks: a run that must reproduce ``nn.Dropout`` draw for draw sets the
model's ``dropout_rng`` to ``torch``.

An entry is dropped when its 16-bit draw r (uniform on [0, 2^16)) is below round(p 2^16): the drop
probability is p rounded to a multiple of 2^-16, at most 7.7e-6 away (0.1 becomes 0.1000061).

Applying a bool mask to a bf16 tensor (``masked_fill_``) is a slow mixed-dtype pass on CPU, several times
a bf16 multiply. `DropMask` can instead hold the 16-bit draws *read as bf16 numbers*: every bit pattern is
equally likely, and the patterns are ordered by their value, so "drop when the draw is at most a
threshold" with the threshold chosen such that exactly round(p 2^16) of the 2^16 patterns lie at or below
it (NaN patterns never do) has the same drop probability as the integer comparison. Zeroing the dropped
entries is then one same-dtype ``threshold_backward`` pass, with no separate comparison.

Where the compiled gate of `bdh.model.kernels.cpu.native` runs, no mask is drawn here: its loop makes each
entry's 16-bit draw itself from a counter-based generator (`counter_draws`: splitmix64 of the seed and the
entry's index, so any thread can make any draw), with the same seed from PyTorch's generator and the same
drop probability round(p 2^16) / 2^16, but another stream than `drop_mask`'s. `counter_mask` is that
stream in NumPy, the reference the compiled loop is tested against.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from bdh.errors import UserError


@dataclass(frozen=True)
class DropMask:
    """Which entries dropout zeroes: ``draws`` True where dropped (``threshold`` None), or bf16 draws kept
    where they exceed ``threshold`` (see the module docstring)."""

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
    """The value with exactly ``keep`` of the 2^16 bf16 bit patterns kept by ``threshold_backward``, or None.

    ``threshold_backward(t, draws, h)`` zeroes where ``draws <= h``; a NaN draw compares false, so the 254
    NaN patterns are always kept and the threshold places the other keep - 254 among the numbers.
    """
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
    """A CPU dropout mask of ``shape``: each entry dropped with probability ``p`` (to 2^-16), independently.

    For ``dtype`` bf16, fp32 or fp64 (the tensor it will be applied to) the draws are held as bf16 with a
    threshold when one exists (p <= 1 - 254 / 2^16, the share of NaN patterns); otherwise as a bool tensor.
    """
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
    """The 16-bit draws the compiled gate (`bdh.model.kernels.cpu.native`) makes inside its loop, uint16 (count,).

    Draw i is bits 16 (i mod 4) .. 16 (i mod 4) + 15 of word i // 4 of the splitmix64 stream seeded with
    ``seed``: word k = mix(seed + (k + 1) golden). Every draw is a function of (seed, i) alone, so each thread
    of the loop computes its own and no mask is stored. This is the reference those draws are tested against,
    and the same distribution as `drop_mask`'s (uniform 16 bits), but another stream.
    """
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
