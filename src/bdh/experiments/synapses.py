"""Monosemantic synapses (paper section 6.3, Figs. 12-13, appendix B.3) at laptop scale.

The paper found entries of the synapse state sigma (Eq. 16) that grow whenever a currency (or a country)
is named, in English and in French, and confirmed the "currency synapse" on 50 fresh currency sentences
against 50 politics sentences without currencies with a one-sided Mann-Whitney U test (U = 2368 of
U_opt = 2500, p < 1e-14, rank-biserial correlation reported as 0.86). This module repeats the procedure
on a small BDH trained on the synthetic translation stream of `bdh.tasks.multilingual`:

1. **Scoring.** Each labelled sentence is read from a zero state with its language prefix (``<F:en>``, the
   way sentences start in the training stream; ``prefix=False`` feeds the bare sentence). For a layer
   l >= 1 and a head, every synapse sigma_l[i, j] between y-neuron i of layer l-1 and x-neuron j of layer
   l (both among the head's N = n / h neurons: N^2 candidates) gets two sentence scores: its value at the
   end of the sentence, sigma_{T-1,l}[i, j] = sum_{tau < T} y_{tau,l-1}[i] x_{tau,l}[j] (Eq. 16, without the
   RoPE rotation unless ``rotate``; `bdh.analysis.record.recover_sigma`), and its largest Hebbian
   increment over the sentence, max_tau y_{tau,l-1}[i] x_{tau,l}[j] (what Fig. 13 shows).
2. **Search.** All N^2 candidates are ranked by their separability of concept from contrast sentences on a
   search set: the Mann-Whitney U (equivalently the AUC, U / (n1 n2)), computed for all candidates at once
   from average ranks (`mann_whitney_u`); ties of the AUC are broken by the standardised mean difference.
3. **Validation.** The top synapses are tested on a disjoint held-out set of 50 + 50 sentences with the
   one-sided ``scipy.stats.mannwhitneyu`` (alternative ``greater``): U, U_opt = n1 n2, U / U_opt, p and the
   rank-biserial correlation r = 2 U / (n1 n2) - 1.
4. **Cross-language.** The same synapses on held-out sentences of a second language (other surface forms:
   "British pound" / "livre sterling"), per concept word, and against sentences of the other concept.
5. **Nulls.** The same search and validation on an untrained model of the same configuration and seed,
   and on the trained model with shuffled search labels, so that selection effects are visible; and the
   held-out AUC of the sentence length alone (the end-of-sentence value is a sum over the sentence).
6. **Figures.** Fig. 12: the top synapse's value along the bytes of example segments
   ``<F:xx>source<T:yy>target`` in both languages, steps above a threshold marked ``*``; Fig. 13: the
   y_{l-1}[i] and x_l[j] behind it, whose product is the Hebbian increment.

`run` does all of it after writing a corpus and training the model (``bdh experiment synapses``);
`analyse` does it for a given model (``bdh synapses RUN_DIR``).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from bdh.analysis.record import head_neurons, record, recover_sigma
from bdh.errors import UserError
from bdh.experiments.common import ModelSize, Report, encode_segment, train_lm, write_corpus
from bdh.model import BDH
from bdh.tasks.multilingual import (
    CONCEPTS,
    COUNTRIES,
    CURRENCIES,
    LANGUAGES,
    LabelledSentence,
    Lexicon,
    concept_sentences,
    contrast_sentences,
    make_sentence,
)

#: the paper's numbers (section 6.3): U of the currency synapse, U_opt = 50 * 50, the p bound, r as printed
PAPER = {"U": 2368, "U_opt": 2500, "p_below": 1e-14, "r_reported": 0.86}
#: sentence statistics of a synapse: its value at the sentence end, its largest Hebbian increment
STATISTICS = ("end", "max")
#: seeds of the labelled sets (offsets of the options' seed): search, held-out, figure examples
SEARCH_SEED, HELDOUT_SEED, EXAMPLE_SEED = 10_000, 20_000, 30_000
#: with length matching, contrast sentences are chosen from a pool this many times larger than the set,
#: concept sentences from one POS_POOL times larger, pairs within MATCH_TOLERANCE bytes of each other
POOL, POS_POOL, MATCH_TOLERANCE = 30, 4, 2
#: surface forms per concept (concept key -> language -> text)
SURFACES = {"currency": CURRENCIES, "country": COUNTRIES}

Log = Callable[[str], None]


def _no_log(msg: str) -> None:
    pass


# ------------------------------------------------------------------------------------------ options
@dataclass(frozen=True)
class SynapseOptions:
    """What `analyse` searches and tests (the analysis part of `Config`; the options of ``bdh synapses``).

    Attributes:
        concept: ``currency`` or ``country``.
        layer: l >= 1 (0-based): synapses from the y of layer l-1 to the x of layer l; None picks
            max(1, floor(5 L / 8)) (the paper reads layer 5 of 8).
        head: the head whose N x N block of sigma is searched.
        language / second_language: the search and main test language, and the cross-language check.
        search: concept sentences and as many contrast sentences in the search set.
        heldout: concept and contrast sentences in each held-out set (the paper: 50 + 50).
        top_k: synapses validated and reported per search.
        statistic: the sentence score the headline synapse is chosen by (``end`` or ``max``); both are
            searched and reported.
        rotate: include the RoPE rotation of Eq. 16 in the end-of-sentence value.
        match_length: draw the contrast (and other-concept) sentences length-matched to the concept
            sentences from a larger pool (`length_matched`).
        prefix: read each sentence after its ``<F:xx>`` language tag (else the bare sentence).
        seed: seeds the sentence sets, the label shuffle and the untrained model.
        lexicon_seed: the word mappings the model's corpus was made with.
        star_fraction: steps larger than this fraction of the largest step are marked ``*`` (Fig. 12).
    """

    concept: str = "currency"
    layer: int | None = None
    head: int = 0
    language: str = "en"
    second_language: str = "fr"
    search: int = 200
    heldout: int = 50
    top_k: int = 5
    statistic: str = "end"
    rotate: bool = False
    match_length: bool = True
    prefix: bool = True
    seed: int = 0
    lexicon_seed: int = 0
    star_fraction: float = 0.05

    def __post_init__(self) -> None:
        if self.concept not in CONCEPTS:
            raise UserError(f"concept: unknown concept {self.concept!r}; known: {', '.join(CONCEPTS)}")
        for name in ("language", "second_language"):
            if getattr(self, name) not in LANGUAGES:
                raise UserError(f"{name}: unknown language {getattr(self, name)!r}; known: {', '.join(LANGUAGES)}")
        if self.language == self.second_language:
            raise UserError(f"second_language: must differ from language ({self.language})")
        if self.layer is not None and self.layer < 1:
            raise UserError(f"layer: must be at least 1 (layer 0 reads token embeddings and has no sigma), got {self.layer}")
        if self.head < 0:
            raise UserError(f"head: must be non-negative, got {self.head}")
        if self.search < 2:
            raise UserError(f"search: need at least 2 sentences per class, got {self.search}")
        if self.heldout < 2:
            raise UserError(f"heldout: need at least 2 sentences per class, got {self.heldout}")
        if self.top_k < 1:
            raise UserError(f"top_k: must be positive, got {self.top_k}")
        if self.statistic not in STATISTICS:
            raise UserError(f"statistic: must be one of {', '.join(STATISTICS)}, got {self.statistic!r}")
        if not 0.0 < self.star_fraction < 1.0:
            raise UserError(f"star_fraction: must lie in (0, 1), got {self.star_fraction}")

    def resolved_layer(self, n_layer: int) -> int:
        """The layer to read, checked against a model of ``n_layer`` layers."""
        if n_layer < 2:
            raise UserError(f"layer: the model has {n_layer} layer; sigma needs at least 2 layers")
        layer = max(1, (5 * n_layer) // 8) if self.layer is None else self.layer
        if not 1 <= layer < n_layer:
            raise UserError(f"layer: {layer} does not exist or has no sigma (the model has {n_layer} layers: 1..{n_layer - 1} have sigma)")
        return layer

    def check_model(self, model: torch.nn.Module) -> int:
        """Check that ``model`` is a byte-level BDH with this layer and head; returns the layer."""
        if not isinstance(model, BDH):
            raise UserError(f"synapses: needs a BDH model, got a {type(model).__name__}")
        cfg = model.config
        if cfg.vocab_size < 256:
            raise UserError(f"synapses: the model's vocabulary has {cfg.vocab_size} tokens; text needs 256 (bytes)")
        if not cfg.causal:
            raise UserError("synapses: the model is not causal; sigma is a causal state")
        if self.head >= cfg.n_head:
            raise UserError(f"head: {self.head} does not exist (the model has {cfg.n_head} heads: 0..{cfg.n_head - 1})")
        return self.resolved_layer(cfg.n_layer)


# ------------------------------------------------------------------------------------------ sentences
def other_concept(concept: str) -> str:
    """The concept that is not ``concept`` (currency <-> country)."""
    return next(c for c in CONCEPTS if c != concept)


def _fresh(make: Callable[[int], list[LabelledSentence]], count: int, exclude: set[str]) -> tuple[list[LabelledSentence], int]:
    """``count`` sentences from ``make(k)`` (the first k of a seeded list) whose text is not in ``exclude``;
    also how many were dropped."""
    k = count
    while True:
        got = make(k)
        kept = [s for s in got if s.text not in exclude]
        if len(kept) >= count or k > 20 * count:
            return kept[:count], len(got) - len(kept)
        k *= 2


@dataclass
class SentenceSets:
    """The labelled sets of one analysis: concept (label 1) and contrast (label 0) sentences."""

    search_pos: list[LabelledSentence]
    search_neg: list[LabelledSentence]
    heldout_pos: list[LabelledSentence]
    heldout_neg: list[LabelledSentence]
    second_pos: list[LabelledSentence]
    second_neg: list[LabelledSentence]
    other: list[LabelledSentence]  # held-out sentences of the other concept, first language
    dropped: int = 0  # held-out sentences dropped because the search set had the same text

    @property
    def search(self) -> list[LabelledSentence]:
        return self.search_pos + self.search_neg

    @property
    def search_labels(self) -> np.ndarray:
        return np.r_[np.ones(len(self.search_pos), bool), np.zeros(len(self.search_neg), bool)]

    def held_out(self) -> dict[str, tuple[list[LabelledSentence], list[LabelledSentence]]]:
        """name -> (positives, negatives) of every held-out comparison."""
        lang1, lang2 = self.heldout_pos[0].language, self.second_pos[0].language
        return {
            lang1: (self.heldout_pos, self.heldout_neg),
            lang2: (self.second_pos, self.second_neg),
            f"{lang1} vs other concept": (self.heldout_pos, self.other),
        }


def length_matched(pos: Sequence[LabelledSentence], pool: Sequence[LabelledSentence]) -> list[LabelledSentence]:
    """For each sentence of ``pos`` in turn, the not yet chosen sentence of ``pool`` nearest in byte length
    (the first on ties)."""
    lengths = np.array([len(s.text.encode("utf-8")) for s in pool], dtype=np.int64)
    free = np.ones(len(pool), dtype=bool)
    out = []
    for s in pos:
        if not free.any():
            raise UserError("length_matched: the pool has fewer sentences than the concept set")
        gap = np.where(free, np.abs(lengths - len(s.text.encode("utf-8"))), np.iinfo(np.int64).max)
        k = int(np.argmin(gap))
        free[k] = False
        out.append(pool[k])
    return out


def matched_pairs(pos_pool: Sequence[LabelledSentence], neg_pool: Sequence[LabelledSentence], count: int,
                  tolerance: int = MATCH_TOLERANCE) -> tuple[list[LabelledSentence], list[LabelledSentence]]:
    """``count`` concept sentences of ``pos_pool`` (in order) each paired with an unused contrast sentence of
    ``neg_pool`` within ``tolerance`` bytes of its length; concept sentences without a partner are skipped."""
    lengths = np.array([len(s.text.encode("utf-8")) for s in neg_pool], dtype=np.int64)
    free = np.ones(len(neg_pool), dtype=bool)
    pos, neg = [], []
    for s in pos_pool:
        gap = np.where(free, np.abs(lengths - len(s.text.encode("utf-8"))), np.iinfo(np.int64).max)
        k = int(np.argmin(gap))
        if gap[k] > tolerance:
            continue
        free[k] = False
        pos.append(s)
        neg.append(neg_pool[k])
        if len(pos) == count:
            return pos, neg
    raise UserError(f"matched_pairs: only {len(pos)} of {count} concept sentences found a contrast sentence within "
                     f"{tolerance} bytes; use larger pools")


def sentence_sets(opts: SynapseOptions) -> SentenceSets:
    """Search and held-out sets from seeds the training stream never uses; held-out sentences whose text
    also occurs in the search set are replaced (the template grammar repeats sentences).

    With ``match_length`` each concept sentence is paired with a contrast sentence of (nearly) the same
    byte length (`matched_pairs`, from pools several times larger; the other-concept sentences by
    `length_matched`): the synthetic concept sentences are otherwise longer than the contrast sentences,
    and the end-of-sentence value is a sum over the sentence."""
    c, lang, lang2, ls = opts.concept, opts.language, opts.second_language, opts.lexicon_seed
    s_seed, h_seed = SEARCH_SEED + opts.seed, HELDOUT_SEED + opts.seed
    m = opts.match_length

    def draw(make: Callable[[int], list[LabelledSentence]], count: int, factor: int, exclude: set[str]) -> tuple[list[LabelledSentence], int]:
        return _fresh(make, factor * count if m else count, exclude)

    def pair(pos: list[LabelledSentence], neg: list[LabelledSentence], count: int) -> tuple[list[LabelledSentence], list[LabelledSentence]]:
        return matched_pairs(pos, neg, count) if m else (pos[:count], neg[:count])

    n, h = opts.search, opts.heldout
    search_pos, search_neg = pair(concept_sentences(c, POS_POOL * n if m else n, lang, s_seed, ls),
                                  contrast_sentences(c, POOL * n if m else n, lang, s_seed, ls), n)
    seen = {s.text for s in search_pos + search_neg}
    pos, d1 = draw(lambda k: concept_sentences(c, k, lang, h_seed, ls), h, POS_POOL, seen)
    neg, d2 = draw(lambda k: contrast_sentences(c, k, lang, h_seed, ls), h, POOL, seen)
    h_pos, h_neg = pair(pos, neg, h)
    pool, d3 = draw(lambda k: concept_sentences(other_concept(c), k, lang, h_seed, ls), h, POOL, seen)
    other = length_matched(h_pos, pool) if m else pool[:h]
    second_pos, second_neg = pair(concept_sentences(c, POS_POOL * h if m else h, lang2, h_seed, ls),
                                  contrast_sentences(c, POOL * h if m else h, lang2, h_seed, ls), h)
    return SentenceSets(search_pos, search_neg, h_pos, h_neg, second_pos, second_neg, other, d1 + d2 + d3)


def sentence_bytes(sentence: LabelledSentence, prefix: bool = True) -> tuple[bytes, int]:
    """The bytes fed for a sentence (``<F:xx>`` + text, or the text) and where the text starts."""
    head = f"<F:{sentence.language}>".encode() if prefix else b""
    return head + sentence.text.encode("utf-8"), len(head)


def concept_key(sentence: LabelledSentence, concept: str) -> str | None:
    """Which concept word (e.g. ``pound``) a sentence names first, from its first concept span."""
    if not sentence.concept_spans:
        return None
    a, b = sentence.concept_spans[0]
    surface = sentence.text.encode("utf-8")[a:b].decode("utf-8")
    for key, forms in SURFACES[concept].items():
        if forms[sentence.language] == surface:
            return key
    return None


# ------------------------------------------------------------------------------------------ scoring
@dataclass
class Scores:
    """Sentence scores of synapses: (sentences, candidates) float32 per statistic.

    Candidate c is the synapse (i, j) = divmod(c, N) within the head when all N^2 are scored, else the
    c-th entry of ``pairs``.
    """

    end: np.ndarray
    max: np.ndarray
    lengths: np.ndarray  # bytes fed per sentence (prefix included)

    def get(self, statistic: str) -> np.ndarray:
        return self.end if statistic == "end" else self.max


def _batched(model: BDH, sentences: Sequence[LabelledSentence], layer: int, prefix: bool, batch_size: int):
    """(recording, the sentences' lengths) per batch; sentences right-padded (a causal model never reads
    the padding)."""
    for b0 in range(0, len(sentences), batch_size):
        chunk = [sentence_bytes(s, prefix)[0] for s in sentences[b0:b0 + batch_size]]
        T = max(len(c) for c in chunk)
        idx = torch.zeros(len(chunk), T, dtype=torch.long)
        for b, data in enumerate(chunk):
            idx[b, :len(data)] = torch.tensor(list(data), dtype=torch.long)
        yield record(model, idx, layers=[layer - 1, layer]), [len(c) for c in chunk]


@torch.no_grad()
def score_sentences(model: BDH, sentences: Sequence[LabelledSentence], layer: int, head: int, *, rotate: bool = False,
                    prefix: bool = True, pairs: tuple[np.ndarray, np.ndarray] | None = None, batch_size: int = 32,
                    t_chunk: int = 16) -> Scores:
    """Both sentence statistics of the synapses of ``head`` between layers ``layer - 1`` and ``layer``.

    Each sentence is read from a zero state. ``end`` is sigma_{T-1,layer}[i, j] of Eq. 16 after the last
    byte, exactly `recover_sigma` (``rotate``: with the RoPE rotation to the reading position T); ``max``
    is max_tau y_{tau,layer-1}[i] x_{tau,layer}[j], the largest single Hebbian increment (no rotation).
    ``pairs`` = (rows, cols) within the head restricts the candidates to those synapses (else all N^2).
    """
    if not sentences:
        raise UserError("score_sentences: no sentences")
    cfg = model.config
    N = cfg.N
    hn = head_neurons(cfg, head)
    if pairs is not None:
        rows_u, r_inv = np.unique(np.asarray(pairs[0]), return_inverse=True)
        cols_u, c_inv = np.unique(np.asarray(pairs[1]), return_inverse=True)
        rsel, csel = torch.as_tensor(rows_u, dtype=torch.long), torch.as_tensor(cols_u, dtype=torch.long)
        r_inv_t, c_inv_t = torch.as_tensor(r_inv, dtype=torch.long), torch.as_tensor(c_inv, dtype=torch.long)
        C = len(r_inv)
    else:
        rsel = csel = torch.arange(N)
        C = N * N
    end = np.empty((len(sentences), C), dtype=np.float32)
    mx = np.empty((len(sentences), C), dtype=np.float32)
    lengths = np.empty(len(sentences), dtype=np.int64)
    row = 0
    for rec, lens in _batched(model, sentences, layer, prefix, batch_size):
        for b, T in enumerate(lens):
            sig = recover_sigma(rec, layer, rows=hn[rsel], cols=hn[csel], t=T, rotate=rotate, batch_index=b)
            Y = rec.y[layer - 1][b, head, :T][:, rsel]  # T, R
            X = rec.x[layer][b, head, :T][:, csel]  # T, K
            if pairs is not None:
                end[row] = sig[r_inv_t, c_inv_t].numpy()
                mx[row] = (Y[:, r_inv_t] * X[:, c_inv_t]).amax(dim=0).numpy()
            else:
                end[row] = sig.reshape(-1).numpy()
                best = torch.full((len(rsel), len(csel)), -math.inf)
                for t0 in range(0, T, t_chunk):
                    inc = Y[t0:t0 + t_chunk, :, None] * X[t0:t0 + t_chunk, None, :]
                    best = torch.maximum(best, inc.amax(dim=0))
                mx[row] = best.reshape(-1).numpy()
            lengths[row] = T
            row += 1
    return Scores(end, mx, lengths)


@torch.no_grad()
def synapse_traces(model: BDH, data: bytes, layer: int, head: int, i: int, j: int, *, rotate: bool = False) -> dict[str, np.ndarray]:
    """Along the bytes of ``data`` read from a zero state: ``y`` = y_{t,layer-1}[i], ``x`` = x_{t,layer}[j],
    their product ``increment``, and ``sigma`` = sigma_{t,layer}[i, j] after each byte t (Eq. 16)."""
    idx = torch.tensor(list(data), dtype=torch.long).view(1, -1)
    rec = record(model, idx, layers=[layer - 1, layer])
    hn = head_neurons(model.config, head)
    y = rec.y[layer - 1][0, head, :, i]
    x = rec.x[layer][0, head, :, j]
    if not rotate and rec.log_u is None:
        sigma = torch.cumsum(y * x, dim=0)
    else:
        sigma = torch.stack([recover_sigma(rec, layer, rows=hn[i:i + 1], cols=hn[j:j + 1], t=t + 1, rotate=rotate)[0, 0]
                             for t in range(idx.shape[1])])
    return {"y": y.numpy(), "x": x.numpy(), "increment": (y * x).numpy(), "sigma": sigma.numpy()}


# ------------------------------------------------------------------------------------------ statistics
def _u_block(block: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """U of the positives for each row of ``block`` (candidates, sentences): per positive, the negatives
    below it plus half those equal to it, counted by binary search in the sorted negatives."""
    neg = torch.sort(block[:, ~labels], dim=1).values
    pos = block[:, labels].contiguous()
    below = torch.searchsorted(neg, pos, side="left")
    upto = torch.searchsorted(neg, pos, side="right")
    return (below + upto).sum(dim=1).double() / 2.0


def mann_whitney_u(scores: np.ndarray, labels: np.ndarray, *, chunk: int = 16384) -> np.ndarray:
    """The Mann-Whitney U of the positives (``labels`` true) against the negatives, for every column of
    ``scores`` (sentences, candidates) at once: U = #{(p, q): p > q} + #{(p, q): p = q} / 2 over positive p
    and negative q (ties count half, which equals the average-rank form R_1 - n_1 (n_1 + 1) / 2).
    U / (n_1 n_0) is the AUC; U equals ``scipy.stats.mannwhitneyu(pos, neg).statistic``."""
    return _search_statistics(scores, labels, chunk=chunk)[0]


def _check_scores(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores)
    labels = np.asarray(labels, dtype=bool)
    if scores.ndim != 2 or labels.ndim != 1 or scores.shape[0] != labels.shape[0]:
        raise UserError(f"scores must be (sentences, candidates) with one label per sentence, got {scores.shape} and {labels.shape}")
    n1 = int(labels.sum())
    if n1 == 0 or n1 == len(labels):
        raise UserError("need both positive and negative sentences")
    return scores, labels


def _search_statistics(scores: np.ndarray, labels: np.ndarray, *, chunk: int = 16384) -> tuple[np.ndarray, np.ndarray]:
    """(U, effect size) of every column, in column chunks (the scores are never copied whole)."""
    scores, labels = _check_scores(scores, labels)
    lab = torch.from_numpy(labels)
    u = np.empty(scores.shape[1], dtype=np.float64)
    eff = np.empty(scores.shape[1], dtype=np.float64)
    for c0 in range(0, scores.shape[1], chunk):
        block = torch.from_numpy(np.ascontiguousarray(scores[:, c0:c0 + chunk].T))  # candidates, sentences
        if not torch.isfinite(block).all():
            raise UserError("scores contain NaN or infinity")
        u[c0:c0 + chunk] = _u_block(block, lab).numpy()
        block = block.double()
        diff = block[:, lab].mean(dim=1) - block[:, ~lab].mean(dim=1)
        sd = block.std(dim=1, unbiased=False)
        eff[c0:c0 + chunk] = torch.where(sd > 0, diff / torch.where(sd > 0, sd, torch.ones_like(sd)), torch.zeros_like(sd)).numpy()
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
    return {"U": u, "U_opt": u_opt, "auc": u / u_opt, "p": p, "r": 2 * u / u_opt - 1, "n_pos": len(pos), "n_neg": len(neg)}


# ------------------------------------------------------------------------------------------ analysis
@dataclass
class ModelResult:
    """Search and held-out validation of one model (trained, untrained, shuffled labels) per statistic."""

    name: str
    searches: dict[str, Search] = field(default_factory=dict)
    pairs: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # statistic -> top (i, j)
    tests: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)  # statistic -> comparison -> per top synapse
    top_scores: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)  # the top synapse's held-out scores

    def summary(self, statistic: str, comparison: str) -> dict[str, Any]:
        tests = self.tests[statistic][comparison]
        aucs = [t["auc"] for t in tests]
        s = self.searches[statistic]
        return {
            "top1_search_auc": float(s.auc[s.top[0]]), "top1_heldout_auc": aucs[0], "top1_p": tests[0]["p"],
            "topk_mean_heldout_auc": float(np.mean(aucs)), "topk_max_heldout_auc": float(np.max(aucs)),
            **{f"search_{k}": v for k, v in s.counts().items()},
        }


def _validate(model: BDH, results: Sequence[ModelResult], sets: SentenceSets, opts: SynapseOptions, layer: int, log: Log) -> None:
    """Score the held-out sets once on the top synapses of all ``results`` (searches on ``model``) and
    test each top synapse."""
    pairs = sorted({p for result in results for st in STATISTICS for p in result.pairs[st]})
    where = {p: k for k, p in enumerate(pairs)}
    sel = (np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    cache: dict[int, Scores] = {}

    def scored(group: list[LabelledSentence]) -> Scores:
        if id(group) not in cache:
            cache[id(group)] = score_sentences(model, group, layer, opts.head, rotate=opts.rotate, prefix=opts.prefix, pairs=sel)
        return cache[id(group)]

    for result in results:
        for st in STATISTICS:
            result.tests[st], result.top_scores[st] = {}, {}
            for name, (pos, neg) in sets.held_out().items():
                sp, sn = scored(pos).get(st), scored(neg).get(st)
                result.tests[st][name] = [mann_whitney_test(sp[:, where[p]], sn[:, where[p]]) for p in result.pairs[st]]
                top = where[result.pairs[st][0]]
                result.top_scores[st][name] = (sp[:, top], sn[:, top])
        log(f"[synapses] {result.name}: held-out U/U_opt of the top synapse: "
            + ", ".join(f"{st} {result.tests[st][opts.language][0]['auc']:.3f}" for st in STATISTICS))


def _search_model(name: str, scores: Scores, labels: np.ndarray, opts: SynapseOptions, N: int, log: Log) -> ModelResult:
    result = ModelResult(name)
    for st in STATISTICS:
        s = search(scores.get(st), labels, opts.top_k)
        result.searches[st] = s
        result.pairs[st] = [tuple(int(v) for v in divmod(int(c), N)) for c in s.top]
        log(f"[synapses] {name}: {st} statistic, best search AUC {s.auc[s.top[0]]:.3f} at synapse {result.pairs[st][0]}")
    return result


@dataclass
class Example:
    """A segment ``<F:src>source<T:tgt>target`` for the figures, with its byte spans."""

    title: str
    data: bytes
    source: tuple[int, int]
    target: tuple[int, int]
    concept_spans: list[tuple[int, int]]


def examples(opts: SynapseOptions) -> list[Example]:
    """Four segments: a concept and a contrast sentence with ``language`` as source, then the same two
    sentences with ``second_language`` as source. The concept sentence names a concept word whose surface
    forms differ between the languages (for currencies, the British pound if possible, as in Fig. 12)."""
    rng = random.Random(f"synapse-examples-{opts.concept}-{EXAMPLE_SEED + opts.seed}")
    lexicon = Lexicon(opts.lexicon_seed)
    l1, l2 = opts.language, opts.second_language
    preferred = "pound" if opts.concept == "currency" else "germany"
    chosen, fallback = None, None
    for _ in range(500):
        s = make_sentence(rng, opts.concept)
        keys = [v for k, v in s.items if k == opts.concept]
        if fallback is None and any(SURFACES[opts.concept][k][l1] != SURFACES[opts.concept][k][l2] for k in keys):
            fallback = s
        if preferred in keys:
            chosen = s
            break
    concept_s = chosen or fallback or make_sentence(rng, opts.concept)
    contrast_s = make_sentence(rng, None)
    out = []
    for src, tgt in ((l1, l2), (l2, l1)):
        for s, kind in ((concept_s, opts.concept), (contrast_s, "contrast")):
            src_text, src_spans = s.render_with_spans(src, lexicon)
            tgt_text, tgt_spans = s.render_with_spans(tgt, lexicon)
            data, (s0, s1), (t0, t1) = encode_segment(src, src_text, tgt, tgt_text)
            spans = [(s0 + a, s0 + b) for k, a, b in src_spans if k == opts.concept]
            spans += [(t0 + a, t0 + b) for k, a, b in tgt_spans if k == opts.concept]
            out.append(Example(f"{kind}, {src} -> {tgt}", data, (s0, s1), (t0, t1), spans))
    return out


@torch.no_grad()
def pair_increments(model: BDH, sentences: Sequence[LabelledSentence], layer: int, head: int, pair: tuple[int, int],
                    prefix: bool = True) -> list[np.ndarray]:
    """Per sentence, the Hebbian increments y_{t,layer-1}[i] x_{t,layer}[j] of one synapse on the sentence's
    own bytes (after the prefix), read from a zero state."""
    i, j = pair
    out = []
    offsets = [sentence_bytes(s, prefix)[1] for s in sentences]
    k = 0
    for rec, lens in _batched(model, sentences, layer, prefix, 32):
        inc = rec.y[layer - 1][:, head, :, i] * rec.x[layer][:, head, :, j]  # B, T
        for b, T in enumerate(lens):
            out.append(inc[b, offsets[k]:T].numpy())
            k += 1
    return out


def _word_ranges(text: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the words of ``text``, each with the space after it (the byte read just before the
    next word)."""
    starts = [k for k in range(len(text)) if text[k] != 0x20 and (k == 0 or text[k - 1] == 0x20)]
    return [(a, starts[n + 1] if n + 1 < len(starts) else len(text)) for n, a in enumerate(starts)]


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
            roles[words[last + 1][0]:words[last + 1][1]] = np.where(roles[words[last + 1][0]:words[last + 1][1]] == 0, 3, roles[words[last + 1][0]:words[last + 1][1]])
        if first > 0:
            roles[words[first - 1][0]:words[first - 1][1]] = np.where(roles[words[first - 1][0]:words[first - 1][1]] == 0, 2, roles[words[first - 1][0]:words[first - 1][1]])
        roles[words[first][0]:words[last][1]] = 1
    return roles


