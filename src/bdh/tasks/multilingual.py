"""A synthetic sentence-aligned multilingual corpus in the paper's translation-stream format (App. B.1),
``<F:en>source<T:es>target<F:...``: an English-like template grammar, seeded lexical mappings with cognates, concept
slots; a pure function of the seed (docs/tasks.md)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bdh.errors import UserError
from bdh.outputs import atomic_file
from bdh.typed_config import TypedConfig, bounded

LANGUAGES = ("en", "es", "fr", "pt", "it", "de")
ROMANCE = ("es", "fr", "pt", "it")
CONCEPTS = ("currency", "country")

# ------------------------------------------------------------------------------------------ lexicon
DETERMINERS = ["the", "a", "this", "every", "our"]
SUBJECTS = [
    "committee",
    "parliament",
    "council",
    "commission",
    "government",
    "minister",
    "president",
    "rapporteur",
    "member",
    "delegation",
    "presidency",
    "group",
    "speaker",
    "agency",
    "court",
]
OBJECTS = [
    "report",
    "proposal",
    "budget",
    "market",
    "law",
    "treaty",
    "debate",
    "agreement",
    "programme",
    "strategy",
    "directive",
    "resolution",
    "reform",
    "policy",
    "framework",
    "decision",
    "amendment",
]
VERBS = [
    "discussed",
    "approved",
    "rejected",
    "supports",
    "proposed",
    "announced",
    "criticised",
    "requested",
    "examined",
    "adopted",
    "welcomed",
    "questioned",
    "presented",
    "defended",
    "delayed",
]
ADJECTIVES = [
    "new",
    "important",
    "european",
    "national",
    "economic",
    "public",
    "difficult",
    "clear",
    "final",
    "social",
    "common",
    "strong",
    "recent",
    "political",
    "regional",
    "financial",
    "open",
]
ADVERBS = ["today", "yesterday", "again", "finally", "carefully", "quickly", "openly"]
TOPICS = ["citizens", "workers", "farmers", "students", "regions", "families", "companies", "consumers"]
FUNCTION = ["in", "with", "for", "about", "of", "and", "on", "by", "to", "from", "paid", "prices", "value", "rate"]


def _per_language(**names: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``{key: {language: name}}`` from ``key=(one name per language, in the order of LANGUAGES)``."""
    return {key: dict(zip(LANGUAGES, per_key, strict=True)) for key, per_key in names.items()}


#: concept surface forms, per language (real names, several of them multi-word)
CURRENCIES: dict[str, dict[str, str]] = _per_language(
    euro=("euro", "euro", "euro", "euro", "euro", "Euro"),
    pound=(
        "British pound",
        "libra esterlina",
        "livre sterling",
        "libra esterlina",
        "sterlina britannica",
        "britisches Pfund",
    ),
    dollar=("dollar", "dólar", "dollar", "dólar", "dollaro", "Dollar"),
    franc=("Swiss franc", "franco suizo", "franc suisse", "franco suíço", "franco svizzero", "Schweizer Franken"),
    krona=("Swedish krona", "corona sueca", "couronne suédoise", "coroa sueca", "corona svedese", "schwedische Krone"),
    zloty=("Polish zloty", "esloti polaco", "zloty polonais", "zlóti polaco", "zloty polacco", "polnischer Zloty"),
    koruna=("Czech koruna", "corona checa", "couronne tchèque", "coroa checa", "corona ceca", "tschechische Krone"),
)
COUNTRIES: dict[str, dict[str, str]] = _per_language(
    spain=("Spain", "España", "Espagne", "Espanha", "Spagna", "Spanien"),
    france=("France", "Francia", "France", "França", "Francia", "Frankreich"),
    portugal=("Portugal", "Portugal", "Portugal", "Portugal", "Portogallo", "Portugal"),
    germany=("Germany", "Alemania", "Allemagne", "Alemanha", "Germania", "Deutschland"),
    poland=("Poland", "Polonia", "Pologne", "Polónia", "Polonia", "Polen"),
    sweden=("Sweden", "Suecia", "Suède", "Suécia", "Svezia", "Schweden"),
    italy=("Italy", "Italia", "Italie", "Itália", "Italia", "Italien"),
    greece=("Greece", "Grecia", "Grèce", "Grécia", "Grecia", "Griechenland"),
    finland=("Finland", "Finlandia", "Finlande", "Finlândia", "Finlandia", "Finnland"),
    britain=("Britain", "Gran Bretaña", "Grande-Bretagne", "Grã-Bretanha", "Gran Bretagna", "Großbritannien"),
)

