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
`analyse` does it for a given model, and `write_analysis` writes that into a folder and returns what
``bdh synapses RUN_DIR`` prints (`WrittenAnalysis.summary`).

The modules, one step each: `options` (`SynapseOptions`, the constants), `sentences` (the labelled sets,
length matching, the figure examples), `scoring` (sentence scores, traces, increments), `stats` (U, the
search, the held-out test), `validation` (search and test one model), `growth` (where a synapse grows),
`claims` (the paper's claims checked), `report` (report.md and results.json), `figures`, `analysis`
(`analyse`), `folder` (`write_analysis`) and `experiment` (`Config`, `run`). Every public name is importable
from this package.
"""

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