ROLES = ("elsewhere", "concept words", "word before", "word after")


def step_statistics(sentences: Sequence[LabelledSentence], incs: Sequence[np.ndarray], star_fraction: float) -> dict[str, Any]:
    """Where a synapse grows on concept sentences: per role of a byte (`ROLES`: on a concept word, on the
    word before or after it, elsewhere) the share of the total Hebbian increment and the share of bytes;
    and the share of bytes whose increment exceeds ``star_fraction`` of the largest (sparse, step-like)."""
    inc_sum = np.zeros(len(ROLES))
    byte_sum = np.zeros(len(ROLES))
    for s, inc in zip(sentences, incs):
        roles = _byte_roles(s)[:len(inc)]
        inc_sum += np.bincount(roles, weights=inc[:len(roles)], minlength=len(ROLES))
        byte_sum += np.bincount(roles, minlength=len(ROLES))
    peak = max((float(inc.max()) for inc in incs if len(inc)), default=0.0)
    big = sum(int((inc > star_fraction * peak).sum()) for inc in incs) if peak > 0 else 0
    total = inc_sum.sum()
    return {
        "increment_share": {r: float(inc_sum[k] / total) if total > 0 else float("nan") for k, r in enumerate(ROLES)},
        "byte_share": {r: float(byte_sum[k] / byte_sum.sum()) for k, r in enumerate(ROLES)},
        "bytes_above_threshold": big / max(int(byte_sum.sum()), 1),
    }


