"""The recall probe shared by the long-context and length experiments (`bdh.analysis.recall`): where the fact and
the question stand, and the state and the window agreeing inside the window."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bdh.analysis.recall import held_out_text, recall_accuracy, recall_trials
from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.tasks.facts import KEY_LETTERS, VALUE_LETTERS


def test_recall_trials_place_the_fact_and_the_question():
    filler = np.frombuffer(b"".join(b"line %05d of the play.\n" % i for i in range(2000)), dtype=np.uint8)
    trials = recall_trials(filler, 300, 3, lead=50, seed=0)
    assert trials.tokens.shape == trials.control.shape and trials.tokens.shape[0] == 3
    for row, ctl in zip(trials.tokens, trials.control):
        text, control = bytes(row.tolist()), bytes(ctl.tolist())
        value = text[trials.value_at : trials.value_at + VALUE_LETTERS]
        assert text.endswith(b" is " + value + b".") and value.isalpha() and value.islower()
        key = text[-(len(b" is ") + VALUE_LETTERS + 1 + KEY_LETTERS) :][:KEY_LETTERS]
        fact = b" The word for " + key + b" is " + value + b". "
        assert text.index(fact) == 50  # after `lead` bytes of text
        assert text.index(b" The word for " + key + b" is ", 51) - (50 + len(fact)) == 300  # `distance` bytes later
        assert fact not in control and control.endswith(b" is " + value + b".") and len(control) == len(text)
    again = recall_trials(filler, 300, 3, lead=50, seed=0)
    assert torch.equal(again.tokens, trials.tokens)
    with pytest.raises(UserError, match="filler text needed"):
        recall_trials(filler[:100], 300, 1, lead=50, seed=0)


def test_recall_through_the_state_and_the_window_agree_inside_the_window():
    """A fact inside the cropped window is seen by both readings: the carried and the cropped predictions are
    the same there when the crop reaches back past the fact (the same tokens, float32 rounding aside)."""
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, dropout=0.0)).eval()
    filler = np.frombuffer(bytes(range(32, 127)) * 40, dtype=np.uint8)
    trials = recall_trials(filler, 20, 4, lead=8, seed=1)
    carried = recall_accuracy(model, trials, None, chunk=16)
    cropped = recall_accuracy(model, trials, trials.tokens.shape[1], chunk=16)
    assert carried["accuracy"] == cropped["accuracy"] and carried["control"] == cropped["control"]
    assert carried["recall"] == pytest.approx(carried["accuracy"] - carried["control"])
    assert carried["trials"] == 4 and carried["distance"] == 20


def test_the_held_out_text_is_the_corpus_after_its_training_bytes():
    from bdh.tasks.text import TextConfig, TextTask

    task = TextTask(TextConfig(val_fraction=0.1))
    held = held_out_text()
    assert len(held) == len(task.stream) - task.n_train > 0
    assert held.tobytes() == task.stream.read(task.n_train, len(held)).tobytes()
