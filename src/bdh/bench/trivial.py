"""The trivial reference row: each position's most frequent training target given its input token (`TokenPrior`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch

from .results import evaluate_examples
from .spec import TRIVIAL, BenchError, RunSpec, SuiteDef


class TokenPrior(torch.nn.Module):
    """The trivial answer as a model: ``log_probs[t]``, the targets' log distribution given input ``t``."""

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Embedding.from_pretrained(log_probs, freeze=True)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table(idx)

    def predictions(self) -> torch.Tensor:
        """(V,) the target predicted for each input token (the argmax of its row; ties: the smallest id)."""
        return self.table.weight.argmax(dim=-1)

    def state_size(self) -> int:
        return 0


def fit_token_prior(task: Any, train_size: int, seed: int, chunk: int = 1024) -> TokenPrior:
    """The `TokenPrior` of the first ``train_size`` training examples: add-one smoothed counts per input token."""
    import numpy as np

    from bdh.tasks.base import IGNORE_INDEX

    if train_size < 1:
        raise BenchError(f"trivial answer: the task {task.name!r} has no training example")
    V = int(task.vocab_size)
    codes = []
    for i in range(-(-train_size // chunk)):
        x, y = task.batch("train", i, chunk, seed)
        keep = min(chunk, train_size - i * chunk)
        x, y = x[:keep], y[:keep]
        scored = y != IGNORE_INDEX
        codes.append((x[scored].long() * V + y[scored].long()).numpy())
    pairs, counts = np.unique(np.concatenate(codes), return_counts=True)
    table = torch.zeros(V * V)  # float32 counts are exact below 2**24, far above any task's counts here
    table[torch.from_numpy(pairs)] = torch.from_numpy(counts).float()
    table = table.view(V, V).add_(1.0)
    return TokenPrior(table.div_(table.sum(dim=1, keepdim=True)).log_())


def trivial_rows(suite: SuiteDef, specs: Sequence[RunSpec], device: str = "cpu") -> list[dict[str, Any]]:
    """The reference rows of ``suite.trivial``, one per (setting, width, seed), scored once per task on ``device``."""
    if suite.trivial is None:
        return []
    from bdh.devices import resolve_device
    from bdh.train.config import build_section_config

    dev = resolve_device(device)
    tasks: dict[str, Any] = {}
    scores: dict[tuple[Any, ...], dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    for spec in specs:
        if (spec.setting, spec.width, spec.seed) in seen:
            continue
        seen.add((spec.setting, spec.width, spec.seed))
        text = json.dumps(spec.task_section, sort_keys=True)
        if text not in tasks:
            cls, config = build_section_config("task", spec.task_section)
            tasks[text] = cls(config)
        task = tasks[text]
        key = (text, task.config.data_seed_for(spec.seed), spec.eval_batch_size, spec.eval_batches)
        if key not in scores:
            fit = suite.trivial.fit or fit_token_prior
            model = fit(task, suite.trivial.train_size(task), spec.seed).to(dev)
            got = evaluate_examples(model, task, spec.eval_batch_size, spec.eval_batches, spec.seed)
            if suite.extra is not None:
                got.update(suite.extra(spec, model, task))
            scores[key] = got
        rows.append(
            {
                "suite": spec.suite,
                "model": TRIVIAL,
                "setting": spec.setting,
                **spec.setting_columns,
                "width": spec.width,
                "params": 0,
                "state_size": 0,
                "lr": "",
                "seed": spec.seed,
                "steps": 0,
                "tokens": 0,
                **scores[key],
                "lrs_tried": "",
                "config": json.dumps(
                    {"model": {"name": TRIVIAL}, "task": spec.task_section}, sort_keys=True, separators=(",", ":")
                ),
                "run_dir": "",
                "reference": suite.trivial.label,
            }
        )
    return rows