def trigger_words(sentences: Sequence[LabelledSentence], incs: Sequence[np.ndarray], top: int = 8) -> list[dict[str, Any]]:
    """The words (a concept's whole surface form counts as one) on whose bytes, trailing space included, a
    synapse's increment accumulates most, over ``sentences``: word, share of the total, occurrences."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    grand = 0.0
    for s, inc in zip(sentences, incs):
        text = s.text.encode("utf-8")
        words = _word_ranges(text)
        merged: list[tuple[int, int]] = []
        for a, b in words:  # a multi-word concept surface form is one unit
            if merged and any(ca <= merged[-1][0] < cb and ca < b <= cb + 1 for ca, cb in s.concept_spans):
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        for a, b in merged:
            word = text[a:b].decode("utf-8", errors="replace").strip().rstrip(".").lower()
            total[word] = total.get(word, 0.0) + float(inc[a:b].sum())
            count[word] = count.get(word, 0) + 1
        grand += float(inc.sum())
    ranked = sorted(total, key=lambda w: -total[w])[:top]
    return [{"word": w, "share": total[w] / grand if grand > 0 else float("nan"), "occurrences": count[w]} for w in ranked]


def per_concept_word(pos_scores: np.ndarray, neg_scores: np.ndarray, sentences: Sequence[LabelledSentence], concept: str) -> list[dict[str, Any]]:
    """AUC of each concept word's sentences against all contrast sentences (one synapse's scores)."""
    keys = [concept_key(s, concept) for s in sentences]
    rows = []
    for key in sorted({k for k in keys if k is not None}):
        sel = np.array([k == key for k in keys])
        u = mann_whitney_u(np.r_[pos_scores[sel], neg_scores][:, None], np.r_[np.ones(sel.sum(), bool), np.zeros(len(neg_scores), bool)])[0]
        rows.append({"word": key, "surface": SURFACES[concept][key][sentences[0].language], "n": int(sel.sum()),
                     "auc": float(u / (sel.sum() * len(neg_scores)))})
    return rows


def length_baseline(sets: SentenceSets, prefix: bool) -> dict[str, float]:
    """Held-out AUC of the byte length alone (longer = more concept-like), per comparison."""
    out = {}
    for name, (pos, neg) in sets.held_out().items():
        lp = np.array([len(sentence_bytes(s, prefix)[0]) for s in pos], dtype=np.float64)
        ln = np.array([len(sentence_bytes(s, prefix)[0]) for s in neg], dtype=np.float64)
        out[name] = mann_whitney_test(lp, ln)["auc"]
    return out


def analyse(model: BDH, opts: SynapseOptions, out: str | Path, *, untrained: BDH | None = None, log: Log = _no_log,
            title: str = "Monosemantic synapses (paper section 6.3)", setup: Sequence[tuple[str, Any]] = ()) -> Report:
    """Search, validate, test across languages and against the nulls, and plot into ``out/figures``.

    ``untrained`` is the untrained null (a model of the same configuration; None builds one with
    ``torch.manual_seed(opts.seed)``). ``setup`` rows (e.g. the training run) head the report. Returns the
    `Report` (``report.results`` holds every number); ``report.write(out)`` writes report.md and results.json.
    """
    t_start = time.time()
    out = Path(out)
    layer = opts.check_model(model)
    model.eval()
    cfg = model.config
    N = cfg.N
    if untrained is None:
        torch.manual_seed(opts.seed)
        untrained = BDH(cfg)
    untrained.eval()
    sets = sentence_sets(opts)
    labels = sets.search_labels
    timings: dict[str, float] = {}

    # the trained model and its shuffled-label null share the search scores
    t0 = time.time()
    log(f"[synapses] scoring {len(labels)} search sentences x {N * N:,} synapses (layer {layer}, head {opts.head})")
    scores = score_sentences(model, sets.search, layer, opts.head, rotate=opts.rotate, prefix=opts.prefix)
    trained = _search_model("trained", scores, labels, opts, N, log)
    shuffled_labels = np.random.default_rng(opts.seed).permutation(labels)
    shuffled = _search_model("shuffled labels", scores, shuffled_labels, opts, N, log)
    del scores
    _validate(model, [trained, shuffled], sets, opts, layer, log)
    timings["trained_and_shuffled_s"] = time.time() - t0

    t0 = time.time()
    log("[synapses] the untrained null")
    u_scores = score_sentences(untrained, sets.search, layer, opts.head, rotate=opts.rotate, prefix=opts.prefix)
    null = _search_model("untrained", u_scores, labels, opts, N, log)
    del u_scores
    _validate(untrained, [null], sets, opts, layer, log)
    timings["untrained_s"] = time.time() - t0

    # the headline synapse: per concept word, step statistics, figures
    t0 = time.time()
    st = opts.statistic
    top = trained.pairs[st][0]
    breakdown = {}
    steps = {}
    for lang, pos in ((opts.language, sets.heldout_pos), (opts.second_language, sets.second_pos)):
        breakdown[lang] = per_concept_word(*trained.top_scores[st][lang], pos, opts.concept)
        neg = sets.heldout_neg if lang == opts.language else sets.second_neg
        incs = pair_increments(model, pos + neg, layer, opts.head, top, opts.prefix)
        steps[lang] = step_statistics(pos, incs[:len(pos)], opts.star_fraction)
        steps[lang]["trigger_words"] = trigger_words(pos + neg, incs)
    lengths = length_baseline(sets, opts.prefix)
    figs = out / "figures"
    ex = examples(opts)
    traces = [synapse_traces(model, e.data, layer, opts.head, *top, rotate=opts.rotate) for e in ex]
    fig_files = {
        "fig12": plot_synapse_traces(ex, traces, top, layer, opts, figs / "fig12_synapse_trace"),
        "fig13": plot_mechanism([e for e in ex if not e.title.startswith("contrast")], [t for e, t in zip(ex, traces) if not e.title.startswith("contrast")],
                                top, layer, opts, figs / "fig13_mechanism"),
        "search_auc": plot_search_auc({r.name: r.searches[st].auc for r in (trained, null, shuffled)}, st, figs / "search_auc"),
    }
    timings["figures_s"] = time.time() - t0
    timings["analysis_s"] = time.time() - t_start

    report = build_report(title, opts, layer, cfg.N, sets, trained, null, shuffled, breakdown, steps, lengths, fig_files, out, setup)
    report.results["timings"] = {k: round(v, 1) for k, v in timings.items()}
    log(f"[synapses] analysis took {timings['analysis_s'] / 60:.1f} min")
    return report


# ------------------------------------------------------------------------------------------ report
def _fmt_p(p: float) -> str:
    return f"{p:.2g}"


def verdicts(trained: ModelResult, null: ModelResult, shuffled: ModelResult, opts: SynapseOptions,
             steps: dict[str, dict[str, float]], lengths: dict[str, float]) -> list[tuple[str, bool, str]]:
    """The paper's claims checked against the numbers: (claim, held, evidence)."""
    st = opts.statistic
    l1, l2 = opts.language, opts.second_language
    t1 = trained.tests[st][l1][0]
    t2 = trained.tests[st][l2][0]
    to = trained.tests[st][f"{l1} vs other concept"][0]
    nulls = max(null.tests[st][l1][0]["auc"], shuffled.tests[st][l1][0]["auc"])
    paper_auc = PAPER["U"] / PAPER["U_opt"]
    s1 = steps[l1]
    near = s1["increment_share"]["concept words"] + s1["increment_share"]["word before"]
    near_bytes = s1["byte_share"]["concept words"] + s1["byte_share"]["word before"]
    after = s1["increment_share"]["concept words"] + s1["increment_share"]["word after"]
    after_bytes = s1["byte_share"]["concept words"] + s1["byte_share"]["word after"]
    rows = [
        (f"a synapse found on the search set separates held-out {opts.concept} sentences from contrast sentences "
         f"about as well as the paper's (U/U_opt >= 0.9; paper {paper_auc:.3f}, p < 1e-14)",
         t1["auc"] >= 0.9 and t1["p"] < 1e-6,
         f"U = {t1['U']:.0f} of {t1['U_opt']:.0f}, U/U_opt = {t1['auc']:.3f}, p = {_fmt_p(t1['p'])}, r = {t1['r']:.3f}"),
        (f"the same synapse separates the concept in {l2} (other surface forms; U/U_opt >= 0.8, p < 0.01)",
         t2["auc"] >= 0.8 and t2["p"] < 0.01,
         f"U/U_opt = {t2['auc']:.3f}, p = {_fmt_p(t2['p'])}"),
        (f"it is specific to the concept: {opts.concept} sentences above {other_concept(opts.concept)} sentences (U/U_opt >= 0.8)",
         to["auc"] >= 0.8, f"U/U_opt = {to['auc']:.3f}, p = {_fmt_p(to['p'])}"),
        ("updates are sparse and step-like: fewer than 10% of the bytes of concept sentences step above the threshold",
         s1["bytes_above_threshold"] < 0.1,
         f"{100 * s1['bytes_above_threshold']:.1f}% of bytes above {opts.star_fraction:g} of the largest step"),
        ("the steps come at the concept: the concept words and the word before them (up to the byte read just "
         "before the name) get at least twice their share of the bytes in increment",
         near >= 2 * near_bytes,
         f"{100 * s1['increment_share']['concept words']:.0f}% of the increment on the concept words and "
         f"{100 * s1['increment_share']['word before']:.0f}% on the word before them, which hold "
         f"{100 * s1['byte_share']['concept words']:.0f}% and {100 * s1['byte_share']['word before']:.0f}% of the bytes"),
        ("the steps come on or right after the concept words (the paper: the synapse 'changes abruptly after words "
         "that are related to each concept'), not before them: at least twice their byte share",
         after >= 2 * after_bytes,
         f"{100 * s1['increment_share']['concept words']:.0f}% of the increment on the concept words and "
         f"{100 * s1['increment_share']['word after']:.0f}% on the word after them, which hold "
         f"{100 * s1['byte_share']['concept words']:.0f}% and {100 * s1['byte_share']['word after']:.0f}% of the bytes"),
        ("the nulls (untrained model, shuffled search labels) are clearly weaker on held-out data (by >= 0.1 U/U_opt)",
         t1["auc"] - nulls >= 0.1,
         f"trained {t1['auc']:.3f}; untrained {null.tests[st][l1][0]['auc']:.3f}; shuffled labels {shuffled.tests[st][l1][0]['auc']:.3f}"),
        ("the synapse is more than a sentence-length detector (held-out U/U_opt above the length's own)",
         t1["auc"] > lengths[l1], f"synapse {t1['auc']:.3f}, sentence length alone {lengths[l1]:.3f}"),
    ]
    return rows


