"""Evaluation weights metrics per example and per key; the trainer sizes a model's sequence length from the task
and counts tokens at the task's training length."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bdh.bench.results import evaluate_examples
from bdh.tasks.mqar import MQAR, MQARConfig
from bdh.train import TrainingError, load_config
from bdh.train.trainer import Trainer, evaluate


class _Sliced:
    """A task whose batches belong to two slices; each batch reports its own slice's metric."""

    name, vocab_size, seq_len, causal, target_metric = "sliced", 4, 3, True, ("acc", True)

    def batch(self, split, index, batch_size, seed):
        inputs = torch.zeros(batch_size, 3, dtype=torch.long)
        targets = torch.full((batch_size, 3), -100, dtype=torch.long)
        targets[:, : 1 + index % 2] = 0  # slice a scores 1 token per row, slice b scores 2
        return inputs, targets

    def num_batches(self, split, batch_size):
        return 4

    def metrics(self, logits, targets, inputs):
        return {"acc": 1.0, "slice_a": 0.25} if int((targets[0] != -100).sum()) == 1 else {"acc": 0.5, "slice_b": 0.75}


class _Constant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))

    def forward(self, idx):
        return self.w.expand(*idx.shape, 4)


def test_per_slice_metrics_are_not_diluted_by_other_slices():
    out = evaluate(_Constant(), _Sliced(), batch_size=2, batches=None, seed=0)
    assert out["val_slice_a"] == pytest.approx(0.25) and out["val_slice_b"] == pytest.approx(0.75)
    # a key present in every batch is weighted by the batch's examples (2 rows each), not by its scored
    # tokens (2 in slice a, 4 in slice b), which would give (2 * 1.0 + 4 * 0.5) * 2 / 12 = 2/3
    assert out["val_acc"] == pytest.approx((2 * 1.0 + 2 * 0.5) * 2 / 8)


class _SlicedPerToken(_Sliced):
    """The same task, declaring ``acc`` a mean over scored tokens."""

    per_token_metrics = frozenset({"acc"})


def test_a_per_token_metric_is_weighted_by_scored_tokens():
    out = evaluate(_Constant(), _SlicedPerToken(), batch_size=2, batches=None, seed=0)
    assert out["val_acc"] == pytest.approx((2 * 1.0 + 4 * 0.5) * 2 / 12)
    assert out["val_slice_a"] == pytest.approx(0.25) and out["val_slice_b"] == pytest.approx(0.75)


