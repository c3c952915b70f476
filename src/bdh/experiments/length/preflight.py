"""What ``bdh experiment length`` checks before its first training step: every field a run will use, so that a
mistake is one line before any model trains, never after hours of training (docs/experiments.md).

- ``device``: exists and is available here, named ``length.device``;
- every training phase of every (model, task, count of facts): its run config built and checked as the trainer
  will (`bdh.train.build.plan_run`), its model built on the meta device (no memory taken): a width, heads or
  lengths that do not fit a model or task is named with the model and task;
- the longest test sequence fits this machine's memory (`TEST_BYTES_PER_TOKEN`);
- each of ``text_models``: a byte-level model (256 tokens), loaded through the verified door of every command
  (`bdh.train.run.model.load_run_model`: checksums, an edited config.json).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bdh.errors import UserError

from .config import Config

#: bytes per token of a test sequence read back: its inputs and targets (int64 each), generated on the CPU, twice
#: over while a test set is drawn (an estimate; a read through a state then holds one chunk of activations)
TEST_BYTES_PER_TOKEN = 32


def check_before_training(config: Config) -> None:
    """Refuse, in one line naming the field, what would fail only after runs have trained (see the module doc)."""
    from bdh.devices import resolve_device

    resolve_device(config.device, what="length.device")
    for task in config.tasks:
        for model in config.models:
            for facts in config.trained_facts(task):
                _check_phases(config, model, task, facts)
    _check_test_memory(config)
    for path in config.text_models:
        _check_text_model(config, path)


def _check_phases(config: Config, model: str, task: str, facts: int | None) -> None:
    """Each training phase of the run (the short phase of a curriculum, then T) planned and its model shaped."""
    from bdh.train.build import plan_run

    from .experiment import phase_config

    run_of = f"{model} on {task}" + ("" if facts is None else f" with {facts} facts")
    phases = [(None, f"length: {run_of}")]
    if config.short_steps:  # the short phase first, then T from it
        phases = [(None, f"length.short_len: {config.short_len} for {run_of}"), (Path("short"), phases[0][1])]
    for init_from, where in phases:
        try:
            run = phase_config(config, Path("run"), model=model, task=task, seed=0, init_from=init_from, facts=facts)
            plan = plan_run(run, process_group=False)
            with torch.device("meta"):
                plan.model_cls(run.model.config)
        except (UserError, ValueError) as exc:
            raise UserError(f"{where}: {str(exc).splitlines()[0].removeprefix('length: ')}") from None


def _check_test_memory(config: Config) -> None:
    """The longest test sequence (``max_length`` tokens, one read at a time at least) fits this machine's memory."""
    from bdh.train.runtime.memory import available_bytes

    free = available_bytes(torch.device("cpu"))
    need = config.max_length * TEST_BYTES_PER_TOKEN
    if free is not None and need > free:
        raise UserError(
            f"length.max_length: a test sequence of {config.max_length:,} tokens needs about {need / 2**30:,.1f} GiB "
            f"to read, this machine has {free / 2**30:,.1f} GiB free; give a smaller max_length"
        )


def _check_text_model(config: Config, path: str) -> Any:
    """A text model loaded as every command loads one, and read in bytes."""
    from bdh.train.run.model import load_run_model

    try:
        model, _ = load_run_model(path, device="cpu")
    except (UserError, ValueError, OSError) as exc:
        raise UserError(f"length.text_models: {str(exc).splitlines()[0]}") from None
    vocab = getattr(model.config, "vocab_size", None)
    if vocab != 256:
        raise UserError(
            f"length.text_models: {path} reads {vocab} tokens, not the 256 bytes of a text model (its recall is read "
            "on held-out text)"
        )
    return model
