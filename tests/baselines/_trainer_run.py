"""A short MQAR run of a registered model through the public trainer (`bdh.train.train` with a run config)."""

from __future__ import annotations

import json
from pathlib import Path

from bdh.train import load_config, train

#: a tiny MQAR run: every field but the model's
RUN = [
    "task.name=mqar",
    "task.vocab_size=64",
    "task.input_seq_len=32",
    "task.num_kv_pairs=4",
    "task.num_train_examples=256",
    "task.num_val_examples=32",
    "train.batch_size=16",
    "train.threads=1",
    "train.max_minutes=null",
    "optim.lr=3e-3",
    "optim.warmup_steps=5",
    "eval.batches=1",
    "eval.every=0",
    "log.progress=none",
    "log.tensorboard=false",
    "sample.max_new_tokens=0",
]


def trainer_losses(run_dir: Path, steps: int, *model: str) -> list[float]:
    """The training losses of a ``steps``-step run of the model section ``model`` (``--set`` items)."""
    train(load_config(None, [*RUN, *model, f"train.max_steps={steps}", f"run_dir={run_dir}"]))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "train"]


def learned(losses: list[float], k: int = 5) -> bool:
    """The mean of the last k losses is 0.3 nats below the first k's: at the start the loss is about ln 64 = 4.16
    (uniform over the vocabulary), and putting the mass on the 32 value tokens alone takes it to ln 32 = 3.47,
    so a drop of 0.3 needs learning and needs no recall."""
    return sum(losses[-k:]) / k < sum(losses[:k]) / k - 0.3
