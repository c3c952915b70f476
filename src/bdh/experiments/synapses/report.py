"""The markdown report and results.json of a synapse analysis (paper section 6.3): one function per section
of report.md, and the results that `build_report` stores beside it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdh.experiments.common import Report

from .claims import Verdict, verdicts
from .growth import ROLES
from .options import HELDOUT_SEED, MATCH_TOLERANCE, PAPER, POOL, POS_POOL, SEARCH_SEED, STATISTICS, SynapseOptions
from .sentences import SentenceSets
from .stats import fmt_p
from .validation import ModelResult

#: the roles of a byte in the order the report lists them (concept words first, elsewhere last)
ROLE_ORDER = ROLES[1:] + ROLES[:1]
#: figure key -> caption
CAPTIONS = {
    "fig12": "Fig. 12 analogue: the headline synapse along example segments; * marks steps above the threshold; "
    "source (blue) and target (green) spans, concept words (orange)",
    "fig13": "Fig. 13 analogue: y_{l-1}[i] and x_l[j] per byte, and their product (the Hebbian increment)",
    "search_auc": "search-set AUC of all candidates: trained model and the two nulls",
}


def _setup(
    rep: Report, opts: SynapseOptions, layer: int, N: int, sets: SentenceSets, setup: Sequence[tuple[str, Any]]
) -> None:
    """What was read and how: the opening paragraph and the settings table."""
    l1, l2 = opts.language, opts.second_language
    prefix = f"`<F:{l1}>` / `<F:{l2}>` before each sentence" if opts.prefix else "none (bare sentences)"
    rep.text(
        f"Synapses sigma_l[i, j] from y-neuron i of layer {layer - 1} to x-neuron j of layer {layer}, head {opts.head} "
        f"({N} x {N} = {N * N:,} candidates), concept **{opts.concept}**. Each sentence is read from a zero state; "
        f"language prefix: {prefix}. Statistics: `end` = sigma at the end of the sentence (Eq. 16, "
        f"{'with' if opts.rotate else 'without'} the RoPE rotation), `max` = the largest Hebbian increment "
        f"y_{{l-1}}[i] x_l[j] over the sentence. The headline synapse is chosen by `{opts.statistic}`."
    )
    if opts.match_length:
        matching = (
            f"length-matched: each concept sentence paired with a contrast sentence within {MATCH_TOLERANCE} "
            f"bytes (pools {POS_POOL}x and {POOL}x larger); other-concept sentences nearest in length"
        )
    else:
        matching = "as drawn (not length-matched)"
    rows = list(setup) + [
        ("layer / head", f"{layer} / {opts.head}"),
        (
            "search set",
            f"{len(sets.search_pos)} + {len(sets.search_neg)} sentences ({l1}), seed {SEARCH_SEED + opts.seed}",
        ),
        (
            "held-out sets",
            f"{opts.heldout} + {opts.heldout} per comparison, seed {HELDOUT_SEED + opts.seed}; "
            f"{sets.dropped} drawn sentences dropped as duplicates of search sentences",
        ),
        ("comparison sentences", matching),
    ]
    rep.table(["setting", "value"], rows)


def _top_synapses(rep: Report, opts: SynapseOptions, N: int, trained: ModelResult) -> None:
    """The top synapses of each statistic with their held-out tests."""
    l1, l2 = opts.language, opts.second_language
    rep.heading("The top synapses of the trained model")
    for stat in STATISTICS:
        s = trained.searches[stat]
        rows = []
        for k, (c, pair) in enumerate(zip(s.top, trained.pairs[stat], strict=True)):
            a, b, o = (trained.tests[stat][name][k] for name in (l1, l2, f"{l1} vs other concept"))
            rows.append(
                [
                    k + 1,
                    f"({pair[0]}, {pair[1]})",
                    f"({opts.head * N + pair[0]}, {opts.head * N + pair[1]})",
                    float(s.auc[c]),
                    f"{a['U']:.0f}",
                    a["auc"],
                    fmt_p(a["p"]),
                    a["r"],
                    b["auc"],
                    fmt_p(b["p"]),
                    o["auc"],
                ]
            )
        rep.text(f"Statistic `{stat}`" + (" (headline)" if stat == opts.statistic else "") + ":")
        rep.table(
            [
                "rank",
                "(i, j) in head",
                "(i, j) global",
                "search AUC",
                f"U {l1}",
                f"U/U_opt {l1}",
                f"p {l1}",
                f"r {l1}",
                f"U/U_opt {l2}",
                f"p {l2}",
                "U/U_opt vs other concept",
            ],
            rows,
        )


def _against_paper(rep: Report, opts: SynapseOptions, trained: ModelResult) -> None:
    """The headline synapse's held-out test beside the paper's numbers."""
    t1 = trained.tests[opts.statistic][opts.language][0]
    rep.heading("The headline synapse against the paper")
    r_paper = f"{PAPER['r_reported']} as printed; {2 * PAPER['U'] / PAPER['U_opt'] - 1:.3f} from its U"
    rep.table(
        ["", "paper (Europarl, 8 layers, n = 49152)", "here"],
        [
            ["U", PAPER["U"], f"{t1['U']:.0f}"],
            ["U_opt", PAPER["U_opt"], f"{t1['U_opt']:.0f}"],
            ["U / U_opt", PAPER["U"] / PAPER["U_opt"], t1["auc"]],
            ["p (one-sided)", "< 1e-14", fmt_p(t1["p"])],
            ["rank-biserial r = 2U/U_opt - 1", r_paper, t1["r"]],
        ],
    )
    rep.text(
        "The paper prints r = 0.86 next to U = 2368 of 2500, but 2U/U_opt - 1 = 0.894 (0.86 would need U = 2325); "
        "the r here is computed from U."
    )


def _across_languages(rep: Report, opts: SynapseOptions, breakdown: dict[str, list[dict[str, Any]]]) -> None:
    """The headline synapse per concept word, in both languages."""
    rep.heading("Across languages and concept words")
    rows = [
        [lang, r["word"], r["surface"], r["n"], r["auc"]]
        for lang in (opts.language, opts.second_language)
        for r in breakdown[lang]
    ]
    rep.text(
        f"The headline synapse ({opts.statistic}) on the held-out {opts.concept} sentences of each concept word "
        f"against all held-out contrast sentences of the same language (AUC = U/U_opt of that subset):"
    )
    rep.table(["language", "concept word", "surface form", "sentences", "AUC"], rows)


def _nulls(
    rep: Report,
    opts: SynapseOptions,
    N: int,
    sets: SentenceSets,
    models: Sequence[ModelResult],
    lengths: dict[str, float],
) -> None:
    """The trained model beside the untrained and shuffled-label nulls, and the sentence length alone."""
    l1, l2, top_k = opts.language, opts.second_language, opts.top_k
    rep.heading("Nulls: is it selection?")
    rep.text(
        f"The same search ({len(sets.search_pos)} + {len(sets.search_neg)} sentences) and held-out test on an "
        f"untrained model of the same configuration (seed {opts.seed}) and on the trained model with shuffled "
        f"search labels. A search over {N * N:,} candidates finds high search AUCs by chance; only the held-out "
        "columns count."
    )
    rows = []
    for r in models:
        for stat in STATISTICS:
            sm = r.summary(stat, l1)
            rows.append(
                [
                    r.name,
                    stat,
                    sm["top1_search_auc"],
                    sm["top1_heldout_auc"],
                    fmt_p(sm["top1_p"]),
                    sm["topk_mean_heldout_auc"],
                    sm["topk_max_heldout_auc"],
                    r.tests[stat][l2][0]["auc"],
                    sm["search_auc>=0.8"],
                    sm["search_auc>=0.9"],
                    sm["search_auc>=0.95"],
                ]
            )
    rep.table(
        [
            "model",
            "statistic",
            "top-1 search AUC",
            f"top-1 held-out U/U_opt ({l1})",
            "p",
            f"top-{top_k} mean held-out",
            f"top-{top_k} max held-out",
            f"top-1 held-out ({l2})",
            "candidates AUC>=0.8",
            ">=0.9",
            ">=0.95",
        ],
        rows,
    )
    rep.text(
        "Sentence length alone (bytes, longer = concept) reaches held-out AUC "
        + ", ".join(f"{v:.3f} ({k})" for k, v in lengths.items())
        + "; the end-of-sentence value is a sum over the sentence, so a synapse that grows on every word would "
        "inherit this."
    )


def _growth(rep: Report, opts: SynapseOptions, steps: dict[str, dict[str, Any]]) -> None:
    """Where the headline synapse grows: increment and byte shares per role, and the trigger words."""
    rep.heading("Where the synapse grows")
    rows = [
        [lang]
        + [100 * s["increment_share"][r] for r in ROLE_ORDER]
        + [100 * s["byte_share"][r] for r in ROLE_ORDER]
        + [100 * s["bytes_above_threshold"]]
        for lang, s in steps.items()
    ]
    rep.text(
        f"On the held-out {opts.concept} sentences, the headline synapse's Hebbian increments "
        "y_{l-1}[i] x_l[j] summed by the role of the byte read (a word owns its trailing space, the byte read "
        "just before the next word): % of the total increment, % of the bytes, and % of bytes whose increment "
        f"exceeds {opts.star_fraction:g} of the largest."
    )
    rep.table(
        ["language"]
        + [f"increment: {r}" for r in ROLE_ORDER]
        + [f"bytes: {r}" for r in ROLE_ORDER]
        + ["bytes above threshold"],
        rows,
        digits=1,
    )
    rep.text(
        f"The words on which the increment accumulates most, over the held-out {opts.concept} and contrast "
        "sentences (a concept's surface form counts as one word):"
    )
    rows = [
        [lang, ", ".join(f"{w['word']} ({100 * w['share']:.0f}%)" for w in s["trigger_words"])]
        for lang, s in steps.items()
    ]
    rep.table(["language", "words (share of the total increment)"], rows)


def _figures(rep: Report, fig_files: dict[str, list[Path]], out: Path) -> None:
    """The PNG of each figure, linked relative to the report."""
    rep.heading("Figures")
    for key, caption in CAPTIONS.items():
        png = [p for p in fig_files[key] if p.suffix == ".png"]
        if png:
            rep.figure(png[0].relative_to(out).as_posix(), caption)


def _verdicts(rep: Report, vs: Sequence[Verdict]) -> None:
    """The table of the paper's claims and whether they held."""
    rep.heading("What matched the paper and what did not")
    rep.table(["claim", "held here", "evidence"], [[c, "yes" if ok else "no", ev] for c, ok, ev in vs])