def build_report(title: str, opts: SynapseOptions, layer: int, N: int, sets: SentenceSets, trained: ModelResult,
                 null: ModelResult, shuffled: ModelResult, breakdown: dict[str, list[dict[str, Any]]],
                 steps: dict[str, dict[str, float]], lengths: dict[str, float], fig_files: dict[str, list[Path]],
                 out: Path, setup: Sequence[tuple[str, Any]]) -> Report:
    """The markdown report and results.json of an analysis."""
    st = opts.statistic
    l1, l2 = opts.language, opts.second_language
    rep = Report(title)
    prefix = f"`<F:{l1}>` / `<F:{l2}>` before each sentence" if opts.prefix else "none (bare sentences)"
    rep.text(
        f"Synapses sigma_l[i, j] from y-neuron i of layer {layer - 1} to x-neuron j of layer {layer}, head {opts.head} "
        f"({N} x {N} = {N * N:,} candidates), concept **{opts.concept}**. Each sentence is read from a zero state; "
        f"language prefix: {prefix}. Statistics: `end` = sigma at the end of the sentence (Eq. 16, "
        f"{'with' if opts.rotate else 'without'} the RoPE rotation), `max` = the largest Hebbian increment "
        f"y_{{l-1}}[i] x_l[j] over the sentence. The headline synapse is chosen by `{st}`."
    )
    rows = list(setup) + [
        ("layer / head", f"{layer} / {opts.head}"),
        ("search set", f"{len(sets.search_pos)} + {len(sets.search_neg)} sentences ({l1}), seed {SEARCH_SEED + opts.seed}"),
        ("held-out sets", f"{opts.heldout} + {opts.heldout} per comparison, seed {HELDOUT_SEED + opts.seed}; "
                          f"{sets.dropped} drawn sentences dropped as duplicates of search sentences"),
        ("comparison sentences", f"length-matched: each concept sentence paired with a contrast sentence within {MATCH_TOLERANCE} bytes "
                                 f"(pools {POS_POOL}x and {POOL}x larger); other-concept sentences nearest in length" if opts.match_length
         else "as drawn (not length-matched)"),
    ]
    rep.table(["setting", "value"], rows)

    # top synapses
    rep.heading("The top synapses of the trained model")
    for stat in STATISTICS:
        s = trained.searches[stat]
        rows = []
        for k, (c, pair) in enumerate(zip(s.top, trained.pairs[stat])):
            a, b, o = (trained.tests[stat][name][k] for name in (l1, l2, f"{l1} vs other concept"))
            rows.append([k + 1, f"({pair[0]}, {pair[1]})", f"({opts.head * N + pair[0]}, {opts.head * N + pair[1]})",
                         float(s.auc[c]), f"{a['U']:.0f}", a["auc"], _fmt_p(a["p"]), a["r"], b["auc"], _fmt_p(b["p"]), o["auc"]])
        rep.text(f"Statistic `{stat}`" + (" (headline)" if stat == st else "") + ":")
        rep.table(["rank", "(i, j) in head", "(i, j) global", "search AUC", f"U {l1}", f"U/U_opt {l1}", f"p {l1}", f"r {l1}",
                   f"U/U_opt {l2}", f"p {l2}", "U/U_opt vs other concept"], rows)

    # headline vs the paper
    t1 = trained.tests[st][l1][0]
    rep.heading("The headline synapse against the paper")
    rep.table(["", "paper (Europarl, 8 layers, n = 49152)", "here"], [
        ["U", PAPER["U"], f"{t1['U']:.0f}"],
        ["U_opt", PAPER["U_opt"], f"{t1['U_opt']:.0f}"],
        ["U / U_opt", PAPER["U"] / PAPER["U_opt"], t1["auc"]],
        ["p (one-sided)", "< 1e-14", _fmt_p(t1["p"])],
        ["rank-biserial r = 2U/U_opt - 1", f"{PAPER['r_reported']} as printed; {2 * PAPER['U'] / PAPER['U_opt'] - 1:.3f} from its U", t1["r"]],
    ])
    rep.text("The paper prints r = 0.86 next to U = 2368 of 2500, but 2U/U_opt - 1 = 0.894 (0.86 would need U = 2325); "
             "the r here is computed from U.")

    # cross-language breakdown
    rep.heading("Across languages and concept words")
    rows = []
    for lang in (l1, l2):
        for r in breakdown[lang]:
            rows.append([lang, r["word"], r["surface"], r["n"], r["auc"]])
    rep.text(f"The headline synapse ({st}) on the held-out {opts.concept} sentences of each concept word against all "
             f"held-out contrast sentences of the same language (AUC = U/U_opt of that subset):")
    rep.table(["language", "concept word", "surface form", "sentences", "AUC"], rows)

    # nulls
    rep.heading("Nulls: is it selection?")
    rep.text(f"The same search ({len(sets.search_pos)} + {len(sets.search_neg)} sentences) and held-out test on an untrained "
             f"model of the same configuration (seed {opts.seed}) and on the trained model with shuffled search labels. "
             f"A search over {N * N:,} candidates finds high search AUCs by chance; only the held-out columns count.")
    rows = []
    for r in (trained, null, shuffled):
        for stat in STATISTICS:
            sm = r.summary(stat, l1)
            rows.append([r.name, stat, sm["top1_search_auc"], sm["top1_heldout_auc"], _fmt_p(sm["top1_p"]),
                         sm["topk_mean_heldout_auc"], sm["topk_max_heldout_auc"], r.tests[stat][l2][0]["auc"],
                         sm["search_auc>=0.8"], sm["search_auc>=0.9"], sm["search_auc>=0.95"]])
    rep.table(["model", "statistic", "top-1 search AUC", f"top-1 held-out U/U_opt ({l1})", "p", f"top-{opts.top_k} mean held-out",
               f"top-{opts.top_k} max held-out", f"top-1 held-out ({l2})", "candidates AUC>=0.8", ">=0.9", ">=0.95"], rows)
    rep.text("Sentence length alone (bytes, longer = concept) reaches held-out AUC "
             + ", ".join(f"{v:.3f} ({k})" for k, v in lengths.items())
             + "; the end-of-sentence value is a sum over the sentence, so a synapse that grows on every word would "
               "inherit this.")

    # step-likeness
    rep.heading("Where the synapse grows")
    rows = [[lang] + [100 * s["increment_share"][r] for r in ROLES[1:] + ROLES[:1]]
            + [100 * s["byte_share"][r] for r in ROLES[1:] + ROLES[:1]] + [100 * s["bytes_above_threshold"]]
            for lang, s in steps.items()]
    rep.text(f"On the held-out {opts.concept} sentences, the headline synapse's Hebbian increments y_{{l-1}}[i] x_l[j] "
             "summed by the role of the byte read (a word owns its trailing space, the byte read just before the next "
             "word): % of the total increment, % of the bytes, and % of bytes whose increment exceeds "
             f"{opts.star_fraction:g} of the largest.")
    rep.table(["language"] + [f"increment: {r}" for r in ROLES[1:] + ROLES[:1]] + [f"bytes: {r}" for r in ROLES[1:] + ROLES[:1]]
              + ["bytes above threshold"], rows, digits=1)
    rep.text(f"The words on which the increment accumulates most, over the held-out {opts.concept} and contrast sentences "
             "(a concept's surface form counts as one word):")
    rows = [[lang, ", ".join(f"{w['word']} ({100 * w['share']:.0f}%)" for w in s["trigger_words"])] for lang, s in steps.items()]
    rep.table(["language", "words (share of the total increment)"], rows)

    # figures
    rep.heading("Figures")
    for key, caption in (("fig12", "Fig. 12 analogue: the headline synapse along example segments; * marks steps above the threshold; "
                                   "source (blue) and target (green) spans, concept words (orange)"),
                         ("fig13", "Fig. 13 analogue: y_{l-1}[i] and x_l[j] per byte, and their product (the Hebbian increment)"),
                         ("search_auc", "search-set AUC of all candidates: trained model and the two nulls")):
        png = [p for p in fig_files[key] if p.suffix == ".png"]
        if png:
            rep.figure(png[0].relative_to(out).as_posix(), caption)

    # verdicts
    rep.heading("What matched the paper and what did not")
    vs = verdicts(trained, null, shuffled, opts, steps, lengths)
    rep.table(["claim", "held here", "evidence"], [[c, "yes" if ok else "no", ev] for c, ok, ev in vs])

    rep.results.update({
        "options": dataclasses.asdict(opts),
        "layer": layer, "N": N, "candidates": N * N,
        "prefix": [f"<F:{l1}>", f"<F:{l2}>"] if opts.prefix else None,
        "paper": PAPER,
        "headline": {"statistic": st, "synapse_in_head": list(trained.pairs[st][0]),
                     "synapse_global": [opts.head * N + trained.pairs[st][0][0], opts.head * N + trained.pairs[st][0][1]],
                     **{name: trained.tests[st][name][0] for name in trained.tests[st]}},
        "models": {r.name: {stat: {"top": [list(p) for p in r.pairs[stat]],
                                   "search_auc": [float(r.searches[stat].auc[c]) for c in r.searches[stat].top],
                                   "search_counts": r.searches[stat].counts(),
                                   "heldout": r.tests[stat]} for stat in STATISTICS}
                   for r in (trained, null, shuffled)},
        "per_concept_word": breakdown,
        "steps": steps,
        "length_baseline_auc": lengths,
        "duplicates_dropped": sets.dropped,
        "verdicts": [{"claim": c, "held": ok, "evidence": ev} for c, ok, ev in vs],
        "figures": {k: [p.relative_to(out).as_posix() for p in v] for k, v in fig_files.items()},
    })
    return rep


