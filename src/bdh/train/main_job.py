"""The main job as data: the ``model`` and ``task`` sections of argument-less ``bdh train``, and its presets
(no PyTorch)."""

from __future__ import annotations

from typing import Any


def model_section() -> dict[str, Any]:
    """The main job's model; ``damping: alibi`` (U of Eq. 8) reads past its 128-byte window (docs/long-context.md)."""
    return {
        "name": "bdh",
        "n_layer": 4,
        "n_embd": 128,
        "n_head": 4,
        "n_neurons": 2048,
        "dropout": 0.0,
        "damping": "alibi",
    }


def task_section() -> dict[str, Any]:
    """The main job's task: next-byte prediction on the embedded corpus, 128-byte windows."""
    return {"name": "text", "seq_len": 128}


#: the main job's validation bits per byte by step, as docs/training.md records them ("The main job, measured":
#: ``time bdh train`` on an idle 2-core CPU, 2,000 steps; a test keeps the two equal): what a run of this job cut
#: short by its time budget is compared with (`bdh.train.run.report.budget_note`)
MEASURED_BPB: dict[int, float] = {250: 2.83, 500: 2.58, 1000: 2.38, 1500: 2.29, 2000: 2.20}

#: the run config's presets (`bdh.typed_config.TypedConfig.PRESETS`); ``quick`` (``bdh train --quick``): the main
#: job shortened to about a minute (the same model and data)
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "train.max_steps": 300,
        "train.max_minutes": 1.5,
        "optim.warmup_steps": 20,
        "eval.every": 100,
        "eval.batches": 8,
        "checkpoint.every": 100,
        "sample.max_new_tokens": 200,
    }
}
