"""Evaluation weights metrics per key; the trainer sizes a model's sequence length from the task."""

from __future__ import annotations

import pytest
import torch

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
    # a key present in every batch is weighted by scored tokens: (2 * 1.0 + 4 * 0.5) * 2 / (6 * 2)
    assert out["val_acc"] == pytest.approx((2 * 1.0 * 2 + 4 * 0.5 * 2) / 12)


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
        assert trainer.model_config.seq_len == trainer.task.seq_len == 32
    finally:
        trainer.close()
    with pytest.raises(TrainingError, match="model.seq_len: 16 is shorter"):
        Trainer(_mqar_gpt(tmp_path, "model.seq_len=16"))
