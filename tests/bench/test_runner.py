"""The bench runner's pieces: best over learning rates, per-slice evaluation, the summary over seeds and its
winner rule, tables, argument parsing."""

import math

import pytest
import torch

from bdh.bench.recall import RecallSweep, suite_def
from bdh.bench.results import best_over_lr, evaluate_examples, markdown_table, pick_winner, results_markdown, summarize
from bdh.bench.spec import NO_WINNER, run_key
from bdh.cli import main
from bdh.errors import UserError

RECALL = suite_def(RecallSweep())


def _rows():
    # accuracy by (model, width, lr, seed); gpt's best single run (lr 1e-2, seed 1) is not its best mean
    table = {
        ("bdh", 32): {1e-3: (0.2, 0.3), 3e-3: (0.6, 0.5), 1e-2: (0.1, float("nan"))},
        ("bdh", 64): {1e-3: (0.9, 0.8), 3e-3: (0.7, 0.7), 1e-2: (0.2, 0.2)},
        ("gpt", 32): {1e-3: (0.5, 0.5), 3e-3: (0.4, 0.4), 1e-2: (0.0, 0.95)},
        ("gpt", 64): {1e-3: ("", ""), 3e-3: (0.3, 0.3), 1e-2: (0.3, 0.3)},
    }
    rows = []
    for (m, w), by_lr in table.items():
        for lr, accs in by_lr.items():
            for seed, acc in enumerate(accs):
                rows.append(
                    {
                        "suite": "recall",
                        "model": m,
                        "setting": "N64-D4",
                        "width": str(w),
                        "lr": str(lr),
                        "seed": str(seed),
                        "accuracy": str(acc),
                        "loss": str(1 - lr),
                    }
                )
    return rows


def test_best_over_lr_picks_the_best_mean_per_model_setting_width():
    best = best_over_lr(_rows(), ["accuracy"])
    chosen = {(r["model"], r["width"]): float(r["lr"]) for r in best}
    assert chosen == {("bdh", "32"): 3e-3, ("bdh", "64"): 1e-3, ("gpt", "32"): 1e-3, ("gpt", "64"): 3e-3}
    # one row per seed of the chosen learning rate, and the learning rates compared are recorded
    assert len(best) == 8
    assert all(r["lrs_tried"] == "0.001;0.003;0.01" for r in best)
    assert [r["seed"] for r in best if r["model"] == "bdh" and r["width"] == "32"] == ["0", "1"]


def test_best_over_lr_breaks_ties_on_the_next_score_column_then_the_smaller_lr():
    rows = [
        {"model": "m", "setting": "s", "width": 8, "lr": lr, "seed": 0, "a": 0.5, "b": b}
        for lr, b in ((1e-3, 0.1), (3e-3, 0.7), (1e-2, 0.7))
    ]
    assert float(best_over_lr(rows, ["a", "b"])[0]["lr"]) == 3e-3
    assert float(best_over_lr(rows, ["a"])[0]["lr"]) == 1e-3


def test_run_key_normalises_csv_text():
    row = {
        "model": "bdh",
        "setting": "S4",
        "width": "16",
        "lr": "0.003",
        "seed": "0",
        "steps": "20",
        "batch_size": "16",
    }
    assert run_key(row) == run_key(
        {"model": "bdh", "setting": "S4", "width": 16, "lr": 3e-3, "seed": 0, "steps": 20.0, "batch_size": 16}
    )
    assert run_key(row) != run_key({**row, "steps": "40"}) and run_key(row) != run_key({**row, "lr": "0.001"})


class _RecallOnShort(torch.nn.Module):
    """Solves MQAR exactly (each query looks up the value after the key's first occurrence) on padded
    (short) examples, and answers 0 on full-length ones."""

    def __init__(self, vocab, pad):
        super().__init__()
        self.vocab, self.pad = vocab, pad
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        B, T = idx.shape
        logits = torch.zeros(B, T, self.vocab)
        for b in range(B):
            if not (idx[b] == self.pad).any():
                continue
            for t in range(T):
                hits = (idx[b, :t] == idx[b, t]).nonzero()
                if len(hits) and hits[0, 0] + 1 < T:
                    logits[b, t, idx[b, hits[0, 0] + 1]] = 1.0
        return logits + self.dummy


def test_evaluate_examples_keeps_mqar_slices_apart():
    from bdh.tasks.mqar import MQAR, MQARConfig

    task = MQAR(
        MQARConfig(
            vocab_size=64,
            input_seq_len=32,
            num_kv_pairs=2,
            val_slices=[[16, 2], [32, 4]],
            num_val_examples=24,
            num_train_examples=64,
            random_non_queries=False,
        )
    )
    model = _RecallOnShort(task.vocab_size, task.pad_id)
    got = evaluate_examples(model, task, batch_size=10, batches=None, seed=0)
    assert got["accuracy_kv2_len16"] == pytest.approx(1.0)
    assert got["accuracy_kv4_len32"] == pytest.approx(0.0)
    # Zoology's mean over examples (equal slices: 1/2), not the token-weighted 2/(2+4) of mixed batches
    assert got["accuracy"] == pytest.approx(0.5)
    assert math.isfinite(got["val_loss"])