class _RecallOnLength(torch.nn.Module):
    """Solves MQAR exactly on the examples of one unpadded length (each position predicts the token after the
    first earlier occurrence of its own token) and answers with zero logits on the others."""

    def __init__(self, vocab: int, pad: int, length: int):
        super().__init__()
        self.vocab, self.pad, self.length = vocab, pad, length
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        hit = (idx[:, :, None] == idx[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril(-1)
        first = hit.int().argmax(dim=2)  # the first earlier position holding the same token
        after = torch.gather(idx, 1, (first + 1).clamp(max=T - 1))
        on = hit.any(dim=2) & ((idx != self.pad).sum(dim=1, keepdim=True) == self.length)
        logits = torch.zeros(B, T, self.vocab)
        logits.scatter_(2, after[..., None], on[..., None].float())
        return logits + self.dummy


def _two_slice_mqar() -> MQAR:
    return MQAR(
        MQARConfig(
            vocab_size=256,
            input_seq_len=64,
            num_kv_pairs=4,
            val_slices=[[64, 4], [128, 16]],
            num_val_examples=20,
            num_train_examples=64,
            random_non_queries=False,
        )
    )


def test_mqar_accuracy_is_the_mean_over_examples_of_mixed_slices():
    """Right only on the D = 4 slice of (64, 4) + (128, 16): Zoology's per-example mean is 1/2, where
    weighting batches by scored tokens gives 4 / (4 + 16) = 0.2."""
    task = _two_slice_mqar()
    model = _RecallOnLength(task.vocab_size, task.pad_id, 64)
    out = evaluate(model, task, batch_size=8, batches=None, seed=0)
    assert out["val_accuracy_kv4_len64"] == pytest.approx(1.0)
    assert out["val_accuracy_kv16_len128"] == pytest.approx(0.0)
    assert out["val_accuracy"] == pytest.approx(0.5)
    # the loss stays per scored token: the mean over every labelled position of the split
    n = task.num_batches("val", 8)
    x = torch.cat([task.batch("val", i, 8, 0)[0] for i in range(n)])
    y = torch.cat([task.batch("val", i, 8, 0)[1] for i in range(n)])
    with torch.no_grad():
        logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
    assert out["val_loss"] == pytest.approx(float(loss), rel=1e-5)
    # the bench's evaluation is the same code, without the val_ prefix
    got = evaluate_examples(model, task, batch_size=8, batches=None, seed=0)
    want = {k.removeprefix("val_"): v for k, v in out.items() if k not in ("val_loss", "val_bpb", "val_bpb_se")}
    assert got == pytest.approx({**want, "val_loss": out["val_loss"]})


def _mqar_gpt(tmp_path, *extra):
    return load_config(
        None,
        [
            "model.name=gpt",
            "model.n_layer=1",
            "model.n_embd=16",
            "model.n_head=2",
            "task.name=mqar",
            "task.vocab_size=64",
            "task.input_seq_len=32",
            "task.num_kv_pairs=2",
            "task.num_train_examples=64",
            "task.num_val_examples=16",
            "train.batch_size=4",
            "train.max_steps=1",
            "train.max_minutes=null",
            "eval.batches=1",
            "log.progress=none",
            "log.tensorboard=false",
            "sample.max_new_tokens=0",
            f"run_dir={tmp_path / 'run'}",
            *extra,
        ],
    )


def test_sequence_length_comes_from_the_task(tmp_path):
    trainer = Trainer(_mqar_gpt(tmp_path))
    try:
        assert trainer.config.model.config.seq_len == trainer.task.seq_len == 32
    finally:
        trainer.close()
    with pytest.raises(TrainingError, match="model.seq_len: 16 is shorter"):
        Trainer(_mqar_gpt(tmp_path, "model.seq_len=16"))


def test_training_batches_keep_their_length_under_longer_validation(tmp_path):
    """MQAR trains on 32-token examples and validates on 64: the model is sized to 64, training batches are not
    padded and the trainer counts the tokens it trains on."""
    config = _mqar_gpt(
        tmp_path, "task.vocab_size=128", "task.val_slices=[[32,2],[64,4]]", "train.max_steps=2", "eval.batches=null"
    )
    trainer = Trainer(config)
    try:
        assert trainer.config.model.config.seq_len == 64 and trainer.task.train_seq_len == 32
        assert trainer.task.batch("train", 0, 4, 0)[0].shape == (4, 32)
        result = trainer.fit()
    finally:
        trainer.close()
    assert result.tokens == 2 * 4 * 32
    assert {"val_accuracy_kv2_len32", "val_accuracy_kv4_len64"} <= set(result.metrics)


class _Rows:
    """A task of 3 batches of 4 rows whose scored tokens per row vary (1 to 3 of 3)."""

    name, vocab_size, seq_len, causal, target_metric = "rows", 5, 3, True, ("loss", False)

    def batch(self, split, index, batch_size, seed):
        g = torch.Generator().manual_seed(index)
        inputs = torch.randint(0, 5, (batch_size, 3), generator=g)
        targets = torch.randint(0, 5, (batch_size, 3), generator=g)
        for r in range(batch_size):
            targets[r, 1 + (r + index) % 3 :] = -100
        return inputs, targets

    def num_batches(self, split, batch_size):
        return 3

    def metrics(self, logits, targets, inputs):
        return {}


def test_the_standard_error_is_that_of_the_per_token_mean_over_rows():
    """``val_bpb_se`` against the textbook formula computed here from each row's own loss: the estimate is the
    ratio sum(l_i) / sum(c_i) over rows i, whose delta-method standard error is
    sqrt(n / (n - 1) * sum((l_i - m c_i)^2)) / sum(c_i); with equal counts, the standard error of the mean of
    the rows' per-token losses (sd / sqrt(n))."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 5))
    task = _Rows()
    out = evaluate(model, task, batch_size=4, batches=None, seed=0)
    rows_l, rows_c = [], []
    for i in range(3):
        x, y = task.batch("val", i, 4, 0)
        with torch.no_grad():
            nll = F.cross_entropy(model(x).reshape(-1, 5), y.reshape(-1), reduction="none", ignore_index=-100)
        nll = nll.view(4, 3)
        for r in range(4):
            keep = y[r] != -100
            rows_l.append(float(nll[r][keep].sum()))
            rows_c.append(int(keep.sum()))
    n, m = len(rows_l), sum(rows_l) / sum(rows_c)
    se = (n / (n - 1) * sum((a - m * c) ** 2 for a, c in zip(rows_l, rows_c, strict=True))) ** 0.5 / sum(rows_c)
    # float32 logits summed in a different order from the formula's float64: 1e-5 relative is far above that
    assert out["val_loss"] == pytest.approx(m, rel=1e-5)
    assert out["val_bpb_se"] == pytest.approx(se / 0.6931471805599453, rel=1e-5)
    # equal counts: the plain standard error of the rows' mean
    same = [a / c for a, c in zip(rows_l, rows_c, strict=True) if c == 3]
    assert len(same) == 4
    mean = sum(same) / 4
    sd = (sum((v - mean) ** 2 for v in same) / 3) ** 0.5
    one = _se_of_rows(model, task, keep_count=3)
    assert one == pytest.approx(sd / 2, rel=1e-5)


def _se_of_rows(model, task, keep_count):
    """The loss's standard error over only the rows with ``keep_count`` scored tokens (the others masked)."""
    from bdh.train.evaluate import _Scores

    scores = _Scores(task)
    for i in range(3):
        x, y = task.batch("val", i, 4, 0)
        y = y.clone()
        y[(y != -100).sum(1) != keep_count] = -100
        with torch.no_grad():
            scores.add(model(x), y, x)
    return scores.loss_se()
