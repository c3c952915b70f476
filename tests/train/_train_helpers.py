"""Helpers of the training-engine tests: a tiny model, subprocess runs, losses from metrics.jsonl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TINY = [
    "model.n_layer=2",
    "model.n_embd=32",
    "model.n_head=2",
    "model.n_neurons=256",
    "model.dropout=0.0",
    "task.seq_len=32",
    "train.batch_size=4",
    "train.threads=1",
    "optim.warmup_steps=5",
    "eval.batches=2",
    "log.progress=none",
    "sample.max_new_tokens=0",
    "log.tensorboard=false",
    "train.max_minutes=null",
]


def tiny(data: Path, run_dir: Path, *extra: str) -> list[str]:
    """``--set`` overrides of a tiny run on ``data`` written to ``run_dir``."""
    return [*TINY, f"task.data={data}", f"run_dir={run_dir}", *extra]


def set_args(overrides: list[str]) -> list[str]:
    out: list[str] = []
    for item in overrides:
        out += ["--set", item]
    return out


def bdh_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bdh", *args]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_bdh(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(bdh_cmd(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env())


def train_losses(run_dir: Path) -> dict[int, float]:
    """step -> training loss from a run's metrics.jsonl."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "train":
            out[record["step"]] = record["loss"]
    return out
