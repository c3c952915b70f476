"""The recall probe shared by the long-context and length experiments: a fact (``The KEY is VALUE.``) in held-out
text, asked ``distance`` bytes later; the value's letters are scored through the state and through a cropped
window, each against a control without the fact (docs/long-context.md, "Recall through the state")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from bdh.errors import UserError
from bdh.tasks.facts import KEY_LETTERS, VALUE_LETTERS, fact_sentence, question, random_word

#: bytes of held-out text before the fact
RECALL_LEAD = 256


def held_out_text(task: Any = None) -> np.ndarray:
    """The held-out bytes of a text task (its bytes after ``n_train``; by default the embedded corpus's last tenth)."""
    if task is None:
        from bdh.tasks.text import TextConfig, TextTask

        task = TextTask(TextConfig(val_fraction=0.1))
    return task.stream.read(task.n_train, len(task.stream) - task.n_train)


@dataclass
class RecallTrials:
    """A batch of recall trials of one distance: ``tokens`` (B, L) and where VALUE's letters stand."""

    tokens: torch.Tensor
    control: torch.Tensor  # the same trials with the fact sentence replaced by filler
    value_at: int  # position of VALUE's first letter in every row (the question ends at value_at - 1)
    distance: int


def recall_trials(filler: np.ndarray, distance: int, trials: int, lead: int, seed: int) -> RecallTrials:
    """``trials`` rows of ``lead`` bytes of text, the fact, ``distance`` bytes of text, the question and the
    value; the text is taken from ``filler`` (held-out bytes) at random places."""
    rng = np.random.Generator(np.random.PCG64([seed, distance, 0x2EC0]))
    rows, controls = [], []
    for _ in range(trials):
        key, value = random_word(rng, KEY_LETTERS), random_word(rng, VALUE_LETTERS)
        fact, ask = fact_sentence(key, value), question(key)
        need = lead + len(fact) + distance
        if need > len(filler):
            raise UserError(
                f"recall probe: {need:,} bytes of filler text needed, the held-out text has {len(filler):,}"
            )
        start = int(rng.integers(0, len(filler) - need + 1))
        text = filler[start : start + need].tobytes()
        before, after = text[:lead], text[lead + len(fact) :]
        rows.append(before + fact + after + ask + value + b".")
        controls.append(text[: lead + len(fact)] + after + ask + value + b".")
    value_at = len(rows[0]) - VALUE_LETTERS - 1
    return RecallTrials(_as_tensor(rows), _as_tensor(controls), value_at, distance)


def _as_tensor(rows: list[bytes]) -> torch.Tensor:
    """Equal-length byte rows as a (B, L) long tensor."""
    return torch.tensor(np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), -1), dtype=torch.long)


@torch.no_grad()
def _value_hits(model: nn.Module, tokens: torch.Tensor, value_at: int, context: int | None, chunk: int) -> torch.Tensor:
    """(B, VALUE_LETTERS) booleans: greedy next-byte predictions of the value's letters, reading every byte
    before (the state carried, ``context`` None) or only the last ``context`` bytes (a cropped window)."""
    device = next(model.parameters()).device
    end = value_at + VALUE_LETTERS
    if context is None:
        state = model.init_state(tokens.shape[0])
        for start in range(0, value_at - 1, chunk):  # everything before the question's last byte
            _, state = model.step(tokens[:, start : min(start + chunk, value_at - 1)].to(device), state)
        logits, _ = model.step(tokens[:, value_at - 1 : end - 1].to(device), state)
        preds = logits.argmax(-1).cpu()
    else:
        preds = []
        for i in range(VALUE_LETTERS):
            t = value_at - 1 + i  # predicts the byte at t + 1
            window = tokens[:, max(0, t + 1 - context) : t + 1].to(device)
            preds.append(model(window)[:, -1].argmax(-1).cpu())
        preds = torch.stack(preds, dim=1)
    return preds == tokens[:, value_at:end]


def recall_accuracy(model: nn.Module, trials: RecallTrials, context: int | None, chunk: int = 256) -> dict:
    """Per-letter accuracy on VALUE with the fact and without it (control), and their difference."""
    was = model.training
    model.eval()
    try:
        hit = _value_hits(model, trials.tokens, trials.value_at, context, chunk).float()
        ctl = _value_hits(model, trials.control, trials.value_at, context, chunk).float()
    finally:
        model.train(was)
    return {
        "distance": trials.distance,
        "accuracy": float(hit.mean()),
        "control": float(ctl.mean()),
        "recall": float(hit.mean() - ctl.mean()),
        "first_letter": float(hit[:, 0].mean()),
        "trials": int(hit.shape[0]),
    }
