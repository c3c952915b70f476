"""Search and held-out validation of one model (paper section 6.3): the top synapses of each statistic on
the search set, and the one-sided Mann-Whitney test of each on every held-out comparison."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bdh.model import BDH
from bdh.tasks.multilingual import LabelledSentence

from ..scaffold import Log
from .options import STATISTICS, SynapseOptions
from .scoring import Scores, score_sentences
from .sentences import SentenceSets
from .stats import Search, mann_whitney_test, search


@dataclass
class ModelResult:
    """Search and held-out validation of one model (trained, untrained, shuffled labels) per statistic."""

    name: str
    searches: dict[str, Search] = field(default_factory=dict)
    #: statistic -> the top synapses (i, j) within the head, best first
    pairs: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    #: statistic -> comparison -> one test per top synapse
    tests: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)
    #: statistic -> comparison -> the top synapse's held-out (concept, contrast) scores
    top_scores: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def summary(self, statistic: str, comparison: str) -> dict[str, Any]:
        tests = self.tests[statistic][comparison]
        aucs = [t["auc"] for t in tests]
        s = self.searches[statistic]
        return {
            "top1_search_auc": float(s.auc[s.top[0]]),
            "top1_heldout_auc": aucs[0],
            "top1_p": tests[0]["p"],
            "topk_mean_heldout_auc": float(np.mean(aucs)),
            "topk_max_heldout_auc": float(np.max(aucs)),
            **{f"search_{k}": v for k, v in s.counts().items()},
        }


def search_model(name: str, scores: Scores, labels: np.ndarray, opts: SynapseOptions, N: int, log: Log) -> ModelResult:
    """Rank all N^2 candidates by each statistic; the top ``opts.top_k`` as (i, j) within the head."""
    result = ModelResult(name)
    for st in STATISTICS:
        s = search(scores.get(st), labels, opts.top_k)
        result.searches[st] = s
        result.pairs[st] = [tuple(int(v) for v in divmod(int(c), N)) for c in s.top]
        log(
            f"[synapses] {name}: {st} statistic, best search AUC {s.auc[s.top[0]]:.3f} at synapse {result.pairs[st][0]}"
        )
    return result


def validate(
    model: BDH, results: Sequence[ModelResult], sets: SentenceSets, opts: SynapseOptions, layer: int, log: Log
) -> None:
    """Score the held-out sets once on the top synapses of all ``results`` (searches on ``model``) and
    test each top synapse."""
    pairs = sorted({p for result in results for st in STATISTICS for p in result.pairs[st]})
    where = {p: k for k, p in enumerate(pairs)}
    sel = (np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    cache: dict[int, Scores] = {}

    def scored(group: list[LabelledSentence]) -> Scores:
        if id(group) not in cache:
            cache[id(group)] = score_sentences(
                model, group, layer, opts.head, rotate=opts.rotate, prefix=opts.prefix, pairs=sel
            )
        return cache[id(group)]

    for result in results:
        for st in STATISTICS:
            result.tests[st], result.top_scores[st] = {}, {}
            for name, (pos, neg) in sets.held_out().items():
                sp, sn = scored(pos).get(st), scored(neg).get(st)
                result.tests[st][name] = [mann_whitney_test(sp[:, where[p]], sn[:, where[p]]) for p in result.pairs[st]]
                top = where[result.pairs[st][0]]
                result.top_scores[st][name] = (sp[:, top], sn[:, top])
        log(
            f"[synapses] {result.name}: held-out U/U_opt of the top synapse: "
            + ", ".join(f"{st} {result.tests[st][opts.language][0]['auc']:.3f}" for st in STATISTICS)
        )
