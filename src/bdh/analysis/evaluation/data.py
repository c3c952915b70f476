"""What an evaluation of a trained run reads (``bdh eval``): `eval_data` resolves the task, split and settings.

A run's numbers compare with its training's only when read the same way: its task, the validation split, its
``eval.batch_size`` and its final evaluation's batches and seed; `EvalData` carries those defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError

#: batches an evaluation scores where the run does not say
EVAL_BATCHES = 16
#: window length of ``--data`` text read for a model folder (no run config to say the trained one)
DATA_SEQ_LEN = 256


@dataclass(frozen=True)
class EvalData:
    """The data of an evaluation and the run's settings for reading it."""

    # task, split: the task object and the split to read (``val``; ``all`` for a ``data`` file).
    task: Any
    split: str
    config: Any  # the run's `RunConfig` (None for a model folder).
    seed: int  # the run's seed (the batches training scored), 0 without a run.
    # batch_size, batches: the run's evaluation batch and the batches of its final evaluation (the number it printed;
    # None: the whole split).
    batch_size: int
    batches: int | None
    unit: str  # ``byte`` for a byte-level task, else ``token``.
    description: str  # what is read, for a report line.


def _task_of(config: Any) -> Any:
    """The task of a run config, built as the run built it."""
    return config.make_task()


def eval_data(source: str | Path, model: Any, data: str | Path | None = None) -> EvalData:
    """The data of an evaluation: the run's validation split, or the bytes of ``data`` (a file or folder) in
    its windows."""
    from bdh.tasks.text import TextConfig, TextTask
    from bdh.train.config import RunConfig
    from bdh.train.run.folder import load_run_config

    is_run = (Path(source) / "config.yaml").is_file()
    config = RunConfig.from_dict(load_run_config(source)) if is_run else None
    if data:
        if getattr(model.config, "vocab_size", 256) < 256:
            raise UserError(f"--data is read as bytes; the model's vocabulary has {model.config.vocab_size} tokens")
        seq_len = getattr(config.task.config, "seq_len", DATA_SEQ_LEN) if config else DATA_SEQ_LEN
        task, split, what = TextTask(TextConfig(data=str(data), seq_len=seq_len), whole=True), "all", str(data)
    elif config is None:
        raise UserError(f"{source}: not a run folder (no config.yaml); give --data FILE to evaluate on")
    else:
        task, split, what = _task_of(config), "val", f"{source} validation split"
    t = config.train if config else None
    batch_size = (config and (config.eval.batch_size or t.micro_batch_size or t.batch_size)) or 8
    return EvalData(
        task=task,
        split=split,
        config=config,
        seed=t.seed if t else 0,
        batch_size=batch_size,
        batches=config.eval.final() if config else EVAL_BATCHES,
        unit="byte" if getattr(task, "vocab_size", None) == 256 else "token",
        description=what,
    )


__all__ = ["EVAL_BATCHES", "EvalData", "eval_data"]
