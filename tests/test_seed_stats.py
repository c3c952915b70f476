"""The one rule for "better beyond the seed spread" (`bdh.seed_stats.beyond_seeds`), and every verdict built on it."""

import math

import pytest

from bdh import seed_stats
from bdh.bench.results import pick_winner
from bdh.experiments import scaling

# the example: the difference of the means (0.275) is within the larger range (0.35), the ranges do not meet
A, B = [1.0, 1.1], [1.15, 1.5]


def test_non_overlapping_ranges_are_beyond_the_seeds_whatever_the_larger_range():
    assert seed_stats.beyond_seeds(A, B, higher_is_better=False)  # A's worst loss 1.1 beats B's best 1.15
    assert not seed_stats.beyond_seeds(B, A, higher_is_better=False)
    assert seed_stats.beyond_seeds(B, A, higher_is_better=True)  # as accuracies B wins
    assert not seed_stats.beyond_seeds(A, B, higher_is_better=True)


def test_touching_overlapping_single_seeded_or_missing_is_not_beyond():
    assert not seed_stats.beyond_seeds([1.0, 1.15], B, higher_is_better=False)  # touching: 1.15 is not below 1.15
    assert not seed_stats.beyond_seeds([1.0, 1.2], B, higher_is_better=False)  # overlapping
    assert not seed_stats.beyond_seeds([1.0], [2.0, 2.1], higher_is_better=False)  # one seed: no spread
    assert not seed_stats.beyond_seeds([1.0, math.nan], B, higher_is_better=False)  # a diverged seed is the worst
    assert not seed_stats.beyond_seeds([1.0, ""], B, higher_is_better=False)  # so is a missing one
    assert seed_stats.beyond_seeds(A, [math.inf, 2.0], higher_is_better=False)


def test_every_verdict_reads_the_example_alike():
    assert scaling.compare(A, B).verdict == scaling.BDH_BETTER
    assert scaling.compare(B, A).verdict == scaling.GPT_BETTER
    assert scaling.decide(A, B)[0] == "first"
    assert pick_winner({"a": A, "b": B}, higher_is_better=False) == ("a", "beyond the spread")
    assert pick_winner({"a": A, "b": B}, higher_is_better=True) == ("b", "beyond the spread")


def test_a_diverged_seed_is_judged_alike_by_the_bench_and_the_scaling_verdict():
    """One policy: a diverged seed is its model's worst score. [1.0, nan] against [1.2, 1.3] (losses): the first's
    good seed beats the other's best, so neither is better beyond the spread; beyond it only when the other's
    every seed beats the first's finite one."""
    diverged, steady = [1.0, math.nan], [1.2, 1.3]
    assert pick_winner({"a": diverged, "b": steady}, higher_is_better=False) == (None, "within the spread")
    assert scaling.compare(diverged, steady).verdict == scaling.TIE
    assert scaling.decide(steady, diverged)[0] == "tie"
    assert pick_winner({"a": [1.4, math.nan], "b": steady}, higher_is_better=False) == ("b", "beyond the spread")
    assert scaling.compare([1.4, math.nan], steady).verdict == scaling.GPT_BETTER


def test_means_leave_out_nothing_or_the_diverged_seeds():
    assert seed_stats.mean([1.0, 2.0]) == pytest.approx(1.5)
    assert math.isnan(seed_stats.mean([])) and math.isnan(seed_stats.mean([1.0, math.nan]))
    assert seed_stats.finite_mean([1.0, math.nan, 2.0, math.inf]) == pytest.approx(1.5)
    assert math.isnan(seed_stats.finite_mean([math.nan]))
