"""A run under a time budget (``--quick``'s kind: ``train.max_minutes`` with a larger step cap), interrupted and
resumed, ends with the weights of the uninterrupted run: the budget's plan and the step time counted towards it are
part of the run (`bdh.train.budget.TimeBudget.state`). A fake clock that advances only in training steps (1 s each)
makes the two runs' plans depend on the steps alone, not on this machine."""

from __future__ import annotations

import signal
import types

import pytest
from _train_helpers import tiny

import bdh.train.trainer as trainer_module
from bdh.train import load_config
from bdh.train.trainer import Trainer

#: the budget (0.5 min at 1 s per step) plans about 25 of the 100 steps allowed, after 12 timed steps
BUDGET = ("train.max_minutes=0.5", "train.max_steps=100", "eval.every=10", "checkpoint.every=0")


def fit(corpus_file, run_dir, clock, *, stop_at: int | None = None, resume: bool = False):
    """Train (or resume) the budgeted run in ``run_dir``; ``stop_at``: a SIGINT during that step, as Ctrl-C."""
    config = load_config(None, tiny(corpus_file, run_dir, *BUDGET))
    trainer = Trainer(config, resume=run_dir if resume else None)
    real_step = trainer.train_step

    def timed_step(step: int):
        clock.now += 1.0
        if stop_at is not None and step + 1 == stop_at:
            signal.raise_signal(signal.SIGINT)  # the handler of the run: it stops after this step
        return real_step(step)

    trainer.train_step = timed_step
    try:
        result = trainer.fit()
        return result, {k: v.clone() for k, v in trainer.model.state_dict().items()}
    finally:
        trainer.close()


@pytest.mark.parametrize("stop_at", [5, 18])  # before the first plan (after step 13), and after it
def test_an_interrupted_budgeted_run_resumes_to_the_uninterrupted_weights(corpus_file, tmp_path, monkeypatch, stop_at):
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(time=lambda: clock.now))
    ref, ref_weights = fit(corpus_file, tmp_path / "whole", clock)
    assert 13 < ref.total_steps < 100 and ref.step == ref.total_steps  # the budget planned the run's length
    clock.now = 0.0
    cut, _ = fit(corpus_file, tmp_path / "cut", clock, stop_at=stop_at)
    assert cut.interrupted == signal.SIGINT and cut.step == stop_at
    clock.now += 1000.0  # time between the two processes is not the run's
    resumed, weights = fit(corpus_file, tmp_path / "cut", clock, resume=True)
    assert (resumed.step, resumed.total_steps) == (ref.step, ref.total_steps)
    # the same code path, shapes and thread count on the same batches: the weights are bit-identical
    assert weights.keys() == ref_weights.keys()
    assert all(bool((weights[k] == ref_weights[k]).all()) for k in weights), "the resumed run's weights differ"


def test_a_resume_after_the_plan_completes_it_however_slow_its_steps(corpus_file, tmp_path, monkeypatch):
    """The planned steps, once fixed, are the run's: a resumed process slower than the first is not cut short."""
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(time=lambda: clock.now))
    cut, _ = fit(corpus_file, tmp_path / "slow", clock, stop_at=18)
    planned = cut.total_steps
    config = load_config(None, tiny(corpus_file, tmp_path / "slow", *BUDGET))
    trainer = Trainer(config, resume=tmp_path / "slow")
    real_step = trainer.train_step

    def slow_step(step: int):
        clock.now += 30.0  # each step now takes as long as the whole budget's second half
        return real_step(step)

    trainer.train_step = slow_step
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    assert result.step == result.total_steps == planned
