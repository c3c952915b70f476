"""The verdict column of ``bdh inspect``'s table (`bdh.analysis.verdicts`): each rule on values that hold the paper's
claim, hold it in part, and do not; missing values give ``-``, never a guess."""

from __future__ import annotations

import math

import pytest

from bdh.analysis import report, verdicts
from bdh.analysis.verdicts import HOLDS, NONE, NOT_SEEN, PARTLY


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (verdicts.about([0.04, 0.06], 0.05), HOLDS),  # about 5% in every layer (within a factor of two)
        (verdicts.about([0.08, 0.16], 0.05), PARTLY),
        (verdicts.about([0.3, 0.39], 0.05), NOT_SEEN),
        (verdicts.about([None, math.nan], 0.05), NONE),
        (verdicts.positive([0.15, 0.22]), HOLDS),
        (verdicts.positive([0.1, -0.1]), PARTLY),
        (verdicts.ratio_at([0.99, 1.79, 2.94, 1.57], 2, 1.6), HOLDS),  # docs/inspect.md's model A, layer 2
        (verdicts.ratio_at([0.99, 1.79, 1.2, 1.57], 2, 1.6), PARTLY),
        (verdicts.ratio_at([1.0, 1.0, 0.98], 2, 1.6), NOT_SEEN),
        (verdicts.ratio_at([1.2, 1.3], 2, 1.6), NONE),  # a model with no layer 2
        (verdicts.greater([5.1, 0.4]), HOLDS),
        (verdicts.greater([3, 7]), NOT_SEEN),
        (verdicts.greater([3, None]), NONE),
        (verdicts.above_control(4.2, 1.1), HOLDS),
        (verdicts.above_control(1.0, 1.1), NOT_SEEN),
        (verdicts.any_head([2]), HOLDS),
        (verdicts.any_head([]), NOT_SEEN),
        (verdicts.gaps([0.06, 0.01]), HOLDS),
        (verdicts.gaps([0.06, -0.01]), PARTLY),
        (verdicts.heavy(5.7, 0.9, "lognormal"), HOLDS),
        (verdicts.heavy(5.7, 0.9, "exponential"), PARTLY),
        (verdicts.heavy(3.03, 4.22, "undecided"), NOT_SEEN),  # the sigma graph against its control
        (verdicts.heavy(None, 0.9, "lognormal"), NONE),
    ],
)
def test_each_rule(verdict, expected):
    assert verdict == expected


def test_the_table_has_a_verdict_column():
    rep = {
        "sparsity": {
            "data": {
                "trained": {"x_nonzero": [0.3], "y_nonzero": [0.05], "y_surprisal_spearman": [0.2]},
                "control": {"x_nonzero": [0.5], "y_nonzero": [0.25], "y_surprisal_spearman": [0.0]},
            }
        }
    }
    rows = report.summary_rows(rep)
    assert [r[4] for r in rows] == [NOT_SEEN, HOLDS, HOLDS]
    text = report.format_table(rows)
    assert text.splitlines()[0].split()[-1] == "verdict" and text.splitlines()[2].endswith(NOT_SEEN)
    assert report.format_table([row[:4] for row in rows]).splitlines()[2].endswith(NONE)  # an older report.json
