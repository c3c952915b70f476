"""The length-generalisation tasks (`induction`, `recall_gap`), their fixed test sets and the Wilson interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bdh.registry import get_task
from bdh.tasks.base import IGNORE_INDEX
from bdh.tasks.induction import Induction, InductionConfig, generate_induction
from bdh.tasks.lengths import answers, fixed_test_set, wilson_interval
from bdh.tasks.recall_gap import RecallGap, RecallGapConfig, generate_recall_gap


def _check_induction(x: np.ndarray, y: np.ndarray, V: int, k: int) -> None:
    """Every trigger twice, its answer right after the first, scored at the second (the last one at the end)."""
    plain = V - k
    for row_x, row_y in zip(x, y):
        assert row_x[-1] >= plain  # the last input is a trigger
        scored = np.flatnonzero(row_y != IGNORE_INDEX)
        assert len(scored) == k and scored[-1] == len(row_x) - 1
        for t in range(plain, V):
            at = np.flatnonzero(row_x == t)
            assert len(at) == 2, "every trigger occurs exactly twice"
            first, second = at
            assert second > first + 1 and row_x[first + 1] < plain
            assert row_y[second] == row_x[first + 1]  # the answer, scored where the trigger recurs
        assert (row_y[row_x < plain] == IGNORE_INDEX).all()


@pytest.mark.parametrize("k", [1, 3])
def test_induction_semantics(k):
    x, y = generate_induction(np.random.default_rng(k), 200, 24, vocab_size=16, triggers=k)
    assert x.shape == y.shape == (200, 24) and x.min() >= 0 and x.max() < 16
    _check_induction(x, y, 16, k)


def test_induction_one_trigger_is_the_papers_task():
    x, y = generate_induction(np.random.default_rng(0), 4000, 12)
    assert ((y != IGNORE_INDEX).sum(axis=1) == 1).all() and (y[:, -1] != IGNORE_INDEX).all()
    first = np.argmax(x == 15, axis=1)
    assert sorted(set(first.tolist())) == list(range(10))  # uniform place in [0, T-3]
    counts = np.bincount(first, minlength=10)
    assert counts.min() > 300  # expected 400 each; 300 is more than 5 standard deviations (about 19) below
    assert sorted(set(y[:, -1].tolist())) == list(range(15))  # answers: any non-trigger token


def test_induction_task_batches_are_pure_and_registered():
    assert get_task("induction") is Induction
    task = Induction(InductionConfig(seq_len=32, triggers=2))
    x, y = task.batch("train", 3, 8, seed=1)
    assert x.shape == y.shape == (8, 32) and x.dtype == y.dtype == torch.int64
    _check_induction(x.numpy(), y.numpy(), 16, 2)
    assert torch.equal(task.batch("train", 3, 8, seed=1)[0], x)
    assert not torch.equal(task.batch("train", 4, 8, seed=1)[0], x)
    assert not torch.equal(task.batch("train", 3, 8, seed=2)[0], x)
    assert not torch.equal(task.batch("val", 3, 8, seed=1)[0], x)
    assert task.num_batches("train", 8) is None and task.num_batches("val", 8) == 8
    right = F.one_hot(y.clamp(min=0), 16).float()
    assert task.metrics(right, y, x)["accuracy"] == 1.0
    wrong = F.one_hot((y.clamp(min=0) + 1) % 16, 16).float()
    assert task.metrics(wrong, y, x)["accuracy"] == 0.0


def test_induction_config_refuses_bad_values_in_one_line():
    with pytest.raises(ValueError, match="InductionConfig.triggers"):
        InductionConfig(triggers=15)
    with pytest.raises(ValueError, match="InductionConfig.triggers"):
        InductionConfig(seq_len=5, triggers=2)
    with pytest.raises(ValueError, match="InductionConfig.seq_len"):
        InductionConfig(seq_len=2)


def _check_recall(x: np.ndarray, y: np.ndarray, gaps, D: int) -> None:
    L = x.shape[1]
    for row_x, row_y, G in zip(x, y, np.broadcast_to(gaps, (len(x),))):
        start = L - 4 * D - G
        pairs = row_x[start : start + 2 * D]
        keys, values = pairs[0::2], pairs[1::2]
        facts = dict(zip(keys.tolist(), values.tolist()))
        assert len(facts) == D and len(set(values.tolist())) == D
        filler = np.ones(L, bool)
        filler[start : start + 2 * D] = False
        filler[L - 2 * D :] = False
        assert not np.isin(row_x[filler], pairs).any(), "a filler is never a key or a value of the example"
        questions = row_x[L - 2 * D :]
        assert sorted(questions[0::2].tolist()) == sorted(keys.tolist())
        assert [facts[q] for q in questions[0::2].tolist()] == questions[1::2].tolist()
        scored = np.flatnonzero(row_y != IGNORE_INDEX)
        assert scored.tolist() == list(range(L - 2 * D, L, 2))
        assert [facts[int(row_x[i])] for i in scored] == row_y[scored].tolist()
        assert start + 2 * D + G + 2 * D == L  # prefix + pairs + gap + questions = the whole length


def test_recall_gap_semantics():
    gaps = np.arange(0, 41, 5)
    x, y = generate_recall_gap(np.random.default_rng(0), len(gaps), 56, gaps, vocab_size=24, num_kv_pairs=4)
    assert x.min() >= 0 and x.max() < 24
    _check_recall(x, y, gaps, 4)
    with pytest.raises(ValueError, match="no room"):
        generate_recall_gap(np.random.default_rng(0), 1, 56, 41, vocab_size=24, num_kv_pairs=4)


def test_recall_gap_task_trains_on_small_gaps_and_validates_on_a_fixed_one():
    assert get_task("recall_gap") is RecallGap
    task = RecallGap(RecallGapConfig(seq_len=64, vocab_size=32, num_kv_pairs=4, gap_max=6, val_gap=20))
    x, y = task.batch("train", 0, 64, seed=0)
    first_pair = np.array([np.flatnonzero(np.isin(r, r[-8::2]))[0] for r in x.numpy()])
    gaps = 64 - 16 - first_pair
    assert gaps.min() >= 0 and gaps.max() <= 6 and len(set(gaps.tolist())) > 1
    _check_recall(x.numpy(), y.numpy(), gaps, 4)
    xv, yv = task.batch("val", 0, 16, seed=0)
    _check_recall(xv.numpy(), yv.numpy(), 20, 4)
    assert torch.equal(task.batch("train", 0, 64, seed=0)[0], x)
    assert not torch.equal(task.batch("train", 1, 64, seed=0)[0], x)
    right = F.one_hot(y.clamp(min=0), 32).float()
    assert task.metrics(right, y, x)["accuracy"] == 1.0
    with pytest.raises(ValueError, match="RecallGapConfig.val_gap"):
        RecallGapConfig(seq_len=64, num_kv_pairs=4, val_gap=49)
    with pytest.raises(ValueError, match="RecallGapConfig.num_kv_pairs"):
        RecallGapConfig(seq_len=64, vocab_size=8, num_kv_pairs=4)


@pytest.mark.parametrize("task", [Induction(), RecallGap()], ids=["induction", "recall_gap"])
def test_fixed_test_sets_are_pure_functions_of_the_seed(task):
    x, y = fixed_test_set(task, 300, n=64, seed=3)
    assert x.shape == y.shape == (64, 300)
    assert torch.equal(fixed_test_set(task, 300, n=64, seed=3)[0], x)
    assert not torch.equal(fixed_test_set(task, 300, n=64, seed=4)[0], x)
    some_x, some_y = fixed_test_set(task, 300, n=64, seed=3, rows=[5, 2])
    assert torch.equal(some_x, x[[5, 2]]) and torch.equal(some_y, y[[5, 2]])  # rows made alone are the same rows
    assert not torch.equal(fixed_test_set(task, 301, n=64, seed=3)[0][:, :300], x)
    if isinstance(task, RecallGap):
        _check_recall(x.numpy(), y.numpy(), 300 - 32, 8)  # the test gap is the whole room
    else:
        _check_induction(x.numpy(), y.numpy(), 16, 1)
    with pytest.raises(ValueError, match="rows"):
        fixed_test_set(task, 300, n=4, rows=[4])


def test_answers_counts_the_scored_positions():
    y = torch.tensor([[IGNORE_INDEX, 2, IGNORE_INDEX, 1]])
    logits = F.one_hot(torch.tensor([[2, 2, 0, 3]]), 4).float()
    assert answers(logits, y) == (1, 2)


def test_wilson_interval():
    low, high = wilson_interval(0, 64)
    assert low == 0.0 and 0.04 < high < 0.06  # 1.96^2 / (64 + 1.96^2) = 0.0566
    assert wilson_interval(64, 64) == pytest.approx((1 - high, 1.0))  # symmetric
    low, high = wilson_interval(32, 64)
    assert low + high == pytest.approx(1.0) and high - low < 2 * 1.96 * math.sqrt(0.25 / 64)
    # a textbook value (Newcombe 1998, Table I: 81 of 263 -> 0.2553 to 0.3662)
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    for n in range(1, 2049):  # every interval holds its own proportion (512 of 512 once ended at 1 - 2e-16)
        for k in (0, 1, n - 1, n):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0
    with pytest.raises(ValueError, match="wilson_interval"):
        wilson_interval(5, 4)
