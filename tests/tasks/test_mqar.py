import time

import numpy as np
import pytest
import torch

from bdh.registry import get_task
from bdh.tasks.base import IGNORE_INDEX, Task
from bdh.tasks.common import rng
from bdh.tasks.mqar import MQAR, MQARConfig, _distinct, generate_mqar, mqar_metrics, power_law_probs, predictions


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


def _slice_rows(task, seed):
    """Every example of each training slice, as a row tuple -> (slice, example) map."""
    out = {}
    for s, n in enumerate(task.config.sizes("train")):
        x, _ = task.examples("train", s, 0, n, seed)
        for i, row in enumerate(x.tolist()):
            out[tuple(row)] = (s, i)
    return out


def test_training_batches_stay_in_one_slice_and_cover_each_slice_per_epoch():
    task = small(
        train_slices=[[32, 2], [64, 8], [64, 4]], num_train_examples=[100, 40, 40], val_slices=[[64, 4]], data_seed=3
    )
    assert task.train_seq_len == 64 and task.padded  # the train split mixes lengths
    bs = 16
    n = task.num_batches("train", bs)
    assert n == 100 // bs + 40 // bs + 40 // bs == 10
    where = _slice_rows(task, 3)
    seen = {0: [], 1: [], 2: []}
    order = []
    for i in range(n):
        x, y = task.batch("train", i, bs, seed=0)
        assert x.shape == (bs, 64)
        slices = {where[tuple(r)][0] for r in x.tolist()}
        assert len(slices) == 1  # never across a slice boundary
        s = slices.pop()
        order.append(s)
        seen[s] += [where[tuple(r)][1] for r in x.tolist()]
        # consecutive examples of the slice, in order
        assert seen[s][-bs:] == list(range(seen[s][-bs], seen[s][-bs] + bs))
    # each example once per epoch, up to the last partial batch of each slice
    assert sorted(seen[0]) == list(range(96)) and sorted(seen[1]) == list(range(32)) == sorted(seen[2])
    # proportional interleave: here every prefix holds each slice within one batch of its share
    for k in range(1, n + 1):
        for s, share in enumerate((6 / 10, 2 / 10, 2 / 10)):
            assert abs(order[:k].count(s) - k * share) <= 1 + 1e-9
    # the next epoch has the same slice order; each slice's stream continues where it stopped
    again = [where[tuple(task.batch("train", n + i, bs, seed=0)[0][0].tolist())] for i in range(n)]
    assert [s for s, _ in again] == order
    assert again[order.index(0)] == (0, 96)  # slice 0's 97th example starts its second epoch
    # a pure function of (index, batch_size, seed): a fresh task gives the same batch
    fresh = small(
        train_slices=[[32, 2], [64, 8], [64, 4]], num_train_examples=[100, 40, 40], val_slices=[[64, 4]], data_seed=3
    )
    assert all(torch.equal(a, b) for a, b in zip(fresh.batch("train", 7, bs, 0), task.batch("train", 7, bs, 0)))


def test_the_slice_order_depends_on_the_seed_and_every_slice_comes_early():
    task = small(train_slices=[[64, 4]] * 4, num_train_examples=[1000, 200, 200, 200])
    orders = []
    for seed in range(4):
        order = task.train_order(10, seed)[0]
        assert len(order) == task.num_batches("train", 10) == 160
        assert set(order[:12].tolist()) == {0, 1, 2, 3}  # a short run sees every slice
        orders.append(tuple(order.tolist()))
    assert len(set(orders)) > 1


def test_one_slice_walks_its_examples_as_an_endless_stream():
    task = small(num_train_examples=500)
    x_all, _ = task.examples("train", 0, 0, 500, 0)
    assert task.num_batches("train", 64) == 7
    x, _ = task.batch("train", 7, 64, 0)  # first batch of epoch 2: the 52 left over, then the start
    assert np.array_equal(x.numpy(), np.concatenate([x_all[448:], x_all[:12]]))
    x, _ = task.batch("train", 3, 64, 0)
    assert np.array_equal(x.numpy(), x_all[192:256])


