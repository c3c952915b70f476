"""Where a synapse grows (paper section 6.3, Fig. 13: "changes abruptly after words that are related to each
concept"): its Hebbian increments summed by the role of the byte read, how step-like they are, and the words
on which they accumulate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bdh.tasks.multilingual import LabelledSentence

#: roles of a byte of a sentence, by their code in `_byte_roles`
ROLES = ("elsewhere", "concept words", "word before", "word after")


def _word_ranges(text: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the words of ``text``, each with the space after it (the byte read just before the
    next word)."""
    starts = [k for k in range(len(text)) if text[k] != 0x20 and (k == 0 or text[k - 1] == 0x20)]
    return [(a, starts[n + 1] if n + 1 < len(starts) else len(text)) for n, a in enumerate(starts)]


def _mark_free(roles: np.ndarray, word: tuple[int, int], role: int) -> None:
    """Give the bytes of ``word`` that have no role yet the role ``role``."""
    a, b = word
    roles[a:b] = np.where(roles[a:b] == 0, role, roles[a:b])


def _byte_roles(sentence: LabelledSentence) -> np.ndarray:
    """Per byte of the sentence: 1 on a concept word (with its trailing space), 2 on the word before it,
    3 on the word after it, 0 elsewhere."""
    text = sentence.text.encode("utf-8")
    roles = np.zeros(len(text), dtype=np.int64)
    words = _word_ranges(text)
    for a, b in sentence.concept_spans:
        inside = [n for n, (wa, wb) in enumerate(words) if wa < b and wb > a]
        if not inside:
            continue
        first, last = inside[0], inside[-1]
        if last + 1 < len(words):
            _mark_free(roles, words[last + 1], 3)
        if first > 0:
            _mark_free(roles, words[first - 1], 2)
        roles[words[first][0] : words[last][1]] = 1
    return roles


def step_statistics(
    sentences: Sequence[LabelledSentence], incs: Sequence[np.ndarray], star_fraction: float
) -> dict[str, Any]:
    """Where a synapse grows on concept sentences: per role of a byte (`ROLES`: on a concept word, on the
    word before or after it, elsewhere) the share of the total Hebbian increment and the share of bytes;
    and the share of bytes whose increment exceeds ``star_fraction`` of the largest (sparse, step-like)."""
    inc_sum = np.zeros(len(ROLES))
    byte_sum = np.zeros(len(ROLES))
    for s, inc in zip(sentences, incs, strict=False):
        roles = _byte_roles(s)[: len(inc)]
        inc_sum += np.bincount(roles, weights=inc[: len(roles)], minlength=len(ROLES))
        byte_sum += np.bincount(roles, minlength=len(ROLES))
    peak = max((float(inc.max()) for inc in incs if len(inc)), default=0.0)
    big = sum(int((inc > star_fraction * peak).sum()) for inc in incs) if peak > 0 else 0
    total = inc_sum.sum()
    return {
        "increment_share": {r: float(inc_sum[k] / total) if total > 0 else float("nan") for k, r in enumerate(ROLES)},
        "byte_share": {r: float(byte_sum[k] / byte_sum.sum()) for k, r in enumerate(ROLES)},
        "bytes_above_threshold": big / max(int(byte_sum.sum()), 1),
    }


def _word_units(text: bytes, concept_spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The word ranges of ``text`` with a multi-word concept surface form merged into one unit."""
    merged: list[tuple[int, int]] = []
    for a, b in _word_ranges(text):
        if merged and any(ca <= merged[-1][0] < cb and ca < b <= cb + 1 for ca, cb in concept_spans):
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


def trigger_words(
    sentences: Sequence[LabelledSentence], incs: Sequence[np.ndarray], top: int = 8
) -> list[dict[str, Any]]:
    """The words (a concept's whole surface form counts as one) on whose bytes, trailing space included, a
    synapse's increment accumulates most, over ``sentences``: word, share of the total, occurrences."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    grand = 0.0
    for s, inc in zip(sentences, incs, strict=False):
        text = s.text.encode("utf-8")
        for a, b in _word_units(text, s.concept_spans):
            word = text[a:b].decode("utf-8", errors="replace").strip().rstrip(".").lower()
            total[word] = total.get(word, 0.0) + float(inc[a:b].sum())
            count[word] = count.get(word, 0) + 1
        grand += float(inc.sum())
    ranked = sorted(total, key=lambda w: -total[w])[:top]
    return [
        {"word": w, "share": total[w] / grand if grand > 0 else float("nan"), "occurrences": count[w]} for w in ranked
    ]
