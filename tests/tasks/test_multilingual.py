"""The synthetic multilingual translation stream (paper App. B.1 format) and its labelled sentence sets."""

import re

import pytest

from bdh.tasks.multilingual import (
    COUNTRIES,
    CURRENCIES,
    Lexicon,
    StreamConfig,
    concept_sentences,
    contrast_sentences,
    parse_pairs,
    pieces,
    translation_stream,
    write_stream,
)


def test_stream_format_and_determinism():
    cfg = StreamConfig(pairs=(("en", "es"), ("en", "fr")), seed=3)
    a = translation_stream(cfg, 20_000)
    assert a == translation_stream(cfg, 20_000) and len(a) == 20_000
    assert a != translation_stream(StreamConfig(pairs=cfg.pairs, seed=4), 20_000)
    text = a.decode("utf-8", errors="ignore")
    tags = re.findall(r"<([FT]):(\w\w)>", text)
    assert tags[0][0] == "F" and all(t[0] == ("F" if i % 2 == 0 else "T") for i, t in enumerate(tags))
    langs = {t[1] for t in tags}
    assert langs == {"en", "es", "fr"}
    # every pair is one of the configured pairs, in either direction, and the source side varies
    srcs = [t[1] for t in tags[::2]]
    assert set(srcs) == {"en", "es", "fr"}


def test_translations_are_aligned_and_not_word_for_word():
    cfg = StreamConfig(pairs=(("en", "fr"),), seed=0)
    gen = pieces(cfg)
    lexicon = Lexicon(0)
    for _ in range(50):
        src, s_text, tgt, t_text, sentence = next(gen)
        assert sentence.render(src, lexicon) == s_text and sentence.render(tgt, lexicon) == t_text
        assert (
            len(s_text.split()) == len(t_text.split())
            or "currency" in sentence.concepts
            or "country" in sentence.concepts
        )
    # adjectives follow nouns in the Romance-like languages
    from bdh.tasks.multilingual import Sentence

    s = Sentence((("np", "the new report"),), frozenset())
    assert s.render("en", lexicon) == "The new report."
    fr = s.render("fr", lexicon).rstrip(".").split()
    assert fr[1].lower() == lexicon.word("report", "fr") and fr[2] == lexicon.word("new", "fr")


def test_lexicon_is_one_to_one_and_has_cognates():
    lex = Lexicon(seed=0, cognate_fraction=0.3)
    for lang in ("es", "fr", "pt", "de"):
        forms = list(lex.table[lang].values())
        assert len(forms) == len(set(forms))
    shared_stem = sum(lex.word(w, "es")[:3] == lex.word(w, "pt")[:3] for w in lex.table["en"])
    assert shared_stem > 0.6 * len(lex.table["en"])  # Romance-like languages are cognates of each other
    english_stem = sum(lex.word(w, "es")[:4] == w[:4] for w in lex.table["en"] if len(w) > 5)
    assert english_stem > 0
    assert Lexicon(seed=1).table != lex.table


def test_concept_and_contrast_sets():
    pos = concept_sentences("currency", 40, "fr", seed=1)
    neg = contrast_sentences("currency", 40, "fr", seed=1)
    forms = [f["fr"] for f in CURRENCIES.values()]
    for s in pos:
        assert s.has_concept and s.concept_spans
        for a, b in s.concept_spans:
            assert s.text.encode()[a:b].decode() in forms
    all_concepts = [f["fr"].lower() for f in CURRENCIES.values()] + [f["fr"].lower() for f in COUNTRIES.values()]
    for s in neg:
        assert not s.has_concept and not any(c in s.text.lower() for c in all_concepts if len(c) > 4)
    assert [s.text for s in pos] != [s.text for s in concept_sentences("currency", 40, "fr", seed=2)]
    # the same concept appears under different surface forms across languages ("livre sterling" / "British pound")
    assert CURRENCIES["pound"]["fr"] == "livre sterling" and CURRENCIES["pound"]["en"] == "British pound"


def test_write_stream_in_pieces(tmp_path):
    cfg = StreamConfig(pairs=(("en", "pt"),), seed=5)
    path = write_stream(tmp_path / "s.txt", cfg, 50_000, buffer_bytes=4096)
    assert path.read_bytes() == translation_stream(cfg, 50_000)
    assert [p.name for p in tmp_path.iterdir()] == ["s.txt"]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: StreamConfig(pairs=(("en", "xx"),)), "unknown language 'xx'"),
        (lambda: StreamConfig(pairs=(("en", "en"),)), "two different languages"),
        (lambda: StreamConfig(pairs=()), "at least one language pair"),
        (lambda: parse_pairs("en-es,fr"), "not of the form xx-yy"),
        (lambda: concept_sentences("weather", 3), "unknown concept"),
        (lambda: translation_stream(StreamConfig(), 0), "size must be positive"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_corpus_command(tmp_path, capsys):
    from bdh.cli import main

    assert main(["corpus", str(tmp_path / "c.txt"), "--pairs", "en-fr,en-pt", "--size", "20KB", "--seed", "2"]) == 0
    assert (tmp_path / "c.txt").read_bytes() == translation_stream(
        StreamConfig(pairs=(("en", "fr"), ("en", "pt")), seed=2), 20_000
    )
    for argv, match in (
        (["--size", "lots"], "not a size"),
        (["--pairs", "en"], "not of the form"),
        (["--pairs", "en-xx"], "unknown language"),
    ):
        assert main(["corpus", str(tmp_path / "d.txt"), *argv]) == 2
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1
