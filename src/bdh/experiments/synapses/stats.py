"""Rank statistics of the synapse search (paper section 6.3): the Mann-Whitney U of every candidate at once,
the effect-size tie-break, the ranking (`search`), the one-sided held-out test (`mann_whitney_test`), and
the per-concept-word and sentence-length comparisons built on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bdh.errors import UserError
from bdh.tasks.multilingual import LabelledSentence

from .options import SURFACES
from .sentences import SentenceSets, concept_key, sentence_bytes


def fmt_p(p: float) -> str:
    """A p-value as printed in the report."""
    return f"{p:.2g}"


def _u_block(block: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """U of the positives for each row of ``block`` (candidates, sentences): per positive, the negatives
    below it plus half those equal to it, counted by binary search in the sorted negatives."""
    neg = torch.sort(block[:, ~labels], dim=1).values
    pos = block[:, labels].contiguous()
    below = torch.searchsorted(neg, pos, side="left")
    upto = torch.searchsorted(neg, pos, side="right")
    return (below + upto).sum(dim=1).double() / 2.0


def mann_whitney_u(scores: np.ndarray, labels: np.ndarray, *, chunk: int = 16384) -> np.ndarray:
    """The Mann-Whitney U of the positives (``labels`` true) against the negatives, for every column of ``scores``
    (sentences, candidates) at once, ties counting half; U / (n_1 n_0) is the AUC, U equals
    ``scipy.stats.mannwhitneyu(pos, neg).statistic``."""
    return _search_statistics(scores, labels, chunk=chunk)[0]


def _check_scores(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores)
    labels = np.asarray(labels, dtype=bool)
    if scores.ndim != 2 or labels.ndim != 1 or scores.shape[0] != labels.shape[0]:
        raise UserError(
            f"scores must be (sentences, candidates) with one label per sentence, got {scores.shape} and {labels.shape}"
        )
    n1 = int(labels.sum())
    if n1 == 0 or n1 == len(labels):
        raise UserError("need both positive and negative sentences")
    return scores, labels


def _effect_block(block: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(mean of positives - mean of negatives) / standard deviation of all, per row (0 when constant)."""
    block = block.double()
    diff = block[:, labels].mean(dim=1) - block[:, ~labels].mean(dim=1)
    sd = block.std(dim=1, unbiased=False)
    return torch.where(sd > 0, diff / torch.where(sd > 0, sd, torch.ones_like(sd)), torch.zeros_like(sd))


def _search_statistics(scores: np.ndarray, labels: np.ndarray, *, chunk: int = 16384) -> tuple[np.ndarray, np.ndarray]:
    """(U, effect size) of every column, in column chunks (the scores are never copied whole)."""
    scores, labels = _check_scores(scores, labels)
    lab = torch.from_numpy(labels)
    u = np.empty(scores.shape[1], dtype=np.float64)
    eff = np.empty(scores.shape[1], dtype=np.float64)
    for c0 in range(0, scores.shape[1], chunk):
        block = torch.from_numpy(np.ascontiguousarray(scores[:, c0 : c0 + chunk].T))  # candidates, sentences
        if not torch.isfinite(block).all():
            raise UserError("scores contain NaN or infinity")
        u[c0 : c0 + chunk] = _u_block(block, lab).numpy()
        eff[c0 : c0 + chunk] = _effect_block(block, lab).numpy()
    return u, eff


def effect_size(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(mean of positives - mean of negatives) / standard deviation of all, per column (0 when constant)."""
    return _search_statistics(scores, labels)[1]


@dataclass
class Search:
    """The ranking of all candidates on the search set."""

    auc: np.ndarray  # (candidates,) U / (n1 n0)
    effect: np.ndarray  # (candidates,) standardised mean difference (tie-break)
    top: np.ndarray  # candidate indices, best first (top_k of them)

    def counts(self, thresholds: Sequence[float] = (0.8, 0.9, 0.95)) -> dict[str, int]:
        return {f"auc>={t}": int((self.auc >= t).sum()) for t in thresholds}


def search(scores: np.ndarray, labels: np.ndarray, top_k: int) -> Search:
    """Rank every candidate (column of ``scores``) by its search-set AUC, ties by the effect size."""
    u, eff = _search_statistics(scores, labels)
    labels = np.asarray(labels, dtype=bool)
    auc = u / (int(labels.sum()) * int((~labels).sum()))
    order = np.lexsort((-eff, -auc))
    return Search(auc, eff, order[:top_k])


def mann_whitney_test(pos: np.ndarray, neg: np.ndarray) -> dict[str, float]:
    """One-sided Mann-Whitney U test that ``pos`` is larger (``scipy.stats.mannwhitneyu``, ``greater``):
    U, U_opt = n1 n2, U / U_opt, p and the rank-biserial correlation r = 2 U / (n1 n2) - 1."""
    from scipy.stats import mannwhitneyu

    pos, neg = np.asarray(pos, dtype=np.float64), np.asarray(neg, dtype=np.float64)
    u_opt = float(len(pos) * len(neg))
    if np.ptp(np.r_[pos, neg]) == 0:  # no information: every ordering ties
        u, p = u_opt / 2, 1.0
    else:
        res = mannwhitneyu(pos, neg, alternative="greater")
        u, p = float(res.statistic), float(res.pvalue)
    return {
        "U": u,
        "U_opt": u_opt,
        "auc": u / u_opt,
        "p": p,
        "r": 2 * u / u_opt - 1,
        "n_pos": len(pos),
        "n_neg": len(neg),
    }


def per_concept_word(
    pos_scores: np.ndarray, neg_scores: np.ndarray, sentences: Sequence[LabelledSentence], concept: str
) -> list[dict[str, Any]]:
    """AUC of each concept word's sentences against all contrast sentences (one synapse's scores)."""
    keys = [concept_key(s, concept) for s in sentences]
    rows = []
    for key in sorted({k for k in keys if k is not None}):
        sel = np.array([k == key for k in keys])
        labels = np.r_[np.ones(sel.sum(), bool), np.zeros(len(neg_scores), bool)]
        u = mann_whitney_u(np.r_[pos_scores[sel], neg_scores][:, None], labels)[0]
        rows.append(
            {
                "word": key,
                "surface": SURFACES[concept][key][sentences[0].language],
                "n": int(sel.sum()),
                "auc": float(u / (sel.sum() * len(neg_scores))),
            }
        )
    return rows


def length_baseline(sets: SentenceSets, prefix: bool) -> dict[str, float]:
    """Held-out AUC of the byte length alone (longer = more concept-like), per comparison."""
    out = {}
    for name, (pos, neg) in sets.held_out().items():
        lp = np.array([len(sentence_bytes(s, prefix)[0]) for s in pos], dtype=np.float64)
        ln = np.array([len(sentence_bytes(s, prefix)[0]) for s in neg], dtype=np.float64)
        out[name] = mann_whitney_test(lp, ln)["auc"]
    return out
