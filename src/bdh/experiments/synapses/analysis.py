"""`analyse`: the whole synapse analysis of one model (paper section 6.3) — search, held-out validation, the
cross-language check, the nulls, where the headline synapse grows, the figures, and the report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdh.experiments.common import Report
from bdh.model import BDH

from ..scaffold import Log, no_log
from .figures import plot_mechanism, plot_search_auc, plot_synapse_traces
from .growth import step_statistics, trigger_words
from .options import SynapseOptions
from .report import build_report
from .scoring import pair_increments, score_sentences, synapse_traces
from .sentences import SentenceSets, examples, sentence_sets
from .stats import length_baseline, per_concept_word
from .validation import ModelResult, search_model, validate


def _trained_and_shuffled(
    model: BDH, sets: SentenceSets, opts: SynapseOptions, layer: int, log: Log
) -> tuple[ModelResult, ModelResult]:
    """Search and validate the trained model, and the same with shuffled search labels (one set of scores)."""
    labels = sets.search_labels
    N = model.config.N
    log(f"[synapses] scoring {len(labels)} search sentences x {N * N:,} synapses (layer {layer}, head {opts.head})")
    scores = score_sentences(model, sets.search, layer, opts.head, rotate=opts.rotate, prefix=opts.prefix)
    trained = search_model("trained", scores, labels, opts, N, log)
    shuffled_labels = np.random.default_rng(opts.seed).permutation(labels)
    shuffled = search_model("shuffled labels", scores, shuffled_labels, opts, N, log)
    del scores
    validate(model, [trained, shuffled], sets, opts, layer, log)
    return trained, shuffled


def _untrained_null(untrained: BDH, sets: SentenceSets, opts: SynapseOptions, layer: int, log: Log) -> ModelResult:
    """Search and validate the untrained model of the same configuration."""
    log("[synapses] the untrained null")
    scores = score_sentences(untrained, sets.search, layer, opts.head, rotate=opts.rotate, prefix=opts.prefix)
    null = search_model("untrained", scores, sets.search_labels, opts, untrained.config.N, log)
    del scores
    validate(untrained, [null], sets, opts, layer, log)
    return null


def _headline_growth(
    model: BDH, trained: ModelResult, sets: SentenceSets, opts: SynapseOptions, layer: int
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """Per language: the headline synapse per concept word, and where it grows (step statistics, trigger words)."""
    st = opts.statistic
    top = trained.pairs[st][0]
    breakdown, steps = {}, {}
    for lang, pos in ((opts.language, sets.heldout_pos), (opts.second_language, sets.second_pos)):
        breakdown[lang] = per_concept_word(*trained.top_scores[st][lang], pos, opts.concept)
        neg = sets.heldout_neg if lang == opts.language else sets.second_neg
        incs = pair_increments(model, pos + neg, layer, opts.head, top, opts.prefix)
        steps[lang] = step_statistics(pos, incs[: len(pos)], opts.star_fraction)
        steps[lang]["trigger_words"] = trigger_words(pos + neg, incs)
    return breakdown, steps


def _plots(
    model: BDH, models: Sequence[ModelResult], opts: SynapseOptions, layer: int, figs: Path
) -> dict[str, list[Path]]:
    """The three figures of the headline synapse (of ``models[0]``, the trained model) into ``figs``."""
    st = opts.statistic
    top = models[0].pairs[st][0]
    ex = examples(opts)
    traces = [synapse_traces(model, e.data, layer, opts.head, *top, rotate=opts.rotate) for e in ex]
    concept = [k for k, e in enumerate(ex) if not e.title.startswith("contrast")]
    return {
        "fig12": plot_synapse_traces(ex, traces, top, layer, opts, figs / "fig12_synapse_trace"),
        "fig13": plot_mechanism(
            [ex[k] for k in concept], [traces[k] for k in concept], top, layer, opts, figs / "fig13_mechanism"
        ),
        "search_auc": plot_search_auc({r.name: r.searches[st].auc for r in models}, st, figs / "search_auc"),
    }


def analyse(
    model: BDH,
    opts: SynapseOptions,
    out: str | Path,
    *,
    untrained: BDH | None = None,
    log: Log = no_log,
    title: str = "Monosemantic synapses (paper section 6.3)",
    setup: Sequence[tuple[str, Any]] = (),
) -> Report:
    """Search, validate, test across languages and against the nulls, and plot into ``out/figures``; returns the
    `Report` (``report.write(out)`` writes it). ``untrained``: the untrained null (None: built with
    ``torch.manual_seed(opts.seed)``); ``setup`` rows head the report."""
    t_start = time.time()
    out = Path(out)
    layer = opts.check_model(model)
    model.eval()
    if untrained is None:
        torch.manual_seed(opts.seed)
        untrained = BDH(model.config)
    untrained.eval()
    sets = sentence_sets(opts)
    timings: dict[str, float] = {}

    t0 = time.time()
    trained, shuffled = _trained_and_shuffled(model, sets, opts, layer, log)
    timings["trained_and_shuffled_s"] = time.time() - t0
    t0 = time.time()
    null = _untrained_null(untrained, sets, opts, layer, log)
    timings["untrained_s"] = time.time() - t0
    t0 = time.time()
    breakdown, steps = _headline_growth(model, trained, sets, opts, layer)
    lengths = length_baseline(sets, opts.prefix)
    fig_files = _plots(model, (trained, null, shuffled), opts, layer, out / "figures")
    timings["figures_s"] = time.time() - t0
    timings["analysis_s"] = time.time() - t_start

    report = build_report(
        title,
        opts,
        layer,
        model.config.N,
        sets,
        trained,
        null,
        shuffled,
        breakdown,
        steps,
        lengths,
        fig_files,
        out,
        setup,
    )
    report.results["timings"] = {k: round(v, 1) for k, v in timings.items()}
    log(f"[synapses] analysis took {timings['analysis_s'] / 60:.1f} min")
    return report
