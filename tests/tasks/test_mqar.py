import time

import numpy as np
import pytest
import torch

from bdh.registry import get_task
from bdh.tasks.base import IGNORE_INDEX, Task
from bdh.tasks.common import rng
from bdh.tasks.mqar import MQAR, MQARConfig, _distinct, generate_mqar, mqar_metrics, power_law_probs


def small(**kw):
    base = dict(vocab_size=256, input_seq_len=64, num_kv_pairs=4, num_train_examples=500, num_val_examples=100)
    base.update(kw)
    return MQAR(MQARConfig(**base))


def test_layout_matches_zoology_semantics():
    V, N, D = 512, 64, 8
    x, y = generate_mqar(rng(0), 300, vocab_size=V, input_seq_len=N, num_kv_pairs=D, random_non_queries=False)
    assert x.shape == y.shape == (300, N)
    for row_x, row_y in zip(x, y):
        keys, vals = row_x[0 : 2 * D : 2], row_x[1 : 2 * D : 2]
        assert len(set(keys)) == D and len(set(vals)) == D
        assert keys.min() >= 1 and keys.max() < V // 2 and vals.min() >= V // 2 and vals.max() < V
        assert (row_y[: 2 * D] == IGNORE_INDEX).all()
        qpos = np.flatnonzero(row_y != IGNORE_INDEX)
        assert len(qpos) == D and (qpos % 2 == 0).all() and qpos.min() >= 2 * D
        # each query position holds a key, labelled with that key's value; each key queried once
        pairs = dict(zip(keys.tolist(), vals.tolist()))
        assert sorted(row_x[qpos].tolist()) == sorted(keys.tolist())
        assert all(pairs[k] == v for k, v in zip(row_x[qpos].tolist(), row_y[qpos].tolist()))
        rest = np.setdiff1d(np.arange(2 * D, N), qpos)
        assert (row_x[rest] == 0).all()


def test_random_fillers_leave_context_and_queries():
    x, y = generate_mqar(rng(1), 200, vocab_size=512, input_seq_len=64, num_kv_pairs=4, random_non_queries=True)
    q = y != IGNORE_INDEX
    filler = np.ones_like(q)
    filler[:, :8] = False
    filler &= ~q
    assert (x[filler] != 0).mean() > 0.95  # uniform over the vocabulary
    assert x[filler].max() > 256  # values range too, as in Zoology
    assert (x[:, :8] != 0).all()


