"""The natural measurement beside the synthetic ones: the recall probe the long-context experiment uses
(`bdh.analysis.recall`) on text models, through their state and through a window of T bytes, on the held-out tenth
of the embedded Shakespeare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bdh.analysis.recall import RECALL_LEAD, held_out_text, recall_accuracy, recall_trials

from .config import Config
from .reading import has_state

#: the seed of the recall trials (the long-context experiment's 1000 + its seed 0)
TRIALS_SEED = 1000


def text_recall(config: Config, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """One row per (text model, distance): recall through the state (``carried``, None without a state) and
    through a window of ``seq_len`` bytes (``window``), each `recall_accuracy`'s record."""
    from bdh.train.run.model import load_run_model

    filler = held_out_text()
    rows = []
    for folder in config.text_models:
        model, _ = load_run_model(folder, device=config.device)  # checksums verified
        for distance in config.text_distances:
            trials = recall_trials(filler, distance, config.text_trials, RECALL_LEAD, seed=TRIALS_SEED)
            carried = recall_accuracy(model, trials, None, chunk=config.seq_len) if has_state(model) else None
            window = recall_accuracy(model, trials, config.seq_len)
            log(f"length: text recall of {folder} at {distance:,} bytes")
            rows.append({"model": str(folder), "distance": distance, "carried": carried, "window": window})
    return rows