def test_training_is_not_padded_to_a_longer_validation_length():
    task = small(vocab_size=256, val_slices=[[64, 4], [128, 16]])
    assert (task.train_seq_len, task.val_seq_len, task.seq_len) == (64, 128, 128)
    assert task.vocab_size == 257  # validation mixes lengths: PAD
    assert task.batch("train", 0, 8, 0)[0].shape == (8, 64)
    assert task.batch("val", 0, 8, 0)[0].shape == (8, 128)
    task = small(vocab_size=256, val_slices=[[128, 8]])
    assert task.vocab_size == 256 and not task.padded  # neither split mixes lengths: no PAD at all
    assert task.batch("train", 0, 8, 0)[0].shape == (8, 64) and task.batch("val", 0, 8, 0)[0].shape == (8, 128)


def test_train_sizes_per_slice():
    cfg = MQARConfig(train_slices=[[64, 4], [128, 8]], num_train_examples=[300, 100])
    assert cfg.sizes("train") == (300, 100) and cfg.sizes("val") == (3000,)  # one default val slice
    assert MQARConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.to_dict()["num_train_examples"] == [300, 100]
    assert MQARConfig(train_slices=[[64, 4], [128, 8]], num_train_examples=7).sizes("train") == (7, 7)
    task = MQAR(MQARConfig(vocab_size=256, train_slices=[[64, 4], [128, 8]], num_train_examples=[300, 100]))
    assert task.num_batches("train", 32) == 9 + 3


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(num_train_examples=[100, 20]), "has 2 counts for 1 train slice"),
        (dict(train_slices=[[64, 4], [64, 8]], num_train_examples=[100]), "has 1 counts for 2 train slice"),
        (dict(train_slices=[[64, 4], [64, 8]], num_train_examples=[100, 0]), "every count must be an integer >= 1"),
        (dict(train_slices=[[64, 4], [64, 8]], num_train_examples=[100, True]), "every count"),
        (dict(num_train_examples=[]), "has 0 counts"),
        (dict(num_train_examples=0), "must be an integer >= 1 or a list"),
        (dict(num_train_examples="many"), "must be an integer >= 1 or a list"),
    ],
)
def test_bad_train_sizes_are_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg) as err:
        MQARConfig(**kw)
    assert "\n" not in str(err.value) and str(err.value).startswith("MQARConfig.num_train_examples: ")


def test_bad_train_sizes_from_a_run_config_name_the_key():
    with pytest.raises(ValueError, match="num_train_examples") as err:
        MQARConfig.from_dict({"num_train_examples": ["a"]}, prefix="task")
    assert "\n" not in str(err.value)


def test_pad_never_wins_the_argmax():
    V = 16  # PAD = 16, vocabulary 17
    targets = torch.full((2, 4), IGNORE_INDEX)
    targets[:, 2] = torch.tensor([9, 12])
    inputs = torch.tensor([[1, 9, 1, V], [3, 12, 3, 0]])
    logits = torch.zeros(2, 4, V + 1)
    logits[0, 2, 9] = logits[1, 2, 12] = 1.0  # the right value is the best real token ...
    logits[..., V] = 5.0  # ... but PAD is largest everywhere
    assert mqar_metrics(logits, targets, inputs, pad_id=None)["accuracy"] == 0.0  # plain argmax: PAD
    m = mqar_metrics(logits, targets, inputs, pad_id=V)
    assert m["accuracy"] == 1.0 and m["accuracy_kv1_len3"] == 1.0 and m["accuracy_kv1_len4"] == 1.0
    assert (predictions(logits, V) != V).all()
    # a model vocabulary wider than the task's: the columns after PAD still count (and lose here)
    wide = torch.cat([logits, torch.full((2, 4, 2), 3.0)], dim=-1)
    assert (predictions(wide, V) == V + 1).all()
    wide[..., V + 1 :] = -1.0
    assert predictions(wide, V)[:, 2].tolist() == [9, 12]
    # ties go to the lowest id, as argmax
    tie = torch.zeros(1, 1, V + 3)
    assert predictions(tie, V).item() == 0


def test_the_task_leaves_pad_out_of_its_metric():
    task = small(val_slices=[[32, 2], [64, 8]], num_val_examples=16)
    x, y = task.batch("val", 0, 16, 0)  # the 32-token slice, padded to 64
    logits = torch.nn.functional.one_hot(y.clamp(min=0), task.vocab_size).float()
    logits[..., task.pad_id] = 2.0
    assert task.metrics(logits, y, x)["accuracy"] == 1.0


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
