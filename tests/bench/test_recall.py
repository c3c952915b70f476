"""The recall suite's length generalisation: the longer evaluation, the models' lengths, validation."""

import dataclasses

import pytest
import torch

from bdh.bench import recall
from bdh.bench.recall import RecallSweep
from bdh.bench.results import evaluate_examples
from bdh.errors import UserError


class _Solver(torch.nn.Module):
    """Solves MQAR exactly (each query looks up the value after the key's first occurrence) on sequences
    of at most ``limit`` tokens (None: any length), and answers token 0 on longer ones."""

    def __init__(self, vocab: int, limit: int | None):
        super().__init__()
        self.vocab, self.limit = vocab, limit
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        logits = torch.zeros(B, T, self.vocab)
        if self.limit is None or T <= self.limit:
            for b in range(B):
                for t in range(T):
                    hits = (idx[b, :t] == idx[b, t]).nonzero()
                    if len(hits) and hits[0, 0] + 1 < t:
                        logits[b, t, idx[b, hits[0, 0] + 1]] = 1.0
        return logits + self.dummy


def _sweep(**kw):
    return dataclasses.replace(RecallSweep.preset("quick"), **{"vocab_size": 128, "eval_length_factor": 2, **kw})


def test_the_longer_evaluation_runs_at_k_times_the_length_with_the_same_pairs_and_vocabulary():
    sweep = _sweep(num_val_examples=16, eval_batch_size=8)
    spec = recall.plan(sweep)[0]
    extra = recall.LongerColumns(sweep)
    assert extra(spec, _Solver(128, None), None) == {"longer_len": 64, "accuracy_longer": pytest.approx(1.0)}
    # a model that recalls only up to the trained length: perfect at N, zero at 2 N
    short = _Solver(128, 32)
    from bdh.tasks.mqar import MQAR, MQARConfig

    trained = MQAR(MQARConfig(**{k: v for k, v in spec.task_section.items() if k != "name"}))
    assert evaluate_examples(short, trained, 8, None, 0)["accuracy"] == pytest.approx(1.0)
    assert extra(spec, short, trained)["accuracy_longer"] == pytest.approx(0.0)


def test_the_models_are_sized_for_the_longest_length():
    specs = recall.plan(_sweep())
    lengths = {s.model: s.model_section.get("seq_len") for s in specs}
    assert lengths == {"bdh": None, "gpt": 64, "baseconv": 64}  # BDH has RoPE and no length
    assert all(s.task_section["input_seq_len"] == 32 for s in specs)  # trained at N
    off = recall.plan(_sweep(eval_length_factor=1))
    assert {s.model_section.get("seq_len") for s in off if s.model != "bdh"} == {32}


def test_suite_columns_follow_the_factor():
    on = recall.suite_def(_sweep())
    assert on.extra is not None and on.extra_metrics == ["accuracy_longer"] and on.extra_settings == ["longer_len"]
    assert {"longer_len", "accuracy_longer"} <= set(on.columns())
    assert {"accuracy_longer_mean", "accuracy_longer_min", "accuracy_longer_max"} <= set(on.summary_columns())
    for k in (0, 1):
        off = recall.suite_def(_sweep(eval_length_factor=k))
        assert off.extra is None and "accuracy_longer" not in off.columns()


@pytest.mark.parametrize(
    "changes,msg",
    [
        ({"vocab_size": 64}, "vocab_size 64 must exceed every evaluated sequence length; the longest is 64"),
        ({"vocab_size": 64, "eval_length_factor": 0, "seq_lens": (64,)}, "the longest is 64"),
        ({"eval_length_factor": -1}, r"^recall\.eval_length_factor: must be an integer >= 0 \(0 or 1: no longer"),
        ({"eval_length_factor": 1.5}, r"^recall\.eval_length_factor: must be an integer >= 0 .*, got 1\.5$"),
        ({"seq_lens": (32, 33)}, "sequence lengths must be even"),
        ({"num_pairs": (16,)}, r"no \(seq_len, num_pairs\) setting with 4 \* num_pairs <= seq_len"),
    ],
)
def test_bad_sweeps_are_one_line_errors(changes, msg):
    """Out of a declared range: refused when the sweep is built (a UserError); a rule between fields: by
    ``validate`` (a BenchError, which is a UserError too)."""
    with pytest.raises(UserError, match=msg) as err:
        _sweep(**changes).validate()
    assert "\n" not in str(err.value)


def test_the_defaults_use_two_seeds_and_the_longer_evaluation():
    from bdh.bench.boardpath import BoardPathSweep
    from bdh.bench.sudoku import SudokuSweep

    for cls in (RecallSweep, BoardPathSweep, SudokuSweep):
        assert cls().seeds == (0, 1) and cls.preset("full").seeds == (0, 1) and cls.preset("quick").seeds == (0,)
    RecallSweep().validate()
    RecallSweep.preset("full").validate()
    assert RecallSweep().eval_length_factor == 2 and RecallSweep.preset("full").eval_length_factor == 2