def test_first_query_slot_follows_the_power_law():
    N, D, a = 64, 2, 0.5
    x, y = generate_mqar(
        rng(2), 40_000, vocab_size=512, input_seq_len=N, num_kv_pairs=D, power_a=a, random_non_queries=False
    )
    # the slot of key 0 is the first draw: exactly distributed as p
    key0 = x[:, 0]
    slot = np.array([np.flatnonzero(row[2 * D :] == k)[0] // 2 for row, k in zip(x, key0)])
    p = power_law_probs((N - 2 * D) // 2, a)
    freq = np.bincount(slot, minlength=len(p)) / len(slot)
    assert np.abs(freq - p).max() < 0.01
    assert freq[0] > 3 * freq[-1]


def test_distinct_is_uniform_in_all_regimes():
    for low, high, k in ((0, 10, 3), (5, 200, 10), (0, 50, 9)):
        d = _distinct(rng(3), 30_000, low, high, k)
        assert (np.sort(d, 1)[:, 1:] != np.sort(d, 1)[:, :-1]).all()
        assert d.min() >= low and d.max() < high
        counts = np.bincount(d[:, -1] - low, minlength=high - low)
        expected = len(d) / (high - low)
        assert np.abs(counts - expected).max() < 6 * np.sqrt(expected)


def test_batches_are_pure_and_splits_disjoint():
    task = small()
    a = task.batch("train", 3, 16, seed=7)
    task2 = small()
    b = task2.batch("train", 3, 16, seed=7)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    c = task.batch("train", 3, 16, seed=8)
    assert not torch.equal(a[0], c[0])
    assert a[0].dtype == torch.int64 and a[0].shape == (16, 64)
    train = {tuple(r) for i in range(task.num_batches("train", 50)) for r in task.batch("train", i, 50, 0)[0].tolist()}
    val = {tuple(r) for i in range(task.num_batches("val", 50)) for r in task.batch("val", i, 50, 0)[0].tolist()}
    assert len(train) == 500 and len(val) == 100 and not train & val
    # the training set is fixed: epoch 2 repeats epoch 1
    n = task.num_batches("train", 50)
    assert torch.equal(task.batch("train", 1, 50, 0)[0], task.batch("train", 1 + n, 50, 0)[0])


def test_slices_pad_and_report_per_slice():
    task = small(val_slices=[[32, 2], [64, 8]], num_val_examples=40)
    assert task.seq_len == 64 and task.vocab_size == 257
    assert task.num_batches("val", 16) == 6
    x, y = task.batch("val", 0, 16, 0)
    assert (x[:, 32:] == 256).all() and (y[:, 32:] == IGNORE_INDEX).all()
    x2, y2 = task.batch("val", 3, 16, 0)
    assert ((y2 != IGNORE_INDEX).sum(1) == 8).all()
    logits = torch.nn.functional.one_hot(y2.clamp(min=0), 257).float()
    m = task.metrics(logits, y2, x2)
    assert m == {"accuracy": 1.0, "accuracy_kv8_len64": 1.0}
    m0 = task.metrics(torch.nn.functional.one_hot(y.clamp(min=0), 257).float(), y, x)
    assert set(m0) == {"accuracy", "accuracy_kv2_len32"}
    with pytest.raises(ValueError, match="out of range"):
        task.batch("val", 6, 16, 0)


def test_metric_averages_per_example():
    targets = torch.full((2, 6), IGNORE_INDEX)
    targets[0, [1, 3]] = torch.tensor([5, 6])  # example 0: 2 queries, 1 right
    targets[1, [1, 2, 3, 4]] = torch.tensor([5, 5, 5, 5])  # example 1: 4 queries, all right
    preds = torch.tensor([[0, 5, 0, 0, 0, 0], [0, 5, 5, 5, 5, 0]])
    logits = torch.nn.functional.one_hot(preds, 8).float()
    m = mqar_metrics(logits, targets, torch.zeros(2, 6, dtype=torch.long))
    assert m["accuracy"] == pytest.approx(0.75)  # mean of 0.5 and 1.0, not pooled 5/6
    assert m["accuracy_kv2_len6"] == pytest.approx(0.5) and m["accuracy_kv4_len6"] == 1.0


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(input_seq_len=63), "even"),
        (dict(vocab_size=64), "larger than input_seq_len"),
        (dict(num_kv_pairs=17), "no room"),
        (dict(power_a=0), "power_a"),
        (dict(random_non_queries=1), "random_non_queries"),
        (dict(val_slices=[[64]]), "val_slices"),
        (dict(train_slices=[[66, 20]]), "train_slices"),
    ],
)
def test_bad_config_is_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg) as err:
        MQARConfig(**kw)
    assert "\n" not in str(err.value)


def test_config_round_trip_and_registry():
    cfg = MQARConfig(val_slices=[[64, 4], [128, 8]])
    assert MQARConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown field 'kv'"):
        MQARConfig.from_dict({"kv": 3})
    cls = get_task("mqar")
    assert cls is MQAR and cls.config_class is MQARConfig
    assert isinstance(MQAR(), Task)


def test_hundred_thousand_examples_in_seconds():
    t0 = time.perf_counter()
    x, _ = generate_mqar(rng(0), 100_000, vocab_size=8192, input_seq_len=64, num_kv_pairs=4)
    assert x.shape == (100_000, 64)
    assert time.perf_counter() - t0 < 15


def test_data_seed_overrides_the_run_seed():
    task = small(data_seed=5)
    assert torch.equal(task.batch("train", 2, 8, 0)[0], task.batch("train", 2, 8, 9)[0])
    assert torch.equal(task.batch("val", 0, 8, 0)[0], small().batch("val", 0, 8, 5)[0])
    with pytest.raises(ValueError, match="MQARConfig.data_seed"):
        MQARConfig(data_seed="x")