_ENDINGS = {
    "es": {"noun": ["o", "a", "ión"], "verb": ["ó", "aron"], "adj": ["o", "al"], "other": ["e", "a"]},
    "fr": {"noun": ["e", "eau", "ion"], "verb": ["a", "èrent"], "adj": ["e", "ique"], "other": ["e", ""]},
    "pt": {"noun": ["o", "a", "ão"], "verb": ["ou", "aram"], "adj": ["o", "al"], "other": ["e", "a"]},
    "it": {"noun": ["o", "a", "ione"], "verb": ["ò", "arono"], "adj": ["o", "ale"], "other": ["e", "i"]},
    "de": {"noun": ["ung", "er", "heit"], "verb": ["te", "ten"], "adj": ["ig", "isch"], "other": ["", "e"]},
}
_VOWELS = "aeiou"
_CONSONANTS = "bcdfghjklmnprstvz"


def _cipher(seed: str) -> dict[str, str]:
    """A letter substitution that maps vowels to vowels and consonants to consonants (pronounceable)."""
    rng = random.Random(seed)
    v, c = list(_VOWELS), list(_CONSONANTS)
    rng.shuffle(v)
    rng.shuffle(c)
    table = dict(zip(_VOWELS, v))
    table.update(zip(_CONSONANTS, c))
    return table


def _part_of_speech(word: str) -> str:
    if word in SUBJECTS or word in OBJECTS or word in TOPICS:
        return "noun"
    if word in VERBS:
        return "verb"
    if word in ADJECTIVES:
        return "adj"
    return "other"


@dataclass(frozen=True)
class Lexicon:
    """Word -> surface form per language from ``seed``: ``cognate_fraction`` keep the English stem, the
    rest ciphered."""

    seed: int = 0
    cognate_fraction: float = 0.3
    table: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.cognate_fraction <= 1.0:
            raise UserError(f"Lexicon.cognate_fraction: must lie in [0, 1], got {self.cognate_fraction}")
        words = DETERMINERS + SUBJECTS + OBJECTS + VERBS + ADJECTIVES + ADVERBS + TOPICS + FUNCTION
        rng = random.Random(f"lexicon-{self.seed}")
        romance, germanic = _cipher(f"romance-{self.seed}"), _cipher(f"germanic-{self.seed}")
        table: dict[str, dict[str, str]] = {"en": {w: w for w in words}}
        cognate = {w: rng.random() < self.cognate_fraction for w in words}
        for lang in LANGUAGES[1:]:
            lang_rng = random.Random(f"{lang}-{self.seed}")
            forms: dict[str, str] = {}
            used: set[str] = set()
            for w in words:
                pos = _part_of_speech(w)
                if pos == "other" or not cognate[w]:
                    stem = "".join((germanic if lang == "de" else romance).get(ch, ch) for ch in w)
                else:
                    stem = w
                if len(stem) > 4 and pos != "other":
                    stem = stem[: len(stem) - 1 - lang_rng.randrange(2)]
                form = stem + lang_rng.choice(_ENDINGS[lang][pos])
                while form in used:  # keep the mapping one-to-one
                    form += lang_rng.choice(_VOWELS)
                used.add(form)
                forms[w] = form
            table[lang] = forms
        object.__setattr__(self, "table", table)

    def word(self, word: str, lang: str) -> str:
        return self.table[lang][word]