def test_markdown_table_has_one_line_per_model_setting_width_and_the_suite_columns():
    best = best_over_lr(_rows(), ["accuracy"])
    text = markdown_table(summarize(best, RECALL), RECALL)
    lines = text.strip().splitlines()
    assert lines[0].startswith("| model | seq_len | num_pairs | longer_len | width |")
    assert "| accuracy | accuracy_longer |" in lines[0] and lines[0].endswith("| winner |")
    assert len(lines) == 2 + 4  # (bdh, gpt) x (32, 64), over two seeds each


def _seed_rows(table, setting="N64-D4", **extra):
    """Result rows (one per seed) of one learning rate from {(model, width): (accuracy per seed)}."""
    return [
        {
            "suite": "recall",
            "model": m,
            "setting": setting,
            "seq_len": 64,
            "num_pairs": 4,
            "width": w,
            "params": 1000,
            "lr": 1e-3,
            "seed": seed,
            "accuracy": acc,
            "val_loss": 2.0 + seed,
            "wall_s": 10.0 * (seed + 1),
            "tok_per_s": 100.0,
            **extra,
        }
        for (m, w), accs in table.items()
        for seed, acc in enumerate(accs)
    ]


@pytest.mark.parametrize(
    "scores,expected",
    [
        # gpt's lowest seed beats bdh's and baseconv's highest: a winner beyond the spread
        ({"bdh": [0.2, 0.4], "gpt": [0.5, 0.6], "baseconv": [0.1, 0.45]}, ("gpt", "beyond the spread")),
        # the best mean (gpt, 0.55) overlaps bdh's range: no winner
        ({"bdh": [0.3, 0.55], "gpt": [0.5, 0.6]}, (None, "within the spread")),
        # touching ranges are within the spread (the min must exceed the other max)
        ({"bdh": [0.3, 0.5], "gpt": [0.5, 0.6]}, (None, "within the spread")),
        # equal means are always within the spread
        ({"bdh": [0.5, 0.5], "gpt": [0.5, 0.5]}, (None, "within the spread")),
        # one seed: no spread, however large the gap
        ({"bdh": [0.9], "gpt": [0.1]}, (None, "one seed: no spread")),
        ({"bdh": [0.9, 0.95]}, (None, "one model")),
        # a NaN or missing seed counts as -inf: that model cannot win, and the others are compared to it
        ({"bdh": [0.9, float("nan")], "gpt": [0.5, 0.6]}, (None, "within the spread")),
        ({"bdh": [0.1, ""], "gpt": [0.5, 0.6]}, ("gpt", "beyond the spread")),
        ({"bdh": [float("nan")] * 2, "gpt": [None, None]}, (None, "no score")),
    ],
)
def test_pick_winner_declares_a_winner_only_beyond_the_spread(scores, expected):
    assert pick_winner(scores) == expected


def test_summarize_gives_mean_min_max_over_seeds_and_the_winner_per_setting_width():
    rows = _seed_rows(
        {
            ("bdh", 32): (0.80, 0.90),  # wins width 32: 0.80 > gpt's 0.60
            ("gpt", 32): (0.50, 0.60),
            ("bdh", 64): (0.40, 0.70),  # best mean at width 64, but within gpt's range
            ("gpt", 64): (0.50, 0.55),
        }
    )
    summary = summarize(rows, RECALL)
    by = {(r["model"], r["width"]): r for r in summary}
    assert [(r["model"], r["width"]) for r in summary] == [("bdh", 32), ("gpt", 32), ("bdh", 64), ("gpt", 64)]
    b = by[("bdh", 32)]
    assert b["accuracy_mean"] == pytest.approx(0.85) and b["accuracy_min"] == 0.8 and b["accuracy_max"] == 0.9
    assert b["val_loss_mean"] == pytest.approx(2.5) and b["wall_s_min"] == 10.0 and b["wall_s_max"] == 20.0
    assert b["seeds"] == "0;1" and b["params"] == 1000 and b["lr"] == 1e-3
    assert b["accuracy_longer_mean"] == ""  # no such column in these rows: empty, not an error
    assert {r["winner"] for r in summary if r["width"] == 32} == {"bdh"}
    assert {(r["winner"], r["winner_note"]) for r in summary if r["width"] == 64} == {(NO_WINNER, "within the spread")}
    # the columns of summary.csv hold every key of a summary row
    assert set(summary[0]) == set(RECALL.summary_columns())

    text = results_markdown(summary, RECALL)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + 4 and "One seed: no spread" not in text
    cells = [line.split(" | ") for line in lines]
    acc, win = cells[0].index("accuracy"), cells[0].index("winner |")
    assert cells[1][0] == "| bdh" and cells[1][acc] == "**0.850 (0.800–0.900)**" and cells[1][win] == "bdh |"
    assert cells[2][acc] == "0.550 (0.500–0.600)"  # the loser is not bold
    assert cells[3][acc] == "0.550 (0.400–0.700)" and cells[3][win] == f"{NO_WINNER} (within the spread) |"
    assert "**" not in lines[3] + lines[4]


