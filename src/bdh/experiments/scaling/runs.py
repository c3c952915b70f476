"""One training run of the scaling experiment: a model at a size, a learning rate and a seed, trained through
`bdh.train` and validated, its record kept in ``runs/<model>/size<i>-lr<lr>-s<seed>/result.json`` (written last)
so that ``--resume`` reuses a run whose spec matches. The training loop is the bench's (`bdh.bench.engine`); the
spec's fields are the key stored in ``result.json``, so that folders written before keep resuming."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bdh.bench.engine import fit, train_or_reuse

from ..ledger import Ledger
from ..scaffold import Log

#: the file that marks a finished run and holds its record
RESULT = "result.json"
#: how the trainer's error for a non-finite loss begins (`bdh.train.trainer.Trainer._check_loss`): the run
#: diverged at its learning rate, a result rather than a mistake
DIVERGED = "loss is "


@dataclass(frozen=True)
class RunSpec:
    """What identifies a run (and its result on resume); ``data_id`` names the data independently of where the output
    folder lies."""

    model: str
    size: int
    lr: float
    seed: int
    section: dict[str, Any]
    task: dict[str, Any]
    data_id: str
    steps: int
    batch_size: int
    micro_batch_size: int | None
    curve_every: int
    curve_eval_batches: int
    eval_batches: int
    device: str
    precision: str

    @property
    def eval_batch_size(self) -> int:
        """Sequences per validation batch: the micro-batch (what fits in memory), else the batch."""
        return self.micro_batch_size or self.batch_size

    def name(self) -> str:
        return f"{self.model}/size{self.size}-lr{self.lr:g}-s{self.seed}"

    run_name = name  # the engine's name of the run folder (`bdh.bench.engine.Spec`)

    def key(self) -> dict[str, Any]:
        """The spec as JSON values, without the data's location: the run's identity in its ``result.json``."""
        d = asdict(self)
        d["task"] = {k: v for k, v in self.task.items() if k != "data"}
        return json.loads(json.dumps(d))

    def run_config(self, run_dir: Path) -> Any:
        """The trainer's `RunConfig` (`bdh.train.config.sweep_run_config`, as every sweep builds it), with the loss
        curve evaluated every ``curve_every`` steps."""
        from bdh.train.config import sweep_run_config

        return sweep_run_config(
            self.section,
            self.task,
            run_dir,
            lr=self.lr,
            steps=self.steps,
            batch_size=self.batch_size,
            seed=self.seed,
            eval={
                "every": self.curve_every,
                "batches": self.curve_eval_batches,
                "final_batches": self.curve_eval_batches,  # a curve's points read alike
                "batch_size": self.eval_batch_size,
            },
            micro_batch_size=self.micro_batch_size,
            device=self.device,
            precision=self.precision,
            check_memory=self.device != "cpu",
        )


class RunLedger:
    """The experiment's `Ledger` of ``runs/<model>/size<i>-lr<lr>-s<seed>/result.json`` as the bench's engine reads
    it (`bdh.bench.engine.Ledger`): a record holds its spec's key under ``"spec"``; one missing, damaged or of
    another spec is a run to train again."""

    def __init__(self, runs: Path) -> None:
        self.ledger = Ledger(runs, "{run}/" + RESULT, sort_keys=True)

    def folder(self, spec: RunSpec) -> Path:
        return self.ledger.path(spec.run_name()).parent

    def find(self, spec: RunSpec) -> dict[str, Any] | None:
        key = spec.key()
        return self.ledger.find(spec.run_name(), check=lambda r: None if r.get("spec") == key else "another spec's")

    def add(self, spec: RunSpec, run_dir: Path, row: dict[str, Any]) -> None:
        if row.get("spec") != spec.key() or run_dir != self.folder(spec):
            raise ValueError(f"{run_dir}: a record holds its spec's key under 'spec', in the spec's folder")
        self.ledger.add(spec.run_name(), row)


def curves(run_dir: Path) -> dict[str, list[list[float]]]:
    """The run's loss curves from its metrics.jsonl: ``val`` [step, tokens, val_loss] and ``train`` [step, loss]."""
    from bdh.train.run.log import read_metrics

    records = read_metrics(run_dir / "metrics.jsonl")
    val = [[r["step"], r["tokens"], r["val_loss"]] for r in records if r.get("kind") == "eval" and "val_loss" in r]
    train = [[r["step"], r["loss"]] for r in records if r.get("kind") == "train"]
    return {"val": val, "train": train}


def train_run(
    spec: RunSpec,
    out: Path,
    *,
    resume: bool,
    segments: dict[str, Sequence[tuple[str, str, str, str]]] | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Train (or, with ``resume``, reuse) one run into ``out/runs`` (`bdh.bench.engine.train_or_reuse`); returns
    its record (``reused`` says which)."""
    ledger = RunLedger(out / "runs")
    record, reused = train_or_reuse(
        spec, ledger.folder(spec), ledger, lambda s, run_dir: _train(s, run_dir, segments or {}, log), resume
    )
    return {**record, "reused": reused}


def _train(
    spec: RunSpec, run_dir: Path, segments: dict[str, Sequence[tuple[str, str, str, str]]], log: Log
) -> dict[str, Any]:
    from bdh.train import TrainingError
    from bdh.train.evaluate import evaluate

    start, cpu = time.time(), time.process_time()
    record: dict[str, Any] = {"spec": spec.key(), "model": spec.model, "size": spec.size}
    record.update(lr=spec.lr, seed=spec.seed, diverged=False, error="")
    try:
        result = fit(spec.run_config(run_dir))
    except TrainingError as e:
        if not str(e).startswith(DIVERGED):
            raise  # a configuration the trainer refuses: the user's to fix, not a result
        log(f"    diverged: {e}")
        record.update(diverged=True, error=str(e), val_loss=math.nan, val_bpb=math.nan, params=0, tokens=0, steps=0)
        record.update(curve=curves(run_dir), wall_s=time.time() - start, tok_per_s=math.nan, directions={})
        return record
    model, task = result.model, result.task
    final = evaluate(model, task, spec.eval_batch_size, spec.eval_batches, spec.seed)
    record.update(
        params=sum(p.numel() for p in model.parameters()),
        tokens=result.tokens,
        steps=result.step,
        val_loss=final["val_loss"],
        val_bpb=final["val_bpb"],
        curve=curves(run_dir),
        directions=_direction_losses(model, segments),
        train_s=result.seconds,
        tok_per_s=result.tokens / max(result.seconds, 1e-9),
        wall_s=time.time() - start,
        cpu_s=time.process_time() - cpu,
    )
    return record


def _direction_losses(model: Any, segments: dict[str, Sequence[tuple[str, str, str, str]]]) -> dict[str, float]:
    """Target-side loss per translation direction (paper Table 2's measure), each segment from a zero state."""
    from bdh.experiments.common import segment_losses

    return {key: segment_losses(model, segs).target for key, segs in segments.items() if segs}
