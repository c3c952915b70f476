"""The sweeps and the bench options as typed configs: declared ranges, kept by the suites that change a
default, and the rules between fields that `validate` checks."""

import dataclasses
import re

import pytest

from bdh.bench.boardpath import BoardPathSweep
from bdh.bench.models import ACCEPTED, BDH_VARIANTS, REFERENCE, bench_models
from bdh.bench.recall import RecallSweep
from bdh.bench.runner import BenchOptions
from bdh.bench.spec import BenchError, Sweep
from bdh.bench.sudoku import SudokuSweep
from bdh.errors import UserError
from bdh.typed_config import declared_ranges

SUITES = (RecallSweep, BoardPathSweep, SudokuSweep)


@pytest.mark.parametrize("cls", SUITES, ids=lambda c: c.__name__)
def test_a_suite_keeps_the_ranges_of_the_shared_fields_whose_defaults_it_changes(cls):
    shared = {d.name: d.range for d in declared_ranges(Sweep)}
    mine = {d.name: d.range for d in declared_ranges(cls)}
    assert {name: mine.get(name) for name in shared} == shared
    assert "models" in mine  # one of the suite's models


@pytest.mark.parametrize(
    "cls, changes, message",
    [
        (RecallSweep, {"steps": 0}, "recall.steps: must be an integer >= 1, got 0"),
        (RecallSweep, {"lrs": (1e-3, 0.0)}, "recall.lrs: must be numbers > 0, got [0.001, 0.0]"),
        (RecallSweep, {"widths": (0,)}, "recall.widths: must be integers >= 1, got [0]"),
        (RecallSweep, {"batch_size": 0}, "recall.batch_size: must be an integer >= 1, got 0"),
        (
            RecallSweep,
            {"eval_length_factor": -1},
            "recall.eval_length_factor: must be an integer >= 0 (0 or 1: no longer evaluation), got -1",
        ),
        (BoardPathSweep, {"board_sizes": (6, 1)}, "boardpath.board_sizes: must be integers >= 2, got [6, 1]"),
        (BoardPathSweep, {"wall_prob": 1.0}, "boardpath.wall_prob: must be a number in [0, 1), got 1.0"),
        (SudokuSweep, {"min_givens": 16}, "sudoku.min_givens: must be an integer in [17, 81], got 16"),
        (SudokuSweep, {"max_givens": 82}, "sudoku.max_givens: must be an integer in [17, 81], got 82"),
        (
            SudokuSweep,
            {"models": ("bdh", "nosuch")},
            f"sudoku.models: must be one of {', '.join(bench_models())} ({ACCEPTED}); got ['bdh', 'nosuch']",
        ),
    ],
)
def test_a_field_out_of_its_range_is_refused_when_the_sweep_is_built(cls, changes, message):
    with pytest.raises(UserError, match="^" + re.escape(message) + "$"):
        dataclasses.replace(cls(), **changes)
    with pytest.raises(UserError, match="^" + re.escape(message.replace(f"{cls.suite}.", "sweep.", 1)) + "$"):
        cls.from_dict({k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()}, prefix="sweep")


def test_validate_checks_the_rules_between_fields():
    with pytest.raises(BenchError, match=r"^sudoku\.min_givens: must not exceed max_givens = 60 .*, got 70$"):
        dataclasses.replace(SudokuSweep(), min_givens=70, max_givens=60).validate()
    dataclasses.replace(SudokuSweep(), min_givens=60, max_givens=60).validate()
    # BDH's n = neuron_mult x width neurons must split into n_head heads of an even size (RoPE pairs)
    sweep = dataclasses.replace(BoardPathSweep.preset("quick"), widths=(16, 6), neuron_mult=1, n_head=2)
    with pytest.raises(BenchError, match=r"^boardpath\.widths: at width 6 BDH has n = .* = 6 neurons, not a multiple"):
        sweep.validate()
    dataclasses.replace(sweep, widths=(16, 8)).validate()
    for cls in SUITES:
        for sweep in (cls(), cls.preset("quick"), cls.preset("full")):
            sweep.validate()


@pytest.mark.parametrize(
    "cls, model, message",
    [
        (RecallSweep, "hyperset", "recall.models: 'hyperset' cannot run in the recall suite: HyperSETConfig.causal: "),
        (SudokuSweep, "baseconv", "sudoku.models: 'baseconv' cannot run in the sudoku suite: BaseConvConfig.causal: "),
        (BoardPathSweep, "mamba", "boardpath.models: 'mamba' cannot run in the boardpath suite: MambaConfig.causal: "),
    ],
)
def test_a_model_without_the_suites_form_is_refused_in_one_line_when_the_sweep_is_validated(cls, model, message):
    sweep = dataclasses.replace(cls.preset("quick"), models=("bdh", model))  # a registered model: in the range
    with pytest.raises(BenchError, match="^" + re.escape(message)) as refused:
        sweep.validate()
    assert "\n" not in str(refused.value)


def test_every_model_the_bench_can_size_runs_in_the_suites_that_have_its_form():
    """What a suite accepts is decided by the model's config (its for_budget refusing the form it lacks), never by a
    list of names: every registered model is in recall (causal) or in the board suites (bidirectional), or both."""
    for model in bench_models():
        runs_in = []
        for cls in SUITES:
            try:
                dataclasses.replace(cls.preset("quick"), models=(model,)).validate()
                runs_in.append(cls.suite)
            except BenchError as exc:
                assert "cannot run in the" in str(exc), exc
        assert runs_in, model
        assert ("boardpath" in runs_in) == ("sudoku" in runs_in), (model, runs_in)  # both bidirectional
        if model == REFERENCE or model in BDH_VARIANTS or model == "gpt":  # both forms
            assert runs_in == ["recall", "boardpath", "sudoku"], (model, runs_in)


def test_bench_options_are_typed():
    assert BenchOptions(out="somewhere").out.name == "somewhere"  # a string is a path
    with pytest.raises(UserError, match=r"^BenchOptions\.threads: must be an integer >= 1 or null, got 0$"):
        BenchOptions(threads=0)
    with pytest.raises(UserError, match=r"^BenchOptions\.overwrite: resume continues the output folder"):
        BenchOptions(resume=True, overwrite=True)
