"""The labelled sentences of the synapse analysis (paper section 6.3): search and held-out sets drawn from
seeds the training stream never uses, length matching, the bytes fed per sentence, and the example
segments of the figures (Figs. 12-13)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bdh.errors import UserError
from bdh.experiments.common import encode_segment
from bdh.tasks.multilingual import (
    CONCEPTS,
    LabelledSentence,
    Lexicon,
    Sentence,
    concept_sentences,
    contrast_sentences,
    make_sentence,
)

from .options import EXAMPLE_SEED, HELDOUT_SEED, MATCH_TOLERANCE, POOL, POS_POOL, SEARCH_SEED, SURFACES, SynapseOptions

Sentences = list[LabelledSentence]


def other_concept(concept: str) -> str:
    """The concept that is not ``concept`` (currency <-> country)."""
    return next(c for c in CONCEPTS if c != concept)


def _fresh(make: Callable[[int], Sentences], count: int, exclude: set[str]) -> tuple[Sentences, int]:
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

    search_pos: Sentences
    search_neg: Sentences
    heldout_pos: Sentences
    heldout_neg: Sentences
    second_pos: Sentences
    second_neg: Sentences
    other: Sentences  # held-out sentences of the other concept, first language
    dropped: int = 0  # held-out sentences dropped because the search set had the same text

    @property
    def search(self) -> Sentences:
        return self.search_pos + self.search_neg

    @property
    def search_labels(self) -> np.ndarray:
        return np.r_[np.ones(len(self.search_pos), bool), np.zeros(len(self.search_neg), bool)]

    def held_out(self) -> dict[str, tuple[Sentences, Sentences]]:
        """name -> (positives, negatives) of every held-out comparison."""
        lang1, lang2 = self.heldout_pos[0].language, self.second_pos[0].language
        return {
            lang1: (self.heldout_pos, self.heldout_neg),
            lang2: (self.second_pos, self.second_neg),
            f"{lang1} vs other concept": (self.heldout_pos, self.other),
        }


def _byte_lengths(sentences: Sequence[LabelledSentence]) -> np.ndarray:
    return np.array([len(s.text.encode("utf-8")) for s in sentences], dtype=np.int64)


def length_matched(pos: Sequence[LabelledSentence], pool: Sequence[LabelledSentence]) -> Sentences:
    """For each sentence of ``pos`` in turn, the not yet chosen sentence of ``pool`` nearest in byte length
    (the first on ties)."""
    lengths = _byte_lengths(pool)
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


def matched_pairs(
    pos_pool: Sequence[LabelledSentence],
    neg_pool: Sequence[LabelledSentence],
    count: int,
    tolerance: int = MATCH_TOLERANCE,
) -> tuple[Sentences, Sentences]:
    """``count`` concept sentences of ``pos_pool`` (in order) each paired with an unused contrast sentence of
    ``neg_pool`` within ``tolerance`` bytes of its length; concept sentences without a partner are skipped."""
    lengths = _byte_lengths(neg_pool)
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
    raise UserError(
        f"matched_pairs: only {len(pos)} of {count} concept sentences found a contrast sentence within "
        f"{tolerance} bytes; use larger pools"
    )


def sentence_sets(opts: SynapseOptions) -> SentenceSets:
    """Search and held-out sets from seeds the training stream never uses; held-out sentences that repeat a search
    sentence are replaced. With ``match_length`` each concept sentence gets a contrast sentence of nearly its byte
    length, since the end-of-sentence value is a sum over the sentence and concept sentences run longer."""
    c, lang, lang2, ls = opts.concept, opts.language, opts.second_language, opts.lexicon_seed
    s_seed, h_seed = SEARCH_SEED + opts.seed, HELDOUT_SEED + opts.seed
    m = opts.match_length

    def draw(make: Callable[[int], Sentences], count: int, factor: int, exclude: set[str]) -> tuple[Sentences, int]:
        return _fresh(make, factor * count if m else count, exclude)

    def pair(pos: Sentences, neg: Sentences, count: int) -> tuple[Sentences, Sentences]:
        return matched_pairs(pos, neg, count) if m else (pos[:count], neg[:count])

    n, h = opts.search, opts.heldout
    search_pos, search_neg = pair(
        concept_sentences(c, POS_POOL * n if m else n, lang, s_seed, ls),
        contrast_sentences(c, POOL * n if m else n, lang, s_seed, ls),
        n,
    )
    seen = {s.text for s in search_pos + search_neg}
    pos, d1 = draw(lambda k: concept_sentences(c, k, lang, h_seed, ls), h, POS_POOL, seen)
    neg, d2 = draw(lambda k: contrast_sentences(c, k, lang, h_seed, ls), h, POOL, seen)
    h_pos, h_neg = pair(pos, neg, h)
    pool, d3 = draw(lambda k: concept_sentences(other_concept(c), k, lang, h_seed, ls), h, POOL, seen)
    other = length_matched(h_pos, pool) if m else pool[:h]
    second_pos, second_neg = pair(
        concept_sentences(c, POS_POOL * h if m else h, lang2, h_seed, ls),
        contrast_sentences(c, POOL * h if m else h, lang2, h_seed, ls),
        h,
    )
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


# ------------------------------------------------------------------------------------------ figure examples
@dataclass
class Example:
    """A segment ``<F:src>source<T:tgt>target`` for the figures, with its byte spans."""

    title: str
    data: bytes
    source: tuple[int, int]
    target: tuple[int, int]
    concept_spans: list[tuple[int, int]]


def _example_sentences(opts: SynapseOptions, rng: random.Random) -> tuple[Sentence, Sentence]:
    """A concept sentence naming a word whose surface forms differ between the two languages (the
    preferred word if one comes up in 500 draws), and a contrast sentence."""
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
    return concept_s, make_sentence(rng, None)


def examples(opts: SynapseOptions) -> list[Example]:
    """Four segments: a concept and a contrast sentence with ``language`` as source, then the same two
    sentences with ``second_language`` as source. The concept sentence names a concept word whose surface
    forms differ between the languages (for currencies, the British pound if possible, as in Fig. 12)."""
    rng = random.Random(f"synapse-examples-{opts.concept}-{EXAMPLE_SEED + opts.seed}")
    lexicon = Lexicon(opts.lexicon_seed)
    l1, l2 = opts.language, opts.second_language
    concept_s, contrast_s = _example_sentences(opts, rng)
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
