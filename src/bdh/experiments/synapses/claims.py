"""The paper's claims about monosemantic synapses (section 6.3, Figs. 12-13) checked against the numbers of
an analysis, by fixed criteria: `verdicts`."""

from __future__ import annotations

from typing import Any

from .options import PAPER, SynapseOptions
from .sentences import other_concept
from .stats import fmt_p
from .validation import ModelResult

#: a verdict: the claim, whether it held here, the numbers behind it
Verdict = tuple[str, bool, str]


def _separation(trained: ModelResult, opts: SynapseOptions) -> list[Verdict]:
    """Held-out separation in the search language, in the second language, and against the other concept."""
    st, l1, l2 = opts.statistic, opts.language, opts.second_language
    t1, t2 = trained.tests[st][l1][0], trained.tests[st][l2][0]
    to = trained.tests[st][f"{l1} vs other concept"][0]
    paper_auc = PAPER["U"] / PAPER["U_opt"]
    return [
        (
            f"a synapse found on the search set separates held-out {opts.concept} sentences from contrast sentences "
            f"about as well as the paper's (U/U_opt >= 0.9; paper {paper_auc:.3f}, p < 1e-14)",
            t1["auc"] >= 0.9 and t1["p"] < 1e-6,
            f"U = {t1['U']:.0f} of {t1['U_opt']:.0f}, U/U_opt = {t1['auc']:.3f}, "
            f"p = {fmt_p(t1['p'])}, r = {t1['r']:.3f}",
        ),
        (
            f"the same synapse separates the concept in {l2} (other surface forms; U/U_opt >= 0.8, p < 0.01)",
            t2["auc"] >= 0.8 and t2["p"] < 0.01,
            f"U/U_opt = {t2['auc']:.3f}, p = {fmt_p(t2['p'])}",
        ),
        (
            f"it is specific to the concept: {opts.concept} sentences above {other_concept(opts.concept)} sentences "
            "(U/U_opt >= 0.8)",
            to["auc"] >= 0.8,
            f"U/U_opt = {to['auc']:.3f}, p = {fmt_p(to['p'])}",
        ),
    ]


def _shares(s1: dict[str, Any], neighbour: str) -> tuple[float, float, str]:
    """Share of the increment and of the bytes on the concept words and ``neighbour``, and the evidence."""
    inc, byte = s1["increment_share"], s1["byte_share"]
    evidence = (
        f"{100 * inc['concept words']:.0f}% of the increment on the concept words and "
        f"{100 * inc[neighbour]:.0f}% on the {neighbour} them, which hold "
        f"{100 * byte['concept words']:.0f}% and {100 * byte[neighbour]:.0f}% of the bytes"
    )
    return inc["concept words"] + inc[neighbour], byte["concept words"] + byte[neighbour], evidence


def _growth(steps: dict[str, dict[str, Any]], opts: SynapseOptions) -> list[Verdict]:
    """Sparse, step-like updates, and where the steps come (on and around the concept words)."""
    s1 = steps[opts.language]
    near, near_bytes, near_evidence = _shares(s1, "word before")
    after, after_bytes, after_evidence = _shares(s1, "word after")
    return [
        (
            "updates are sparse and step-like: fewer than 10% of the bytes of concept sentences "
            "step above the threshold",
            s1["bytes_above_threshold"] < 0.1,
            f"{100 * s1['bytes_above_threshold']:.1f}% of bytes above {opts.star_fraction:g} of the largest step",
        ),
        (
            "the steps come at the concept: the concept words and the word before them (up to the byte read just "
            "before the name) get at least twice their share of the bytes in increment",
            near >= 2 * near_bytes,
            near_evidence,
        ),
        (
            "the steps come on or right after the concept words (the paper: the synapse 'changes abruptly after words "
            "that are related to each concept'), not before them: at least twice their byte share",
            after >= 2 * after_bytes,
            after_evidence,
        ),
    ]


def _controls(
    trained: ModelResult, null: ModelResult, shuffled: ModelResult, opts: SynapseOptions, lengths: dict[str, float]
) -> list[Verdict]:
    """The trained model against the nulls and against the sentence length alone."""
    st, l1 = opts.statistic, opts.language
    t1 = trained.tests[st][l1][0]
    u_auc, s_auc = null.tests[st][l1][0]["auc"], shuffled.tests[st][l1][0]["auc"]
    return [
        (
            "the nulls (untrained model, shuffled search labels) are clearly weaker on held-out data "
            "(by >= 0.1 U/U_opt)",
            t1["auc"] - max(u_auc, s_auc) >= 0.1,
            f"trained {t1['auc']:.3f}; untrained {u_auc:.3f}; shuffled labels {s_auc:.3f}",
        ),
        (
            "the synapse is more than a sentence-length detector (held-out U/U_opt above the length's own)",
            t1["auc"] > lengths[l1],
            f"synapse {t1['auc']:.3f}, sentence length alone {lengths[l1]:.3f}",
        ),
    ]


def verdicts(
    trained: ModelResult,
    null: ModelResult,
    shuffled: ModelResult,
    opts: SynapseOptions,
    steps: dict[str, dict[str, float]],
    lengths: dict[str, float],
) -> list[Verdict]:
    """The paper's claims checked against the numbers: (claim, held, evidence)."""
    return _separation(trained, opts) + _growth(steps, opts) + _controls(trained, null, shuffled, opts, lengths)
