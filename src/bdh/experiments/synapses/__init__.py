"""Monosemantic synapses (paper section 6.3, Figs. 12-13, appendix B.3) at laptop scale.

The paper's procedure on a small BDH trained on the synthetic translation stream: every synapse sigma_l[i, j]
(Eq. 16) of a head scored per sentence (`scoring`), ranked by its Mann-Whitney U on a search set (`stats`),
tested on held-out sentences in two languages and against nulls (`validation`, `analysis`), with the analogues of
Figs. 12-13 (`figures`). The method and the measured run are in docs/experiments.md."""

from __future__ import annotations

from .experiment import Config, run
from .folder import write_analysis
from .options import SynapseOptions
from .scoring import score_sentences, synapse_traces
from .sentences import examples, sentence_bytes, sentence_sets
from .stats import length_baseline, mann_whitney_test, mann_whitney_u, search

__all__ = [
    "Config",
    "SynapseOptions",
    "examples",
    "length_baseline",
    "mann_whitney_test",
    "mann_whitney_u",
    "run",
    "score_sentences",
    "search",
    "sentence_bytes",
    "sentence_sets",
    "synapse_traces",
    "write_analysis",
]
