"""The note of a run cut short by its time budget calls the machine busy only when the run slowed to less than half
its speed at the start and the load average exceeded the cores (`bdh.train.run.report.busy_machine`), from the
speeds the run measured (`bdh.train.budget.TimeBudget.speeds`). Fake step times and loads: no clock is read."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bdh.train import load_config
from bdh.train.budget import SPEED_STEPS, TimeBudget
from bdh.train.main_job import MEASURED_BPB
from bdh.train.run.report import busy_machine, documented_gap, train_report


def counted(seconds: list[float]) -> TimeBudget:
    """A budget (no time limit: every run counts its steps) that counted steps of ``seconds`` each."""
    budget = TimeBudget(None, eval_every=0, eval_batches=1, eval_batch=1, train_rows=1)
    for step, s in enumerate(seconds, 1):
        budget.count(s, step)
    return budget


def test_speeds_leave_out_the_warm_up_and_compare_the_first_steps_with_the_last():
    budget = counted([9.0] + [0.1] * SPEED_STEPS + [0.2] * 7 + [0.4] * SPEED_STEPS)  # the first step: warm-up
    start, end = budget.speeds()
    assert start == pytest.approx(10.0) and end == pytest.approx(2.5)  # steps per second
    assert counted([9.0] + [0.1] * (2 * SPEED_STEPS - 1)).speeds() is None  # the two stretches would overlap
    budget.start(100.0)  # a new process (a resume) measures its own start
    assert budget.speeds() is None


@pytest.mark.parametrize(
    ("speeds", "load", "busy"),
    [
        ((10.0, 4.0), 5.5, True),  # slowed to 40 % on a loaded machine
        ((10.0, 6.0), 5.5, False),  # loaded, but the steps kept more than half their speed: slow from the start
        ((10.0, 4.0), 1.5, False),  # slowed down, but not by other work (the load is below the cores)
        ((10.0, 4.0), 2.0, False),  # a load equal to the cores is not more than the machine has
        (None, 5.5, False),  # too few steps to compare
    ],
)
def test_busy_only_when_the_run_slowed_below_half_and_the_load_exceeded_the_cores(monkeypatch, speeds, load, busy):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 1.0, 1.0))
    note = busy_machine(speeds)
    assert bool(note) == busy, note
    if busy:
        assert note == (
            " (the machine was busy: load average 5.5 on 2 cores, and the last steps ran at 40% of the speed "
            "of the first)"
        )


def test_no_load_average_no_claim(monkeypatch):
    def missing():
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", missing)
    assert busy_machine((10.0, 1.0)) == ""


@pytest.mark.parametrize(("speeds", "busy"), [((10.0, 4.0), True), ((10.0, 9.0), False)])
def test_the_note_of_a_budget_cut(monkeypatch, speeds, busy):
    """A main job cut at 305 of 2,000 steps: the machine called busy only when it was, and in every case the
    command that trains all the steps."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.5, 4.0, 3.0))
    config = load_config(None, ["train.max_minutes=30", "sample.max_new_tokens=0"])  # the main job
    result = SimpleNamespace(
        finished_before=False,
        interrupted=None,
        run_dir=Path("runs/main"),
        step=305,
        total_steps=305,
        step_limit=2000,
        tokens=305 * 4096,
        new_tokens=305 * 4096,
        seconds=1800.0,
        metrics={"val_bpb": 3.07, "val_loss": 2.13},
        task=None,
        model=None,
        budget_cut=True,
        speeds=speeds,
    )
    (note,) = train_report(config, result).after
    assert note.startswith("the time budget train.max_minutes=30.0 ended the run at step 305 of 2000 steps")
    assert ("machine was busy" in note) == busy, note
    # how far from the documented full run, from the run's own validation and docs/training.md's record
    assert "its validation, 3.07 bits per byte, is +0.87 from the 2.20 the documented main job reached" in note
    assert "(docs/training.md; 2.83 at step 250)" in note
    assert note.endswith("; to finish this run: bdh train --resume runs/main --set train.max_minutes=null")
    assert note.count("bdh train") == 1  # one command


def test_another_run_cut_short_is_called_cut_and_the_documented_curve_is_the_docs():
    config = load_config(None, ["model.n_layer=2"])  # not the main job: no documented result to compare with
    assert documented_gap(config, 305, {"val_bpb": 3.0}) == (
        "; its validation is that of a run cut short, not of its full length"
    )
    # MEASURED_BPB is the curve docs/training.md records for the main job, step for step
    text = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    line = next(x for x in text.split("\n\n") if x.startswith("Validation bits per byte over the run"))
    pairs = re.findall(r"(\d\.\d\d) \((?:step )?(\d+)", line)
    assert {int(step): float(bpb) for bpb, step in pairs} == MEASURED_BPB