# ------------------------------------------------------------------------------------------ sentences
@dataclass(frozen=True)
class Sentence:
    """One abstract sentence of (kind, value) items (``word``, ``currency``, ``country``, ``np``), in any language."""

    items: tuple[tuple[str, str], ...]
    concepts: frozenset[str]

    def render(self, lang: str, lexicon: Lexicon) -> str:
        return self.render_with_spans(lang, lexicon)[0]

    def render_with_spans(self, lang: str, lexicon: Lexicon) -> tuple[str, list[tuple[str, int, int]]]:
        """The sentence in ``lang`` and the (kind, start, end) byte spans of its concept words."""
        if lang not in LANGUAGES:
            raise UserError(f"unknown language {lang!r}; known: {', '.join(LANGUAGES)}")
        words: list[tuple[str, str]] = []  # (kind, surface)
        for kind, value in self.items:
            if kind == "currency":
                words.append((kind, CURRENCIES[value][lang]))
            elif kind == "country":
                words.append((kind, COUNTRIES[value][lang]))
            elif kind == "np":
                det, adj, noun = value.split(" ")
                order = [det, noun, adj] if lang in ROMANCE else [det, adj, noun]
                words.extend(("word", lexicon.word(w, lang)) for w in order if w != "-")
            else:
                words.append(("word", lexicon.word(value, lang)))
        first = words[0][1]
        words[0] = (words[0][0], first[:1].upper() + first[1:])
        text, spans, pos = "", [], 0
        for i, (kind, surface) in enumerate(words):
            piece = (" " if i else "") + surface
            start = pos + (1 if i else 0)
            pos += len(piece.encode("utf-8"))
            text += piece
            if kind in CONCEPTS:
                spans.append((kind, start, pos))
        return text + ".", spans


def _np(rng: random.Random, nouns: list[str], with_adj: bool = True) -> tuple[str, str]:
    adj = rng.choice(ADJECTIVES) if with_adj else "-"
    return ("np", f"{rng.choice(DETERMINERS)} {adj} {rng.choice(nouns)}")


def make_sentence(rng: random.Random, concept: str | None) -> Sentence:
    """One sentence containing ``concept`` ('currency', 'country', 'both') or none (a contrast sentence)."""
    items: list[tuple[str, str]] = [
        _np(rng, SUBJECTS, rng.random() < 0.5),
        ("word", rng.choice(VERBS)),
        _np(rng, OBJECTS),
    ]
    concepts: set[str] = set()
    if concept in ("country", "both"):
        items += [("word", rng.choice(["in", "for", "from"])), ("country", rng.choice(sorted(COUNTRIES)))]
        concepts.add("country")
    if concept in ("currency", "both"):
        form = rng.randrange(3)
        if form == 0:
            items += [("word", "in"), ("currency", rng.choice(sorted(CURRENCIES)))]
        elif form == 1:
            items += [("word", "on"), ("word", "prices"), ("word", "in"), ("currency", rng.choice(sorted(CURRENCIES)))]
        else:
            items += [
                ("word", "about"),
                ("word", "the"),
                ("word", "value"),
                ("word", "of"),
                ("word", "the"),
                ("currency", rng.choice(sorted(CURRENCIES))),
            ]
        concepts.add("currency")
    if concept is None or rng.random() < 0.5:
        items += [("word", rng.choice(["for", "with", "about"])), ("word", rng.choice(TOPICS))]
    if rng.random() < 0.4:
        items.append(("word", rng.choice(ADVERBS)))
    return Sentence(tuple(items), frozenset(concepts))


def _random_concept(rng: random.Random, concept_rate: float) -> str | None:
    if rng.random() >= concept_rate:
        return None
    return rng.choice(["currency", "country", "both"])


# ------------------------------------------------------------------------------------------ streams
@dataclass(frozen=True)
class StreamConfig(TypedConfig):
    """A translation stream (``bdh corpus``): ``pairs`` such as ``(("en", "es"),)``, ``concept_rate``,
    ``seed``, lexicon."""

    pairs: tuple[tuple[str, str], ...] = (("en", "es"),)
    concept_rate: float = bounded(0.5, ge=0, le=1)
    seed: int = 0
    lexicon_seed: int = 0
    cognate_fraction: float = bounded(0.3, ge=0, le=1)

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if not self.pairs:
            self._fail("pairs", "give at least one language pair, e.g. en-es")
        for a, b in self.pairs:
            for lang in (a, b):
                if lang not in LANGUAGES:
                    self._fail("pairs", f"unknown language {lang!r}; known: {', '.join(LANGUAGES)}")
            if a == b:
                self._fail("pairs", f"a pair needs two different languages, got {a}-{b}")


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """'en-es,en-fr' -> (('en', 'es'), ('en', 'fr')), with a one-line error for a malformed pair."""
    pairs = []
    for part in text.split(","):
        bits = part.strip().split("-")
        if len(bits) != 2 or not all(bits):
            raise UserError(f"language pair {part.strip()!r} is not of the form xx-yy (e.g. en-es)")
        pairs.append((bits[0], bits[1]))
    return tuple(pairs)


