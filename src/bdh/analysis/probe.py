"""The default probe text of `bdh inspect`, `bdh plot`, `bdh viz`: windows of the embedded corpus's held-out end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bdh.errors import UserError

if TYPE_CHECKING:  # imported where used: the commands read the constants without loading torch
    import torch

#: the name every figure and report gives the default probe
PROBE_NAME = "embedded corpus, held-out last 10%"
#: windows of the probe and bytes per window
DEFAULT_WINDOWS, DEFAULT_TOKENS = 4, 256
#: the share of the embedded corpus, at its end, that the probe reads (the text task's default val_fraction)
HELD_OUT = 0.1


def windows(data: bytes, length: int, count: int, what: str) -> torch.Tensor:
    """``count`` windows of ``length`` bytes spread over ``data`` (fewer or shorter for a short text),
    (count, length)."""
    import numpy as np
    import torch

    if len(data) < 2:
        raise UserError(f"{what}: has {len(data)} bytes; at least 2 are needed")
    length = min(length, len(data))
    count = max(1, min(count, len(data) // length))
    starts = np.linspace(0, len(data) - length, count).astype(np.int64)
    arr = np.frombuffer(data, dtype=np.uint8)
    return torch.from_numpy(np.stack([arr[s : s + length] for s in starts]).astype(np.int64))


def probe(length: int = DEFAULT_TOKENS, count: int = DEFAULT_WINDOWS) -> tuple[torch.Tensor, str]:
    """(tokens (count, length), description) of the default probe: windows of the held-out corpus end."""
    from bdh.tasks.text import embedded_corpus

    corpus = embedded_corpus()
    tokens = windows(corpus[int(len(corpus) * (1 - HELD_OUT)) :], length, count, "the embedded corpus")
    return tokens, describe(*tokens.shape)


def describe(count: int, length: int) -> str:
    """The probe's name with its windows, as figures and reports give it."""
    return f"probe: {PROBE_NAME}, {count} window{'s' if count > 1 else ''} of {length} bytes"
