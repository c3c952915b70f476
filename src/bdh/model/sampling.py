"""Sampling a next token from logits (`GenerationMixin`, `StateDecoder`), in Hugging Face's order:
``repetition_penalty``, ``temperature`` (0: greedy), ``top_k``, ``top_p``; ``stop`` sequences for a batch of one."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from bdh.errors import UserError

#: prompt tokens read into the state per chunk by `GenerationMixin.stream` (bounds its memory)
PROMPT_CHUNK = 1024


def check_sampling(
    name: str,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    repetition_penalty: float,
) -> None:
    """A `UserError` naming the first bad sampling option (the options of `GenerationMixin.stream`)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise UserError(f"{name}: max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if not _is_number(temperature) or temperature < 0:
        raise UserError(f"{name}: temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise UserError(f"{name}: top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        raise UserError(f"{name}: top_p must be a number in (0, 1] or None, got {top_p!r}")
    if not _is_number(repetition_penalty) or repetition_penalty < 1:
        raise UserError(f"{name}: repetition_penalty must be a finite number >= 1, got {repetition_penalty!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_stop(stop: object, vocab_size: int, batch_size: int) -> list[tuple[int, ...]]:
    """``stop`` as a list of non-empty token tuples, or a `UserError` naming what is wrong."""
    if stop is None:
        return []
    if isinstance(stop, (bytes, bytearray, str)) or not isinstance(stop, Sequence):
        raise UserError(
            f"BDH.generate: stop must be a list of token sequences (bytes for a byte model: [b'\\n\\n']), got {stop!r}"
        )
    stops = []
    for s in stop:
        if isinstance(s, str) or not isinstance(s, Sequence) or len(s) == 0:
            raise UserError(f"BDH.generate: each stop sequence must be a non-empty sequence of tokens, got {s!r}")
        if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size for t in s):
            raise UserError(f"BDH.generate: stop sequence {s!r} holds a token outside [0, {vocab_size})")
        stops.append(tuple(int(t) for t in s))
    if stops and batch_size != 1:
        raise UserError(f"BDH.generate: stop sequences need a batch of one prompt, got {batch_size}")
    return stops


def penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty on (B, V) logits where ``seen``: positive logits divided by ``penalty``,
    negative multiplied."""
    logits = logits.float()
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    *,
    top_p: float | None = None,
) -> torch.Tensor:
    """One token per row of (B, V) logits: greedy at temperature 0, else softmax(logits / T) within top-k, then top-p.

    The draw is the exponential race (argmax of p_i / E_i, E_i ~ Exp(1)), as ``torch.multinomial`` draws, without its
    host synchronisation."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        logits = _nucleus(logits, top_p)
    probs = torch.softmax(logits, dim=-1)
    race = torch.empty_like(probs).exponential_(1, generator=generator)
    return (probs / race).argmax(dim=-1)


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """(B, V) logits with the tokens outside the ``top_p`` nucleus at -inf (the most likely always stays)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs
    drop = torch.zeros_like(before, dtype=torch.bool).scatter_(-1, order, before >= top_p)
    return logits.masked_fill(drop, float("-inf"))