# ------------------------------------------------------------------------------------------ figures
def _chars(data: bytes) -> list[str]:
    """One label per byte: the character starting there ('' on UTF-8 continuation bytes)."""
    out = []
    for k, b in enumerate(data):
        if 0x80 <= b < 0xC0:
            out.append("")
            continue
        width = 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
        out.append(data[k:k + width].decode("utf-8", errors="replace"))
    return out


def _shade(ax, e: Example) -> None:
    ax.axvspan(e.source[0] - 0.5, e.source[1] - 0.5, color="#dbe9ff", zorder=0)
    ax.axvspan(e.target[0] - 0.5, e.target[1] - 0.5, color="#ddf4dd", zorder=0)
    for a, b in e.concept_spans:
        ax.axvspan(a - 0.5, b - 0.5, color="#ffc870", alpha=0.8, zorder=0)


def plot_synapse_traces(ex: Sequence[Example], traces: Sequence[dict[str, np.ndarray]], pair: tuple[int, int], layer: int,
                        opts: SynapseOptions, stem: Path) -> list[Path]:
    """Fig. 12 analogue: sigma_t[i, j] along the bytes of each example; steps above
    ``star_fraction`` of the largest step (over all examples) marked ``*``."""
    from bdh.viz.plots import _plt, save

    plt = _plt()
    steps = [np.diff(np.r_[0.0, t["sigma"]]) for t in traces]
    peak = max(float(np.abs(s).max()) for s in steps) or 1.0
    thr = opts.star_fraction * peak
    width = min(26.0, max(10.0, 0.075 * max(len(e.data) for e in ex)))
    fig, axes = plt.subplots(len(ex), 1, figsize=(width, 2.0 * len(ex)), squeeze=False)
    top = max(float(t["sigma"].max()) for t in traces)
    for ax, e, tr, s in zip(axes[:, 0], ex, traces, steps):
        _shade(ax, e)
        pos = np.arange(len(e.data))
        ax.step(pos, tr["sigma"], where="post", color="C3", lw=1.3)
        mark = np.abs(s) > thr
        ax.plot(pos[mark], tr["sigma"][mark] + 0.04 * (top or 1.0), "k*", ms=5, ls="none")
        ax.set_xticks(pos, _chars(e.data), fontsize=5.5)
        ax.tick_params(axis="x", length=0, pad=1)
        ax.set_xlim(-0.5, len(e.data) - 0.5)
        ax.set_ylim(min(0.0, float(tr["sigma"].min())), 1.15 * top if top > 0 else 1.0)
        ax.set_ylabel("sigma", fontsize=8)
        ax.set_title(e.title, fontsize=8, loc="left")
    fig.suptitle(f"{opts.concept} synapse: sigma[{pair[0]}, {pair[1]}] (y of layer {layer - 1} -> x of layer {layer}, head {opts.head}); "
                 f"* = step > {opts.star_fraction:g} x largest step (cf. Fig. 12)", fontsize=9)
    fig.tight_layout()
    return save(fig, stem)


