"""Part (b) of ``bdh experiment relatives``: the byte-level language model at the main job's parameter count.

Every model on the embedded Shakespeare, trained per seed at equal tokens (``tokens``) and at equal wall-clock
(``clock``, `bdh.train.budget`), scored in bits per byte on validation (lower is better) against the byte unigram
(docs/bench.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch

from bdh.bench.spec import BenchError, RunSpec, SuiteDef, Sweep, Trivial, redefault
from bdh.bench.trivial import TokenPrior
from bdh.typed_config import bounded

from . import zoo

#: the two settings of every model: equal tokens (fixed steps) and equal wall-clock (a time budget)
BUDGETS = ("tokens", "clock")
#: the byte vocabulary of the text task
BYTES = 256


@dataclass
class LMSweep(Sweep):
    """The language model's runs: the fields of `Sweep` (``widths``: BDH's ``n_embd``; ``steps``: the equal-tokens
    runs' length and the most an equal-clock run may plan), plus
    """

    suite = "lm"
    CONFIG_NAMES: ClassVar[dict[str, str]] = {}

    models: tuple[str, ...] = zoo.MODELS  # the comparison's labels (`zoo.check_labels`).
    widths: tuple[int, ...] = redefault(Sweep, "widths", (128,))
    lrs: tuple[float, ...] = redefault(Sweep, "lrs", (1e-3,))
    steps: int = redefault(Sweep, "steps", 200)
    batch_size: int = redefault(Sweep, "batch_size", 8)
    eval_batch_size: int = redefault(Sweep, "eval_batch_size", 32)
    seq_len: int = bounded(128, ge=2)  # T, bytes per window.
    minutes: float = bounded(0.5, gt=0)  # the time budget of each equal-clock run (``train.max_minutes``).
    clock_steps: int = bounded(100_000, ge=1)  # the most steps an equal-clock run may plan (its ``train.max_steps``).
    val_fraction: float = bounded(0.1, gt=0, lt=1)  # the share of the corpus (its end) held out for validation.
    eval_batches: int = bounded(8, ge=1)  # validation batches of ``eval_batch_size`` windows scored after training.

    @classmethod
    def _key(cls, field: str) -> str:
        return f"relatives.{cls.CONFIG_NAMES.get(field, field)}"

    def task(self) -> dict[str, Any]:
        """The task section: the embedded corpus in windows of ``seq_len``."""
        return {"name": "text", "data": None, "seq_len": self.seq_len, "val_fraction": self.val_fraction}

    def validate(self) -> None:
        """The labels known and BDH among them, then `Sweep`'s rules (BDH's neurons split into even heads)."""
        zoo.check_labels(self.models)
        super().validate()


def plan(sweep: LMSweep) -> list[RunSpec]:
    """Every run: per width and model, the equal-tokens runs (``steps``) and the equal-clock runs (``minutes``,
    up to ``clock_steps``), each at every learning rate and seed."""
    sweep.validate()
    specs: list[RunSpec] = []
    for w in sweep.widths:
        for m in sweep.models:
            section = zoo.section(
                m,
                w,
                vocab_size=BYTES,
                seq_len=sweep.seq_len,
                n_layer=sweep.n_layer,
                n_head=sweep.n_head,
                neuron_mult=sweep.neuron_mult,
            )
            for budget in BUDGETS:
                runs = sweep.runs(m, w, budget, {"budget": budget}, section, sweep.task())
                if budget == "clock":
                    runs = [replace(r, steps=sweep.clock_steps, max_minutes=sweep.minutes) for r in runs]
                specs += [replace(r, eval_batches=sweep.eval_batches) for r in runs]
    return specs


def byte_unigram(task: Any, train_size: int, seed: int) -> TokenPrior:
    """The byte unigram of the training split as a `TokenPrior` (every row the same add-one smoothed byte frequencies,
    so it reads no input); ``seed`` is unused."""
    del seed
    if train_size < 1:
        raise BenchError("lm: the training split is empty")
    counts = np.bincount(task.stream.read(0, train_size), minlength=BYTES).astype(np.float64) + 1.0
    logp = torch.from_numpy(np.log(counts / counts.sum())).float()
    return TokenPrior(logp.expand(BYTES, BYTES).contiguous())


def suite_def(sweep: LMSweep) -> SuiteDef:
    """The language model's suite: bits per byte (lower is better), the byte unigram as the trivial row."""
    del sweep
    return SuiteDef(
        name="lm",
        setting_columns=["budget"],
        metrics=["bpb"],
        score=["bpb"],
        higher_is_better=False,
        trivial=Trivial("trivial (byte unigram of the training split)", lambda task: task.n_train, byte_unigram),
    )
