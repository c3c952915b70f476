"""Without a progress bar (stdout or stderr not a terminal: nohup, CI, a notebook) a run still shows its training
loss, tokens/s and ETA, once every `bdh.train.run.log.LINE_SECONDS` of wall clock (`Progress.update`). A fake
clock: no time passes in the test."""

from __future__ import annotations

import io
import types

import bdh.train.run.log as log_module
from bdh.train.run.log import LINE_SECONDS, Progress


def test_a_training_line_every_fixed_interval_when_there_is_no_bar(monkeypatch):
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(log_module, "time", types.SimpleNamespace(time=lambda: clock.now))
    stream = io.StringIO()  # not a terminal: auto shows lines
    progress = Progress(total=100, initial=0, mode="auto", stream=stream)
    assert progress.mode == "lines" and LINE_SECONDS > 0
    for step in range(1, 41):  # steps of a quarter of the interval each: 40 steps, 10 intervals
        clock.now += LINE_SECONDS / 4
        progress.update(step, loss=2.5, tok_per_s=1234.0)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10, lines
    assert lines[0] == "step 4/100: train loss 2.5000, 1,234 tok/s, ETA " + log_module._hms(24 * LINE_SECONDS)
    # an evaluation's line (which shows the training loss too) restarts the interval
    progress.eval_line(41, 2.4, 1000.0, {"val_loss": 2.3})
    clock.now += LINE_SECONDS / 2
    progress.update(42, loss=2.4, tok_per_s=1000.0)
    assert len(stream.getvalue().splitlines()) == 11
    # a bar, or no progress at all, prints no such line
    quiet = io.StringIO()
    none = Progress(total=100, initial=0, mode="none", stream=quiet)
    clock.now += 10 * LINE_SECONDS
    none.update(50, loss=2.0, tok_per_s=1.0)
    assert quiet.getvalue() == ""