def _model_results(r: ModelResult) -> dict[str, Any]:
    """One model's searches and held-out tests, per statistic, for results.json."""
    return {
        stat: {
            "top": [list(p) for p in r.pairs[stat]],
            "search_auc": [float(r.searches[stat].auc[c]) for c in r.searches[stat].top],
            "search_counts": r.searches[stat].counts(),
            "heldout": r.tests[stat],
        }
        for stat in STATISTICS
    }


def _headline(opts: SynapseOptions, N: int, trained: ModelResult) -> dict[str, Any]:
    """The headline synapse (in the head and in the layer) and its held-out tests, for results.json."""
    st = opts.statistic
    i, j = trained.pairs[st][0]
    return {
        "statistic": st,
        "synapse_in_head": [i, j],
        "synapse_global": [opts.head * N + i, opts.head * N + j],
        **{name: trained.tests[st][name][0] for name in trained.tests[st]},
    }


def build_report(
    title: str,
    opts: SynapseOptions,
    layer: int,
    N: int,
    sets: SentenceSets,
    trained: ModelResult,
    null: ModelResult,
    shuffled: ModelResult,
    breakdown: dict[str, list[dict[str, Any]]],
    steps: dict[str, dict[str, float]],
    lengths: dict[str, float],
    fig_files: dict[str, list[Path]],
    out: Path,
    setup: Sequence[tuple[str, Any]],
) -> Report:
    """The markdown report and results.json of an analysis."""
    rep = Report(title)
    _setup(rep, opts, layer, N, sets, setup)
    _top_synapses(rep, opts, N, trained)
    _against_paper(rep, opts, trained)
    _across_languages(rep, opts, breakdown)
    _nulls(rep, opts, N, sets, (trained, null, shuffled), lengths)
    _growth(rep, opts, steps)
    _figures(rep, fig_files, out)
    vs = verdicts(trained, null, shuffled, opts, steps, lengths)
    _verdicts(rep, vs)
    rep.results.update(
        {
            "options": dataclasses.asdict(opts),
            "layer": layer,
            "N": N,
            "candidates": N * N,
            "prefix": [f"<F:{opts.language}>", f"<F:{opts.second_language}>"] if opts.prefix else None,
            "paper": PAPER,
            "headline": _headline(opts, N, trained),
            "models": {r.name: _model_results(r) for r in (trained, null, shuffled)},
            "per_concept_word": breakdown,
            "steps": steps,
            "length_baseline_auc": lengths,
            "duplicates_dropped": sets.dropped,
            "verdicts": [{"claim": c, "held": ok, "evidence": ev} for c, ok, ev in vs],
            "figures": {k: [p.relative_to(out).as_posix() for p in v] for k, v in fig_files.items()},
        }
    )
    return rep
