"""Dropout masks for CPU tensors from a fast generator, seeded from PyTorch's.

Dropout in BDH sits on the gated activations y (B, h, T, N), the largest tensor of a layer, so it
needs one random number per neuron per token. PyTorch's CPU ``bernoulli_`` draws them from a
single-threaded Mersenne Twister at about 6-7 ns each: measured on a 2-core CPU it was a fifth of a
bf16 training step of the benchmark model (docs/performance.md), more than the attention matmuls.

`drop_mask` draws the same Bernoulli mask from NumPy's SFC64 generator instead, 16 random bits per
entry (about 0.7 ns each). Each call takes a 64-bit seed from PyTorch's default CPU generator (or the
one given), so the masks are as reproducible as ``nn.Dropout``'s: ``torch.manual_seed`` fixes them,
and saving and restoring PyTorch's RNG state (as checkpoints do) resumes the same stream. They are
not the official code's masks: a run that must reproduce ``nn.Dropout`` draw for draw sets the
model's ``dropout_rng`` to ``torch``.

An entry is dropped when its 16-bit draw r (uniform on [0, 2^16)) is below round(p 2^16): the drop
probability is p rounded to a multiple of 2^-16, at most 7.7e-6 away (0.1 becomes 0.1000061).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def drop_mask(shape: tuple[int, ...], p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """A CPU bool tensor of ``shape``, True (dropped) with probability ``p``, independently per entry."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"drop_mask: p must lie in [0, 1), got {p!r}")
    count = math.prod(shape)
    seed = int(torch.randint(0, 2**62, (), generator=generator))
    words = np.random.SFC64(seed).random_raw((count + 3) // 4)  # uint64: four 16-bit draws each
    draws = torch.from_numpy(words.view(np.int16)[:count])  # the 16 bits as int16: uniform on [-2^15, 2^15)
    return (draws < round(p * 2**16) - 2**15).view(shape)