def test_one_seed_declares_no_winner_and_says_so():
    summary = summarize(_seed_rows({("bdh", 32): (0.9,), ("gpt", 32): (0.1,)}), RECALL)
    assert [(r["winner"], r["seeds"]) for r in summary] == [(NO_WINNER, "0"), (NO_WINNER, "0")]
    assert summary[0]["accuracy_min"] == summary[0]["accuracy_max"] == 0.9
    text = results_markdown(summary, RECALL)
    assert "One seed: no spread" in text and "**0.900" not in text
    assert "| 0.900 |" in text and "(0.900–0.900)" not in text  # one value, no range
    assert f"{NO_WINNER} (one seed: no spread)" in text


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--lrs=-1e-3", "--lrs: must be numbers > 0, got [-0.001]"),  # the sweep's declared range, named by the flag
        ("--lrs=1e-3,x", "--lrs: 'x' is not a number (expected a comma-separated list of numbers)"),
        ("--lrs=1e-3,1e-3", "--lrs: repeated values in '1e-3,1e-3'"),
        ("--seeds=-1", "--seeds: must be integers in [0, 2**63), got [-1]"),
        ("--models=bdh,", "--models: expected a comma-separated list of strings, got 'bdh,'"),
    ],
)
def test_bench_list_flags_are_parsed_then_checked_by_the_sweep(flag, message, capsys):
    assert main(["bench", "recall", "--quick", "--dry-run", flag]) == 2
    assert capsys.readouterr().err == f"bdh: error: {message}\n"


def test_closest_by_params_finds_the_closest_width():
    from bdh.baselines.baseconv import BaseConvConfig
    from bdh.sizing import closest_by_params

    budget = BaseConvConfig(vocab_size=64, seq_len=32, n_embd=40).num_params() + 3
    cfg = closest_by_params(budget, lambda d: BaseConvConfig(vocab_size=64, seq_len=32, n_embd=d), step=8)
    assert cfg.n_embd == 40
    with pytest.raises(UserError, match="no width fits a budget of 1 parameters"):
        closest_by_params(1, lambda d: BaseConvConfig(vocab_size=64, seq_len=32, n_embd=d), step=8, start=8192)


def test_a_suite_where_lower_is_better_picks_the_lowest_and_keeps_the_numbers():
    """A loss suite (``higher_is_better=False``, the relatives experiment's bits per byte): the best learning rate
    and the winner are the lowest means, a NaN is still the worst, and every value is written as measured."""
    import dataclasses

    rows = [
        {"model": m, "setting": "s", "width": 8, "lr": lr, "seed": seed, "accuracy": v}
        for m, by_lr in {
            "a": {1e-3: (2.0, 2.2), 3e-3: (1.5, 1.6)},
            "b": {1e-3: (1.8, 1.9), 3e-3: (float("nan"), 1.0)},
        }.items()
        for lr, vals in by_lr.items()
        for seed, v in enumerate(vals)
    ]
    best = best_over_lr(rows, ["accuracy"], higher_is_better=False)
    assert {(r["model"], r["lr"]) for r in best} == {("a", 3e-3), ("b", 1e-3)}  # b's NaN seed makes 3e-3 the worst
    assert [r["accuracy"] for r in best if r["model"] == "a"] == [1.5, 1.6]  # not negated
    assert pick_winner({"a": [1.5, 1.6], "b": [1.8, 1.9]}, higher_is_better=False) == ("a", "beyond the spread")
    assert pick_winner({"a": [1.5, 1.6], "b": [1.8, 1.9]}) == ("b", "beyond the spread")
    assert pick_winner({"a": [1.5, float("nan")], "b": [1.8, 1.9]}, False) == (None, "within the spread")
    loss = dataclasses.replace(RECALL, higher_is_better=False)
    summary = summarize(best, loss)
    assert {r["winner"] for r in summary} == {"a"} and summary[0]["accuracy_mean"] == pytest.approx(1.55)
    assert "(lower is better)" in results_markdown(summary, loss) and "(higher is better)" in results_markdown(
        summary, RECALL
    )


def test_a_quick_bench_says_it_is_a_smoke_test(tmp_path, capsys):
    """Models at chance look alike in a --quick table: the terminal says the run is no verdict."""
    tiny = ["--quick", "--models", "bdh", "--steps", "1", "--seeds", "0", "--lrs", "1e-3", "--widths", "8"]
    assert main(["bench", "recall", *tiny, "--threads", "1", "--out", str(tmp_path / "b")]) == 0
    assert "--quick is a smoke test" in capsys.readouterr().err
