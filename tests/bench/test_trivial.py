"""The trivial answer of each suite: its reference row is scored exactly, by the models' evaluation, and it never
wins or counts as a model."""

import dataclasses

import numpy as np
import pytest

from bdh.bench import boardpath, recall, sudoku, trivial
from bdh.bench.results import best_over_lr, results_markdown, summarize
from bdh.bench.spec import NO_WINNER, TRIVIAL
from bdh.bench.trivial import trivial_rows
from bdh.tasks.boardpath import END, FLOOR, PATH, START, WALL, BoardPath, BoardPathConfig


def test_boardpath_trivial_row_scores_the_touching_share_and_the_off_path_share():
    sweep = dataclasses.replace(
        boardpath.BoardPathSweep.preset("quick"), board_sizes=(4, 6), seeds=(0, 1), widths=(16, 32)
    )
    rows = trivial_rows(boardpath.SUITE, boardpath.plan(sweep))
    # one row per (setting, width, seed), not trained
    assert sorted((r["setting"], r["width"], r["seed"]) for r in rows) == sorted(
        (f"S{s}", w, seed) for s in (4, 6) for w in (16, 32) for seed in (0, 1)
    )
    for r in rows:
        assert r["model"] == TRIVIAL and r["reference"] == "trivial (predict no path)"
        assert r["params"] == 0 and r["state_size"] == 0 and r["lr"] == "" and r["steps"] == 0
    for S in (4, 6):
        task = BoardPath(
            BoardPathConfig(
                board_size=S,
                wall_prob=sweep.wall_prob,
                num_train=sweep.num_train,
                num_val=sweep.num_val,
                data_seed=sweep.data_seed,
            )
        )
        # the rule learned from the training boards: every input token is its own most frequent target (no PATH)
        prior = trivial.fit_token_prior(task, sweep.num_train, seed=0)
        assert prior.predictions()[[FLOOR, WALL, START, END]].tolist() == [FLOOR, WALL, START, END]
        # independently, from the validation boards: START and END touch, and the cells off the path
        x, y = (a[: sweep.num_val] for a in task.dataset(0))
        start, end = np.argmax(x == START, axis=1), np.argmax(x == END, axis=1)
        touching = (np.abs(start // S - end // S) + np.abs(start % S - end % S)) == 1
        off_path = (y != PATH).mean()
        assert 0 < touching.mean() < 1 and off_path < 1  # both are non-trivial numbers
        # the metrics are float32 ratios, hence 1e-6; board accuracy: the boards with no path cell
        for r in (r for r in rows if r["setting"] == f"S{S}"):
            assert r["path_validity"] == pytest.approx(touching.mean(), abs=1e-6)
            assert r["board_accuracy"] == pytest.approx(touching.mean(), abs=1e-6)
            assert r["cell_accuracy"] == pytest.approx(off_path, abs=1e-6)
        # the training set is read once whatever the chunk (the last chunk is cut short): the counts of its cells
        inputs, targets = (a[sweep.num_val :] for a in task.dataset(0))
        counts = np.zeros((5, 5))
        np.add.at(counts, (inputs, targets), 1)
        expected = np.log((counts + 1) / (counts + 1).sum(axis=1, keepdims=True))
        for chunk in (7, 1024):
            table = trivial.fit_token_prior(task, sweep.num_train, seed=1, chunk=chunk).table.weight.numpy()
            assert np.allclose(table, expected, atol=1e-6)


def _grid(perm):
    """A valid solution grid (81 digits) with its digits relabelled by ``perm`` (perm[d - 1] replaces d)."""
    base = np.array([(r * 3 + r // 3 + c) % 9 + 1 for r in range(9) for c in range(9)])
    return np.asarray(perm)[base - 1]


def _csv(path, pairs):
    lines = ["puzzle,solution"] + [
        "".join(map(str, np.where(blank, 0, sol))) + "," + "".join(map(str, sol)) for sol, blank in pairs
    ]
    path.write_text("\n".join(lines) + "\n")


def test_sudoku_trivial_row_scores_the_most_frequent_training_digit(tmp_path):
    g1, g2 = _grid(range(1, 10)), _grid([4, 6, 1, 9, 3, 8, 2, 5, 7])
    # training blanks: every 7 of g1 and g2 and a few other cells, so 7 fills the blanks most often
    train = [(g1, g1 == 7), (g2, (g2 == 7) | (np.arange(81) < 3)), (g1, np.arange(81) % 10 == 0)]
    # validation: all blanks are 7 (solved); the 2s and the first 7s; one blank of 5 (none solved)
    val = [
        (g2, g2 == 7),
        (g1, (g1 == 2) | ((g1 == 7) & (np.arange(81) < 40))),
        (g2, np.arange(81) == np.argmax(g2 == 5)),
    ]
    _csv(tmp_path / "train.csv", train)
    _csv(tmp_path / "val.csv", val)
    # batches of two puzzles: the cell accuracy is pooled over blanks, not averaged over batches
    # the boards as written (augment relabels the digits of every batch, so that no digit fills most blanks)
    quick = sudoku.SudokuSweep.preset("quick")
    sweep = dataclasses.replace(quick, num_train=3, num_val=3, eval_batch_size=2, augment=False)
    suite = sudoku.suite_def(sweep)
    (row,) = trivial_rows(suite, sudoku.plan(sweep, (tmp_path / "train.csv", tmp_path / "val.csv")))
    assert row["reference"] == "trivial (predict the most frequent digit)" and row["depth"] == ""

    blanks = np.concatenate([sol[blank] for sol, blank in train])
    counts = np.bincount(blanks, minlength=10)
    digit = int(np.argmax(counts))
    assert digit == 7 and sorted(counts)[-2] < counts[7]
    vblanks = np.concatenate([sol[blank] for sol, blank in val])  # (the metrics are float32 ratios: 1e-6)
    assert row["cell_accuracy"] == pytest.approx((vblanks == digit).mean(), abs=1e-6)
    assert 0 < (vblanks == digit).mean() < 1
    assert row["board_accuracy"] == pytest.approx(1 / 3, abs=1e-6)
    # the loss: the add-one smoothed training frequencies of the blank's digits, over the 10 classes
    p = (counts + 1) / (counts.sum() + 10)
    assert row["val_loss"] == pytest.approx(-np.log(p[vblanks]).mean(), rel=1e-6)


def test_recall_trivial_row_is_near_chance():
    sweep = dataclasses.replace(recall.RecallSweep.preset("quick"), vocab_size=128, eval_length_factor=2)
    (row,) = trivial_rows(recall.suite_def(sweep), recall.plan(sweep))
    # values are drawn per example from V / 2 = 64 ids: a key's most frequent training value is chance
    assert row["longer_len"] == 64 and 0 <= row["accuracy"] < 4 / 64 and 0 <= row["accuracy_longer"] < 4 / 64


def _rows(table):
    """Result rows (one per seed) from {model: accuracy per seed}, at width 32; the trivial one has no lr."""
    return [
        {
            "suite": "recall",
            "model": m,
            "setting": "N64-D4",
            "seq_len": 64,
            "num_pairs": 4,
            "width": 32,
            "params": 0 if m == TRIVIAL else 1000,
            "lr": "" if m == TRIVIAL else 1e-3,
            "seed": seed,
            "accuracy": acc,
            **({"reference": "trivial (chance)"} if m == TRIVIAL else {}),
        }
        for m, accs in table.items()
        for seed, acc in enumerate(accs)
    ]


@pytest.mark.parametrize(
    "table,winner,note",
    [
        # the trivial row scores highest beyond the spread: bdh still wins, over gpt
        ({"bdh": (0.5, 0.6), "gpt": (0.1, 0.2), TRIVIAL: (0.9, 0.9)}, "bdh", "beyond the spread"),
        # bdh's range overlaps gpt's: no winner, whatever the trivial row scores
        ({"bdh": (0.5, 0.6), "gpt": (0.55, 0.56), TRIVIAL: (0.0, 0.0)}, None, "within the spread"),
        # one model and the trivial row: one model
        ({"bdh": (0.5, 0.6), TRIVIAL: (0.0, 0.0)}, None, "one model"),
    ],
)
def test_the_winner_rule_ignores_the_trivial_row(table, winner, note):
    suite = recall.suite_def(recall.RecallSweep())
    rows = _rows(table)
    # best over learning rates keeps the trivial rows (no learning rate) as they are
    kept = best_over_lr(rows, suite.score)
    assert sorted((r["model"], r["seed"]) for r in kept) == sorted((r["model"], r["seed"]) for r in rows)
    assert all(r["lrs_tried"] == "" for r in kept if r["model"] == TRIVIAL)
    summary = summarize(kept, suite)
    assert [r["model"] for r in summary][-1] == TRIVIAL  # after the models of its (setting, width)
    assert {(r["winner"], r["winner_note"]) for r in summary} == {(winner or NO_WINNER, note)}
    ref = summary[-1]
    assert ref["reference"] == "trivial (chance)" and all(r["reference"] == "" for r in summary[:-1])
    assert ref["accuracy_mean"] == pytest.approx(sum(table[TRIVIAL]) / 2)
    text = results_markdown(summary, suite)
    head = next(line for line in text.splitlines() if line.startswith("| model |")).split(" | ")
    (line,) = [line for line in text.splitlines() if line.startswith("| trivial (chance) |")]
    assert line.endswith("| reference |") and "**" not in line
    assert "`trivial (chance)` is the score of the trivial answer" in text
    mean = sum(table[TRIVIAL]) / 2
    assert line.split(" | ")[head.index("accuracy")] == f"{mean:.3f} ({min(table[TRIVIAL]):.3f}–{mean:.3f})"
