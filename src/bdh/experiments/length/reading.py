"""How a trained model reads a fixed test set of one length (`read_state`, `read_whole`, `read_window`), and what the
read costs (`measured`: tokens/s, the state's bytes, the peak memory growth; docs/experiments.md, "Reads")."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bdh.model_api import carries_state
from bdh.tasks.base import IGNORE_INDEX
from bdh.tasks.lengths import answers

#: the most test-sequence tokens held at once by a read through a state (2^26: the 64 sequences of a test set to
#: 2^20, 1 GiB of int64 inputs and targets): a read's speed grows with its rows, most on a GPU (docs/performance.md)
HELD_TOKENS = 2**26

_STATM = Path("/proc/self/statm")


def has_state(model: nn.Module) -> bool:
    """Whether ``model`` reads through a carried fixed-size state (`read_state`'s contract; GPT's KV cache grows, so
    it reads whole and through a window instead)."""
    return carries_state(model) and callable(getattr(model, "init_state", None))


def device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def read_state(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int) -> tuple[int, int, int, int]:
    """(right, scored, state bytes, tokens): ``x`` (B, L) read through the state ``chunk`` tokens at a time."""
    device = device_of(model)
    state = model.init_state(x.shape[0], device)
    right = scored = 0
    for start in range(0, x.shape[1], chunk):
        logits, state = model.step(x[:, start : start + chunk].to(device), state)
        r, n = answers(logits.cpu(), y[:, start : start + chunk])
        right, scored = right + r, scored + n
    return right, scored, state_bytes(state), x.numel()


def state_bytes(state: Any) -> int:
    """The bytes of every tensor in a state (a tensor, a dataclass, or a list, tuple or dict of them)."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return sum(state_bytes(getattr(state, f.name)) for f in dataclasses.fields(state))
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(s) for s in state)
    if isinstance(state, dict):
        return sum(state_bytes(s) for s in state.values())
    return 0


def at_length(model: nn.Module, length: int) -> nn.Module:
    """``model``, or the same weights in a model whose config's ``seq_len`` allows ``length`` tokens (a config field
    that caps the input but no weight: the state dict must load unchanged, else a one-line error)."""
    config = getattr(model, "config", None)
    cap = getattr(config, "seq_len", None)
    if cap is None or cap >= length:
        return model
    wider = type(model)(dataclasses.replace(config, seq_len=length))
    try:
        wider.load_state_dict(model.state_dict())
    except RuntimeError:
        raise ValueError(f"{type(model).__name__}: its weights depend on seq_len; it cannot read past {cap}") from None
    return wider.to(device_of(model)).eval()


@torch.no_grad()
def read_whole(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[int, int, int, int]:
    """(right, scored, 0, tokens): ``x`` (B, L) read in one forward."""
    logits = at_length(model, x.shape[1])(x.to(device_of(model)))
    right, scored = answers(logits.cpu(), y)
    return right, scored, 0, x.numel()


@torch.no_grad()
def read_window(model: nn.Module, x: torch.Tensor, y: torch.Tensor, window: int) -> tuple[int, int, int, int]:
    """(right, scored, 0, tokens): every scored position t predicted from tokens t - window + 1 .. t only."""
    device = device_of(model)
    right = scored = tokens = 0
    for t in torch.unique(torch.nonzero(y != IGNORE_INDEX)[:, 1]).tolist():
        rows = torch.nonzero(y[:, t] != IGNORE_INDEX)[:, 0]
        part = x[rows, max(0, t + 1 - window) : t + 1]
        r, n = answers(model(part.to(device))[:, -1].cpu(), y[rows, t])
        right, scored, tokens = right + r, scored + n, tokens + part.numel()
    return right, scored, 0, tokens


def attention_bytes(model: nn.Module, rows: int, length: int) -> int:
    """The memory estimate of a whole-context attention read: 4-byte scores of every head, L x L per row."""
    heads = getattr(model.config, "n_head", 1)
    return 4 * rows * heads * length * length


class PeakMemory:
    """The peak growth of memory over a block: CUDA's allocator peak, or the process's resident set sampled every
    ``every`` seconds from ``/proc/self/statm`` (None where neither is available)."""

    def __init__(self, device: torch.device, every: float = 0.005):
        self.cuda, self.every, self.peak = device.type == "cuda", every, None
        self._stop = threading.Event()

    @staticmethod
    def _rss() -> int:
        import os

        return int(_STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self, base: int) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak or 0, self._rss() - base)

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        elif _STATM.is_file():
            self.peak = 0
            self._thread = threading.Thread(target=self._sample, args=(self._rss(),), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self.peak = torch.cuda.max_memory_allocated() - self._base
        elif self.peak is not None:
            self._stop.set()
            self._thread.join()


def measured(read: Callable[[], tuple[int, int, int, int]], device: torch.device) -> dict[str, Any]:
    """Run ``read`` and record what it got right, its state's bytes, its peak memory growth, its tokens and time."""
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        right, scored, state, tokens = read()
        seconds = time.perf_counter() - start
    return {
        "right": right,
        "n": scored,
        "state_bytes": state,
        "peak_bytes": memory.peak,
        "tokens": tokens,
        "seconds": seconds,
    }
