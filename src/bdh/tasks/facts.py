"""Facts read once and asked later: the ``text`` task's recall curriculum (``task.facts``) and its probe's format.

A fact is ``" The word for KEY is VALUE. "`` (random words); its question repeats it later. Facts overwrite corpus bytes
at seeded places, so a batch stays a pure function of its index (docs/training.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY_LETTERS = 5
VALUE_LETTERS = 5
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
#: the shortest distance (bytes between the fact's end and the question's start) that training draws
MIN_DISTANCE = 8


def random_word(rng: np.random.Generator, n: int) -> bytes:
    """``n`` lowercase letters drawn uniformly."""
    return bytes(rng.choice(LETTERS, size=n).tolist())


def fact_sentence(key: bytes, value: bytes) -> bytes:
    """The fact as it is read: ``" The word for KEY is VALUE. "``."""
    return b" The word for " + key + b" is " + value + b". "


def question(key: bytes) -> bytes:
    """The question that asks for the fact, up to where VALUE's first letter is predicted."""
    return b" The word for " + key + b" is "


#: bytes a fact and its answered question take together, besides the distance between them
PAIR_BYTES = (
    len(fact_sentence(b"k" * KEY_LETTERS, b"v" * VALUE_LETTERS))
    + len(question(b"k" * KEY_LETTERS))
    + (VALUE_LETTERS + 1)
)


@dataclass(frozen=True)
class Overlay:
    """Bytes written over a row: ``data`` at offset ``at``."""

    at: int
    data: bytes


def plan_facts(rng: np.random.Generator, length: int, per_kilobyte: float, reach: int) -> list[Overlay]:
    """The fact/question pairs of a ``length``-byte row: Poisson in number, log-uniform distances, overlaps dropped."""
    longest = min(reach, length - PAIR_BYTES)
    if per_kilobyte <= 0 or longest < MIN_DISTANCE:
        return []
    taken: list[tuple[int, int]] = []
    overlays: list[Overlay] = []
    for _ in range(int(rng.poisson(per_kilobyte * length / 1000.0))):
        distance = int(np.exp(rng.uniform(np.log(MIN_DISTANCE), np.log(longest + 1))))
        distance = min(max(distance, MIN_DISTANCE), longest)
        key, value = random_word(rng, KEY_LETTERS), random_word(rng, VALUE_LETTERS)
        fact, ask = fact_sentence(key, value), question(key) + value + b"."
        span = len(fact) + distance + len(ask)
        start = int(rng.integers(0, length - span + 1))
        parts = [(start, len(fact)), (start + len(fact) + distance, len(ask))]
        if any(a < e + n and e < a + m for a, m in parts for e, n in taken):
            continue
        taken.extend(parts)
        overlays += [Overlay(start, fact), Overlay(parts[1][0], ask)]
    return overlays


def apply_overlays(row: np.ndarray, overlays: list[Overlay], offset: int = 0) -> np.ndarray:
    """``row`` (bytes ``offset ...`` of the planned row) with the overlays that fall in it written over it."""
    out = row.copy()
    end = offset + len(out)
    for o in overlays:
        lo, hi = max(o.at, offset), min(o.at + len(o.data), end)
        if lo < hi:
            out[lo - offset : hi - offset] = np.frombuffer(o.data[lo - o.at : hi - o.at], dtype=np.uint8)
    return out


__all__ = [
    "KEY_LETTERS",
    "MIN_DISTANCE",
    "PAIR_BYTES",
    "VALUE_LETTERS",
    "Overlay",
    "apply_overlays",
    "fact_sentence",
    "plan_facts",
    "question",
    "random_word",
]