def plot_mechanism(ex: Sequence[Example], traces: Sequence[dict[str, np.ndarray]], pair: tuple[int, int], layer: int,
                   opts: SynapseOptions, stem: Path) -> list[Path]:
    """Fig. 13 analogue: per byte, y_{l-1}[i], x_l[j] and their product (the Hebbian increment of sigma[i, j])."""
    from bdh.viz.plots import _plt, save

    plt = _plt()
    width = min(26.0, max(10.0, 0.075 * max(len(e.data) for e in ex)))
    fig, axes = plt.subplots(3 * len(ex), 1, figsize=(width, 1.45 * 3 * len(ex)), squeeze=False)
    names = [("y", f"y{layer - 1}[{pair[0]}]", "C0"), ("x", f"x{layer}[{pair[1]}]", "C2"), ("increment", "y * x", "C3")]
    for k, (e, tr) in enumerate(zip(ex, traces)):
        pos = np.arange(len(e.data))
        for r, (key, label, color) in enumerate(names):
            ax = axes[3 * k + r, 0]
            _shade(ax, e)
            ax.bar(pos, tr[key], width=0.85, color=color)
            ax.set_xlim(-0.5, len(e.data) - 0.5)
            ax.set_ylabel(label, fontsize=7)
            ax.set_xticks(pos, _chars(e.data) if r == 2 else [""] * len(pos), fontsize=5.5)
            ax.tick_params(axis="x", length=0, pad=1)
            if r == 0:
                ax.set_title(e.title, fontsize=8, loc="left")
    fig.suptitle(f"the {opts.concept} synapse's Hebbian increment y{layer - 1}[{pair[0]}] x{layer}[{pair[1]}] per byte (cf. Fig. 13)", fontsize=9)
    fig.tight_layout()
    return save(fig, stem)