def pieces(config: StreamConfig) -> Iterator[tuple[str, str, str, str, Sentence]]:
    """Endless (source language, source text, target language, target text, sentence) tuples."""
    lexicon = Lexicon(config.lexicon_seed, config.cognate_fraction)
    rng = random.Random(f"stream-{config.seed}")
    while True:
        a, b = config.pairs[rng.randrange(len(config.pairs))]
        src, tgt = (a, b) if rng.random() < 0.5 else (b, a)
        sentence = make_sentence(rng, _random_concept(rng, config.concept_rate))
        yield src, sentence.render(src, lexicon), tgt, sentence.render(tgt, lexicon), sentence


def segment(src: str, src_text: str, tgt: str, tgt_text: str) -> str:
    """One source/target pair in the paper's stream format."""
    return f"<F:{src}>{src_text}<T:{tgt}>{tgt_text}"


def translation_stream(config: StreamConfig, size_bytes: int) -> bytes:
    """The first ``size_bytes`` bytes (UTF-8) of the stream; whole pairs, cut at the end."""
    if size_bytes < 1:
        raise UserError(f"translation_stream: size must be positive, got {size_bytes}")
    out = bytearray()
    for src, s_text, tgt, t_text, _ in pieces(config):
        out += segment(src, s_text, tgt, t_text).encode("utf-8")
        if len(out) >= size_bytes:
            return bytes(out[:size_bytes])
    raise AssertionError("unreachable")


def write_stream(path: str | os.PathLike, config: StreamConfig, size_bytes: int, buffer_bytes: int = 1 << 22) -> Path:
    """Write ``size_bytes`` of the stream to ``path`` in pieces (constant memory), atomically."""
    if size_bytes < 1:
        raise UserError(f"write_stream: size must be positive, got {size_bytes}")
    path = Path(path)
    written = 0
    buf = bytearray()
    with atomic_file(path, "wb") as f:
        for src, s_text, tgt, t_text, _ in pieces(config):
            buf += segment(src, s_text, tgt, t_text).encode("utf-8")
            if len(buf) >= buffer_bytes or written + len(buf) >= size_bytes:
                take = min(len(buf), size_bytes - written)
                f.write(buf[:take])
                written += take
                buf = bytearray()
                if written >= size_bytes:
                    break
    return path


# ------------------------------------------------------------------------------------------ labelled sets
@dataclass(frozen=True)
class LabelledSentence:
    """A sentence rendered in one language, with whether it contains the concept and where."""

    language: str
    text: str
    has_concept: bool
    concept_spans: tuple[tuple[int, int], ...]  # byte ranges of the concept's surface forms


def labelled_sentences(
    concept: str, count: int, language: str, seed: int, positive: bool, lexicon_seed: int = 0
) -> list[LabelledSentence]:
    """``count`` sentences in ``language`` that contain ``concept`` (positive) or contain no concept at all."""
    if concept not in CONCEPTS:
        raise UserError(f"unknown concept {concept!r}; known: {', '.join(CONCEPTS)}")
    if count < 1:
        raise UserError(f"count must be positive, got {count}")
    lexicon = Lexicon(lexicon_seed)
    rng = random.Random(f"labelled-{concept}-{positive}-{language}-{seed}")
    out = []
    for _ in range(count):
        sentence = make_sentence(rng, concept if positive else None)
        text, spans = sentence.render_with_spans(language, lexicon)
        out.append(LabelledSentence(language, text, positive, tuple((a, b) for kind, a, b in spans if kind == concept)))
    return out


def concept_sentences(
    concept: str, count: int, language: str = "en", seed: int = 0, lexicon_seed: int = 0
) -> list[LabelledSentence]:
    """Sentences that mention ``concept`` (e.g. a currency)."""
    return labelled_sentences(concept, count, language, seed, True, lexicon_seed)


def contrast_sentences(
    concept: str, count: int, language: str = "en", seed: int = 0, lexicon_seed: int = 0
) -> list[LabelledSentence]:
    """Sentences on the same topics without any concept slot (the paper's contrast set)."""
    return labelled_sentences(concept, count, language, seed, False, lexicon_seed)
