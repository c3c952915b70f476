"""The long-context probes beside the recall probe (`bdh.analysis.recall`): recall of words read before
(`word_recall`), and long generation judged without a neural model (`NGramModel`, zlib)."""

from __future__ import annotations

import math
import re
import zlib

import numpy as np
import torch
from torch import nn

from bdh.errors import UserError

LN2 = math.log(2.0)


# ------------------------------------------------------------------------------------------ words read before
#: distance buckets (bytes from a word's previous occurrence to this one) of `word_recall`, in windows T
WORD_BUCKETS = (1, 4, 16, 64, 512)
#: words shorter than this are too common to need a long memory
WORD_MIN = 5
#: letters of a word given before its rest is scored
WORD_GIVEN = 2
_WORD = re.compile(rb"[A-Za-z]{%d,}" % WORD_MIN)


def word_targets(row: bytes, window: int) -> tuple[list[list[int]], list[int]]:
    """Loss indices of the letters of recurring words, by distance bucket, and of first occurrences (the control).

    A word of ``WORD_MIN``+ letters whose previous occurrence started d > ``window`` bytes earlier (out of the cut
    context's reach) falls in bucket i when ``WORD_BUCKETS[i] * window < d <= WORD_BUCKETS[i + 1] * window``; its
    letters after the first ``WORD_GIVEN`` are scored (letter j at loss index j - 1)."""
    buckets: list[list[int]] = [[] for _ in WORD_BUCKETS[:-1]]
    first: list[int] = []
    last: dict[bytes, int] = {}
    for m in _WORD.finditer(row):
        word, start = m.group(), m.start()
        scored = list(range(start + WORD_GIVEN - 1, m.end() - 1))
        prev = last.get(word)
        last[word] = start
        if prev is None:
            first += scored
            continue
        d = start - prev
        for i, (lo, hi) in enumerate(zip(WORD_BUCKETS[:-1], WORD_BUCKETS[1:])):
            if lo * window < d <= hi * window:
                buckets[i] += scored
    return buckets, first


def word_recall(tokens: torch.Tensor, carried: torch.Tensor, cut: torch.Tensor, window: int) -> list[dict]:
    """Bits per letter on recurring words (`word_targets`) with the state carried and with the context cut to
    ``window``, by distance to the previous occurrence; the last row is the first occurrences (control).
    ``carried`` and ``cut``: every token's loss (B, L) from `bdh.analysis.loss_by_position` curves with ``keep``."""
    rows = [word_targets(bytes(r[:-1].tolist()), window) for r in tokens]
    labels = [f"{lo * window:,}-{hi * window:,}" for lo, hi in zip(WORD_BUCKETS[:-1], WORD_BUCKETS[1:])]
    out = []
    for i, label in enumerate([*labels, "first occurrence"]):
        b = [torch.tensor(r[0][i] if i < len(labels) else r[1], dtype=torch.long) for r in rows]
        c, k = (torch.cat([losses[j, idx] for j, idx in enumerate(b)]) for losses in (carried, cut))
        n = int(c.numel())
        out.append(
            {
                "distance": label,
                "letters": n,
                "carried_bits": float(c.mean()) / LN2 if n else float("nan"),
                "cut_bits": float(k.mean()) / LN2 if n else float("nan"),
            }
        )
    return out


