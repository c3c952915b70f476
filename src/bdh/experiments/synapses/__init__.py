"""Monosemantic synapses (paper section 6.3, Figs. 12-13, appendix B.3) at laptop scale.

The paper's procedure on a small BDH trained on the synthetic translation stream: every synapse sigma_l[i, j]
(Eq. 16) of a head scored per sentence (`scoring`), ranked by its Mann-Whitney U on a search set (`stats`),
tested on held-out sentences in two languages and against nulls (`validation`, `analysis`), with the analogues of
Figs. 12-13 (`figures`). The method and the measured run are in docs/experiments.md."""

from __future__ import annotations

from ..scaffold import Log
from .analysis import analyse
from .claims import Verdict, verdicts
from .experiment import Config, run
from .figures import plot_mechanism, plot_search_auc, plot_synapse_traces
from .folder import WrittenAnalysis, write_analysis
from .growth import ROLES, step_statistics, trigger_words
from .options import (
    EXAMPLE_SEED,
    HELDOUT_SEED,
    MATCH_TOLERANCE,
    PAPER,
    POOL,
    POS_POOL,
    SEARCH_SEED,
    STATISTICS,
    SURFACES,
    SynapseOptions,
)
from .report import build_report
from .scoring import Scores, pair_increments, score_sentences, synapse_traces
from .sentences import (
    Example,
    SentenceSets,
    concept_key,
    examples,
    length_matched,
    matched_pairs,
    other_concept,
    sentence_bytes,
    sentence_sets,
)
from .stats import Search, effect_size, length_baseline, mann_whitney_test, mann_whitney_u, per_concept_word, search
from .validation import ModelResult

__all__ = [
    "EXAMPLE_SEED",
    "HELDOUT_SEED",
    "MATCH_TOLERANCE",
    "PAPER",
    "POOL",
    "POS_POOL",
    "ROLES",
    "SEARCH_SEED",
    "STATISTICS",
    "SURFACES",
    "Config",
    "Example",
    "Log",
    "ModelResult",
    "Scores",
    "Search",
    "SentenceSets",
    "SynapseOptions",
    "Verdict",
    "WrittenAnalysis",
    "analyse",
    "build_report",
    "concept_key",
    "effect_size",
    "examples",
    "length_baseline",
    "length_matched",
    "mann_whitney_test",
    "mann_whitney_u",
    "matched_pairs",
    "other_concept",
    "pair_increments",
    "per_concept_word",
    "plot_mechanism",
    "plot_search_auc",
    "plot_synapse_traces",
    "run",
    "score_sentences",
    "search",
    "sentence_bytes",
    "sentence_sets",
    "step_statistics",
    "synapse_traces",
    "trigger_words",
    "verdicts",
    "write_analysis",
]