def plot_search_auc(aucs: dict[str, np.ndarray], statistic: str, stem: Path) -> list[Path]:
    """Histogram (log counts) of the search-set AUC of every candidate, per model."""
    from bdh.viz.plots import _plt, save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    bins = np.linspace(0, 1, 51)
    for k, (name, a) in enumerate(aucs.items()):
        ax.hist(a, bins=bins, histtype="step", lw=1.4, color=f"C{k}", label=name, log=True)
    ax.set_xlabel(f"search-set AUC ({statistic})")
    ax.set_ylabel("synapses")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, stem)


# ------------------------------------------------------------------------------------------ experiment
@dataclass(frozen=True)
class Config:
    """``bdh experiment synapses``: corpus, model, training, and the analysis (`SynapseOptions`).

    The default ran in 8 minutes on one thread of a shared 2-core CPU (up to about 15 when the machine was
    busier): training 6 minutes, analysis 2; `quick` takes about a minute.
    """

    # model (paper appendix B.3 used d = 256, n = 49152, 4 heads, 8 layers)
    n_layer: int = 4
    n_embd: int = 64
    n_head: int = 4
    n_neurons: int = 2048
    dropout: float = 0.0
    # corpus (the paper: Europarl en-es, en-pt, en-fr)
    pairs: tuple[tuple[str, str], ...] = (("en", "es"), ("en", "fr"), ("en", "pt"))
    corpus_bytes: int = 4_000_000
    concept_rate: float = 0.5
    # training
    steps: int = 400
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    # analysis
    concept: str = "currency"
    layer: int | None = None
    head: int = 0
    language: str = "en"
    second_language: str = "fr"
    search: int = 200
    heldout: int = 50
    top_k: int = 5
    statistic: str = "end"
    rotate: bool = False
    match_length: bool = True
    prefix: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_embd", "n_head", "n_neurons", "corpus_bytes", "steps", "batch_size", "seq_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UserError(f"{name}: must be a positive integer, got {getattr(self, name)!r}")
        if self.n_neurons % self.n_head:
            raise UserError(f"n_neurons: {self.n_neurons} is not divisible by n_head = {self.n_head}")
        if self.n_layer < 2:
            raise UserError(f"n_layer: sigma links two layers, need at least 2, got {self.n_layer}")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"dropout: must lie in [0, 1), got {self.dropout}")
        if not self.lr > 0:
            raise UserError(f"lr: must be positive, got {self.lr}")
        if not 0.0 < self.concept_rate <= 1.0:
            raise UserError(f"concept_rate: must lie in (0, 1], got {self.concept_rate}")
        if self.corpus_bytes < 4 * self.seq_len:
            raise UserError(f"corpus_bytes: {self.corpus_bytes} is too small for seq_len {self.seq_len}")
        if not self.pairs:
            raise UserError("pairs: give at least one language pair")
        for p in self.pairs:
            if len(p) != 2 or p[0] == p[1] or any(lang not in LANGUAGES for lang in p):
                raise UserError(f"pairs: {p!r} is not a pair of two different known languages ({', '.join(LANGUAGES)})")
        langs = {lang for p in self.pairs for lang in p}
        for name in ("language", "second_language"):
            if getattr(self, name) not in langs:
                raise UserError(f"{name}: {getattr(self, name)!r} is not in the corpus pairs ({', '.join(sorted(langs))})")
        opts = self.options()  # validates the analysis fields
        opts.resolved_layer(self.n_layer)
        if self.head >= self.n_head:
            raise UserError(f"head: {self.head} does not exist (n_head = {self.n_head})")

    @classmethod
    def quick(cls) -> "Config":
        """A smoke test of about a minute: a tiny model, few steps, small sets."""
        return cls(n_layer=2, n_embd=32, n_head=2, n_neurons=256, corpus_bytes=200_000, steps=30, batch_size=8,
                   seq_len=64, search=24, heldout=12, top_k=3)

    @property
    def size(self) -> ModelSize:
        return ModelSize(self.n_layer, self.n_embd, self.n_head, self.n_neurons, self.dropout)

    def options(self) -> SynapseOptions:
        return SynapseOptions(concept=self.concept, layer=self.layer, head=self.head, language=self.language,
                              second_language=self.second_language, search=self.search, heldout=self.heldout,
                              top_k=self.top_k, statistic=self.statistic, rotate=self.rotate, match_length=self.match_length, prefix=self.prefix,
                              seed=self.seed)