# ------------------------------------------------------------------------------------------ n-gram judge
class NGramModel:
    """Interpolated Witten-Bell byte n-gram model of ``data`` (orders 0 .. n - 1 bytes of context).

    P_k(w | h) = (c(h w) + T(h) P_{k-1}(w | h')) / (c(h) + T(h)), T(h) the distinct bytes seen after h, h' the
    context without its oldest byte; an unseen context takes P_{k-1}; order 0 is the add-one unigram."""

    def __init__(self, data: bytes | np.ndarray, n: int = 5):
        if not 1 <= n <= 7:
            raise UserError(f"n-gram order must lie in [1, 7], got {n}")
        a = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.int64) if isinstance(data, bytes) else data
        a = np.asarray(a, dtype=np.int64)
        self.n = n
        self.unigram = (np.bincount(a, minlength=256) + 1.0) / (len(a) + 256.0)
        self.tables = []
        for k in range(1, n):
            ctx = _context_codes(a, k)[:-1] if len(a) > k else np.zeros(0, dtype=np.int64)
            nxt = a[k:]
            keys, counts = np.unique(ctx * 256 + nxt, return_counts=True)
            hs, h_counts = np.unique(keys // 256, return_counts=True)  # distinct followers per context
            h_totals = np.zeros(len(hs))
            np.add.at(h_totals, np.searchsorted(hs, keys // 256), counts)
            self.tables.append((keys, counts, hs, h_counts, h_totals))

    def bits(self, text: bytes | np.ndarray) -> float:
        """Bits per byte of ``text`` (every byte after the first n - 1, each from its n - 1 bytes before)."""
        a = np.asarray(np.frombuffer(bytes(text), dtype=np.uint8), dtype=np.int64)
        if len(a) < self.n:
            raise UserError(f"n-gram: need at least {self.n} bytes, got {len(a)}")
        target = a[self.n - 1 :]
        p = self.unigram[target]
        for k, (keys, counts, hs, h_counts, h_totals) in enumerate(self.tables, 1):
            ctx = _context_codes(a, k)[self.n - 1 - k : len(a) - k]
            c_hw = _lookup(keys, counts, ctx * 256 + target)
            i = np.clip(np.searchsorted(hs, ctx), 0, max(len(hs) - 1, 0))
            seen = (hs[i] == ctx) if len(hs) else np.zeros(len(ctx), dtype=bool)
            t_h = np.where(seen, h_counts[i] if len(hs) else 0, 0)
            c_h = np.where(seen, h_totals[i] if len(hs) else 0, 0)
            p = np.where(seen, (c_hw + t_h * p) / np.maximum(c_h + t_h, 1), p)
        return float(-np.log2(p).mean())


def _context_codes(a: np.ndarray, k: int) -> np.ndarray:
    """codes[i] = the k bytes a[i .. i + k - 1] as one integer (oldest byte most significant)."""
    codes = np.zeros(len(a) - k + 1, dtype=np.int64)
    for j in range(k):
        codes = codes * 256 + a[j : len(a) - k + 1 + j]
    return codes


def _lookup(keys: np.ndarray, counts: np.ndarray, query: np.ndarray) -> np.ndarray:
    if not len(keys):
        return np.zeros(len(query))
    i = np.clip(np.searchsorted(keys, query), 0, len(keys) - 1)
    return np.where(keys[i] == query, counts[i], 0).astype(np.float64)


def compression_ratio(text: bytes) -> float:
    """zlib-compressed size over raw size (lower: more repetitive)."""
    return len(zlib.compress(text, 9)) / max(1, len(text))


def generation_scores(judge: NGramModel, text: bytes, part: int = 1000) -> dict:
    """The n-gram bits per byte and the compression ratio of the first and the last ``part`` bytes."""
    first, last = text[:part], text[-part:]
    return {
        "ngram_first": judge.bits(first),
        "ngram_last": judge.bits(last),
        "zlib_first": compression_ratio(first),
        "zlib_last": compression_ratio(last),
    }


def generate_bytes(model: nn.Module, prompt: bytes, length: int, seed: int, temperature: float = 0.8) -> bytes:
    """``length`` bytes sampled after ``prompt`` on the recurrent state (`bdh.model.BDH.stream`)."""
    tokens = torch.tensor(list(prompt), dtype=torch.long)
    out = [int(t[0]) for t in model.stream(tokens, length, temperature=temperature, seed=seed)]
    return bytes(out)


__all__ = [
    "NGramModel",
    "compression_ratio",
    "generate_bytes",
    "generation_scores",
    "word_recall",
    "word_targets",
]
