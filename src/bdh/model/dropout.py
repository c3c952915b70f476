"""Dropout masks for CPU tensors from a fast generator, seeded from PyTorch's.

Dropout in BDH sits on the gated activations y (B, h, T, N), the largest tensor of a layer, so it
needs one random number per neuron per token. PyTorch's CPU ``bernoulli_`` draws them from a
single-threaded Mersenne Twister at about 6-7 ns each: measured on a 2-core CPU it was a fifth of a
bf16 training step of the benchmark model (docs/performance.md), more than the attention matmuls.

`drop_mask` draws the same Bernoulli mask from NumPy's SFC64 generator instead, 32 random bits per
entry (about 1.5 ns each). Each call takes a 64-bit seed from PyTorch's default CPU generator (or the
one given), so the masks are as reproducible as ``nn.Dropout``'s: ``torch.manual_seed`` fixes them,
and saving and restoring PyTorch's RNG state (as checkpoints do) resumes the same stream. They are
not the official code's masks: a run that must reproduce ``nn.Dropout`` draw for draw sets the
model's ``dropout_rng`` to ``torch``.

An entry is dropped when its 32-bit draw r (uniform on [0, 2^32)) is below round(p 2^32), so the drop
probability is p to within 2^-33 (``bernoulli_`` on float32 resolves 2^-24).
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
    words = np.random.SFC64(seed).random_raw((count + 1) // 2)  # uint64: two 32-bit draws each
    draws = torch.from_numpy(words.view(np.int32)[:count])  # the 32 bits as int32: uniform on [-2^31, 2^31)
    return (draws < round(p * 2**32) - 2**31).view(shape)
