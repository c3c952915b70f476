"""The sweep engine (`bdh.bench.engine`) and the one learning-rate choice (`bdh.bench.results.best_lr`) that the
bench and the scaling experiment share."""

from __future__ import annotations

import math

from bdh.bench.engine import TableLedger, pending, train_fresh, train_or_reuse
from bdh.bench.results import best_lr, read_csv
from bdh.bench.spec import RunSpec, run_key


def _spec(lr: float = 1e-3, seed: int = 0) -> RunSpec:
    return RunSpec("t", "bdh", "S", {}, 32, lr, seed, {}, {}, 5, 2)


def test_table_ledger_records_rows_and_a_resume_skips_them(tmp_path):
    ledger = TableLedger(tmp_path / "runs.csv", [], run_key, ["model", "setting", "width", "lr", "seed"])
    calls = []

    def train(spec, run_dir):
        calls.append(spec.key())
        run_dir.mkdir(parents=True)
        return {
            "model": spec.model,
            "setting": spec.setting,
            "width": spec.width,
            "lr": spec.lr,
            "seed": spec.seed,
            "steps": spec.steps,
            "batch_size": spec.batch_size,
        }

    specs = [_spec(seed=0), _spec(seed=1)]
    train_fresh(specs[0], tmp_path / "r0", ledger, train)
    again = TableLedger(tmp_path / "runs.csv", read_csv(tmp_path / "runs.csv"), run_key, ledger.columns)
    assert pending(specs, again, resume=True) == [specs[1]] and pending(specs, again, resume=False) == specs
    row, reused = train_or_reuse(specs[0], tmp_path / "r0", again, train, resume=True)
    assert reused and len(calls) == 1 and row["seed"] == "0"


def test_best_lr_takes_the_best_mean_in_either_direction_and_ties_to_the_smaller_rate():
    rows = {1e-3: [{"a": 0.25}, {"a": 0.75}], 3e-3: [{"a": 0.5}, {"a": 0.5}], 1e-2: [{"a": math.nan}, {"a": 0.9}]}
    best, means = best_lr(rows, ["a"])
    assert best == 1e-3 and means[1e-2] == (
        -math.inf,
    )  # an exact tie (binary fractions) goes to 1e-3; 1e-2 diverged once
    best, means = best_lr(rows, ["a"], higher_is_better=False)
    assert best == 1e-3 and -means[3e-3][0] == 0.5  # a loss: the mean goodness is minus the mean
    assert best_lr({1e-3: [], 3e-3: [{"a": 1.0}]}, ["a"])[0] == 3e-3  # a rate without runs is the worst