def run(config: Config, out: Path, *, log: Log = print) -> Path:
    """Write the corpus, train the model, and `analyse` it (with the untrained model of the same seed as
    the null); returns the path of ``report.md``."""
    t_start = time.time()
    out = Path(out)
    log(f"[synapses] corpus: {config.corpus_bytes:,} bytes of {', '.join('-'.join(p) for p in config.pairs)}")
    data = write_corpus(out / "data" / "corpus.txt", config.pairs, config.corpus_bytes, seed=config.seed,
                        concept_rate=config.concept_rate)
    t0 = time.time()
    log(f"[synapses] training {config.steps} steps of {config.batch_size} x {config.seq_len} bytes")
    result = train_lm(out / "runs" / "bdh", data, config.size, steps=config.steps, batch_size=config.batch_size,
                      seq_len=config.seq_len, lr=config.lr, seed=config.seed, progress="auto")
    train_s = time.time() - t0
    model = result.model
    torch.manual_seed(config.seed)  # the trainer initialises the model right after this seed
    untrained = BDH(model.config)
    metrics = {k: float(v) for k, v in (result.metrics or {}).items()}
    setup = [
        ("model", f"BDH-GPU, {config.n_layer} layers, d = {config.n_embd}, {config.n_head} heads, n = {config.n_neurons}"),
        ("corpus", f"{config.corpus_bytes:,} bytes, pairs {', '.join('-'.join(p) for p in config.pairs)}, concept rate {config.concept_rate}"),
        ("training", f"{config.steps} steps x {config.batch_size} x {config.seq_len} bytes, lr {config.lr}, seed {config.seed}, "
                     f"{train_s / 60:.1f} min"),
        ("validation loss", f"{metrics.get('val_loss', float('nan')):.3f} nats/byte ({metrics.get('val_bpb', float('nan')):.3f} bits/byte)"),
    ]
    report = analyse(model, config.options(), out, untrained=untrained, log=log, setup=setup,
                     title="Monosemantic synapses (paper section 6.3): bdh experiment synapses")
    report.results["config"] = dataclasses.asdict(config)
    report.results["training"] = {"metrics": metrics, "steps": result.step, "run": "runs/bdh"}
    report.results["timings"].update(training_s=round(train_s, 1), total_s=round(time.time() - t_start, 1))
    report.text(f"Wall time: {(time.time() - t_start) / 60:.1f} min in all ({train_s / 60:.1f} min training, "
                f"{report.results['timings']['analysis_s'] / 60:.1f} min analysis), {torch.get_num_threads()} PyTorch thread(s).")
    return report.write(out)
